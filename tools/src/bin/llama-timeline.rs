//! llama-timeline: draw a timeline written by `--timeline-out` (Chrome trace
//! JSON) as an SVG picture, whole or a time window of it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;
use common::cli;
use tools::timeline::svg;

#[derive(Parser, Debug)]
#[command(
    name = "llama-timeline",
    version,
    about = "Draw a --timeline-out trace (Chrome trace JSON) as an SVG picture."
)]
struct Args {
    /// the trace written by llama-run or llama-bench --timeline-out
    input: PathBuf,
    /// the SVG file to write
    output: PathBuf,
    /// start of the window, microseconds of simulated time
    #[arg(long = "from-us", value_name = "US")]
    from_us: Option<f64>,
    /// end of the window, microseconds of simulated time
    #[arg(long = "to-us", value_name = "US")]
    to_us: Option<f64>,
    /// draw only the last graph of the trace (one decode step when the run
    /// ended with one)
    #[arg(long = "last-graph", conflicts_with_all = ["from_us", "to_us"])]
    last_graph: bool,
}

fn run(a: &Args) -> Result<()> {
    let json = std::fs::read_to_string(&a.input)
        .with_context(|| format!("cannot read '{}'", a.input.display()))?;
    let (title, bars) = svg::parse(&json).with_context(|| format!("'{}'", a.input.display()))?;
    let (from, to) = if a.last_graph {
        let (f, t) =
            svg::last_graph_range(&bars).context("the trace has no host wait that ends a graph")?;
        (Some(f), Some(t))
    } else {
        (a.from_us, a.to_us)
    };
    let svg = svg::render(&title, &bars, from, to)?;
    std::fs::write(&a.output, svg).with_context(|| format!("cannot write '{}'", a.output.display()))
}

fn main() -> ExitCode {
    cli::main_wrapper("llama-timeline", || run(&Args::parse()))
}
