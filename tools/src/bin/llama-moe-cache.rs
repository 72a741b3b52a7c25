//! llama-moe-cache: replay a routing trace through every expert cache
//! policy and Belady's optimum; table, JSON, plot and advice
//! (tools::moe_cache).

use std::process::ExitCode;

use clap::Parser;
use tools::moe_cache::{run, Args};

fn main() -> ExitCode {
    let a = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
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
