//! llama-quantize: convert a GGUF model's matrices to another type with
//! llama.cpp's mixes (`llama-quantize IN.gguf OUT.gguf Q4_K_M`), or one type
//! for all with `--pure` (the tool is `tools::quantize`; this parses the
//! command line).

use std::process::ExitCode;

use common::cli;
use common::flags::{self, Tool};
use tools::quantize::cli::{run, Args, TOOL};

fn main() -> ExitCode {
    let args: Args = flags::parse_or_exit(Tool::Quantize);
    cli::main_wrapper(TOOL, || run(args))
}
