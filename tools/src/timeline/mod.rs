//! `llama-timeline`: a `--timeline-out` trace (Chrome trace JSON) read and
//! drawn as an SVG picture ([`svg`]): the trace's spans go in, one lane per
//! backend and stream comes out. [`Args`] is the command line.

pub mod svg;

use std::path::PathBuf;

use clap::Parser;

/// `llama-timeline`'s arguments, and its flags (each declared by the entry
/// of [`common::flags::table`] named as its field).
#[derive(Parser, Debug)]
#[command(
    name = "llama-timeline",
    version,
    about = "Draw a --timeline-out trace (Chrome trace JSON) as an SVG picture."
)]
pub struct Args {
    /// the trace written by llama-run or llama-bench --timeline-out
    pub input: PathBuf,
    /// the SVG file to write
    pub output: PathBuf,
    /// `--from-us`: the start of the window.
    #[arg(long)]
    pub from_us: Option<f64>,
    /// `--to-us`: the end of the window.
    #[arg(long)]
    pub to_us: Option<f64>,
    /// `--last-graph`: only the last graph of the trace.
    #[arg(long, conflicts_with_all = ["from_us", "to_us"])]
    pub last_graph: bool,
}
