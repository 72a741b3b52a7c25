//! # tools
//!
//! The command-line tools over the `llama` crate, with llama.cpp's flags:
//! `llama-run` (generate text, report speed and expert traffic),
//! `llama-bench` (pp/tg throughput, [`bench`](mod@bench)), `llama-tokenize` (text to ids).
//! This library holds what they share: the synthetic model generator
//! ([`synth`], [`vocab`]), the cached embedded default model ([`cache`]),
//! chat templates and conversation ([`chat`]), flags and loading ([`cli`]), progress display ([`progress`]), UTF-8
//! streaming ([`stream`]) and the run summary ([`summary`]).

#![warn(missing_docs)]

pub mod args;
pub mod bench;
pub mod cache;
pub mod chat;
pub mod cli;
pub mod devices;
pub mod hybrid_summary;
pub mod moe_cache_tool;
pub mod outfile;
pub mod prefetch_report;
pub mod progress;
pub mod quantize;
pub mod signals;
pub mod simtime;
pub mod stream;
pub mod summary;
pub mod synth;
pub mod synth_arch;
pub mod synth_budget;
pub mod timeline_svg;
pub mod tok;
pub mod vocab;
