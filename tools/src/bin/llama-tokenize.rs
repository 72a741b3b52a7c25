//! llama-tokenize: print the tokens of a text with a GGUF model's
//! vocabulary (the tool is `tools::tokenize`; this parses the command line).

use std::process::ExitCode;

use common::cli;
use common::flags::{self, Tool};
use tools::tokenize::{run, Args, TOOL};

fn main() -> ExitCode {
    let args: Args = flags::parse_or_exit(Tool::Tokenize);
    cli::main_wrapper(TOOL, || run(&args))
}
