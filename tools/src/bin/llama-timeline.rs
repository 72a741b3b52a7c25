//! llama-timeline: draw a timeline written by `--timeline-out` (Chrome trace
//! JSON) as an SVG picture, whole or a time window of it.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use common::cli;
use common::flags::{self, Tool};
use tools::timeline::{svg, Args};

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
    let args: Args = flags::parse_or_exit(Tool::Timeline);
    cli::main_wrapper("llama-timeline", || run(&args))
}
