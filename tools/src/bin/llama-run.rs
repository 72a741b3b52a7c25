//! llama-run: generate text with a GGUF MoE model, streaming it, then print
//! load time, prompt and generation speed, and expert traffic (the tool is
//! `tools::run`; this parses the command line and sets the exit code).

use std::process::ExitCode;

use common::cli;
use common::flags::{self, ParseError, Tool};
use tools::run::{Args, TOOL};

fn main() -> ExitCode {
    let stderr_guard = common::signals::protect_stderr();
    common::signals::install_sigint();
    let args = match flags::parse_from::<Args>(Tool::Run, std::env::args_os(), &flags::process_env)
    {
        Ok(a) => a,
        Err(ParseError::Flag(e)) => {
            eprintln!("{TOOL}: error: {e}");
            return ExitCode::FAILURE;
        }
        Err(ParseError::Clap(e)) => {
            // print (usage errors, --help, --version) and let the stderr
            // forwarder drain before exiting
            let _ = e.print();
            drop(stderr_guard);
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let code = cli::main_wrapper(TOOL, || tools::run::main(&args));
    drop(stderr_guard);
    // a clean end after SIGINT (130) or a closed stdout (141)
    match common::signals::exit_code() {
        Some(c) if code == ExitCode::SUCCESS => ExitCode::from(c),
        _ => code,
    }
}
