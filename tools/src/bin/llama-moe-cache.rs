//! llama-moe-cache: replay a routing trace through every expert cache
//! policy and Belady's optimum; table, JSON, plot and advice
//! (tools::moe_cache).

use std::process::ExitCode;

use common::flags::{self, ParseError, Tool};
use tools::moe_cache::{run, Args};

fn main() -> ExitCode {
    let a =
        match flags::parse_from::<Args>(Tool::MoeCache, std::env::args_os(), &flags::process_env) {
            Ok(a) => a,
            Err(ParseError::Clap(e)) => {
                let code = if e.use_stderr() { 1 } else { 0 };
                let _ = e.print();
                return ExitCode::from(code);
            }
            Err(ParseError::Flag(e)) => {
                eprintln!("llama-moe-cache: error: {e}");
                return ExitCode::from(1);
            }
        };
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llama-moe-cache: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
