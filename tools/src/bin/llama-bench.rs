//! llama-bench: prompt processing (pp) and text generation (tg) throughput,
//! as llama.cpp's llama-bench measures and prints it. See [`tools::bench`].

use std::process::ExitCode;

use common::cli;
use tools::bench::args::{parse_args, Command};

const TOOL: &str = "llama-bench";

fn main() -> ExitCode {
    cli::main_wrapper(TOOL, || {
        let mut args = Vec::new();
        for a in std::env::args_os().skip(1) {
            match a.into_string() {
                Ok(s) => args.push(s),
                Err(a) => anyhow::bail!("argument {a:?} is not valid UTF-8"),
            }
        }
        match parse_args(args)? {
            Command::Print(s) => print!("{s}"),
            Command::ListDevices(rpc) => {
                print!("{}", tools::bench::sysinfo::list_devices(rpc.as_deref())?)
            }
            Command::Run(p) => tools::bench::run::run(&p)?,
        }
        Ok(())
    })
}
