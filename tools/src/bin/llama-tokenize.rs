//! llama-tokenize: print the tokens of a text with a GGUF model's
//! vocabulary (the tool is `tools::tokenize`; this parses the command line).

use std::process::ExitCode;

use clap::Parser;
use common::cli;
use tools::tokenize::{run, Args, TOOL};

fn main() -> ExitCode {
    let args = Args::parse_from(cli::normalize_args(std::env::args_os()));
    cli::main_wrapper(TOOL, || run(&args))
}
