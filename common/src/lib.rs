#![doc = include_str!("../README.md")]
//!
//! ## How it works
//!
//! What every tool (`llama-run`, `llama-bench`, `llama-moe-cache`, ...) and
//! `llama-server` share, as llama.cpp keeps it in `common/`.
//!
//! Data flows: the command line goes through [`args`] (llama.cpp's
//! spellings rewritten into what clap parses, unsupported flags refused by
//! name) into the flag groups of [`cli`] (placement, batch, expert cache)
//! and [`args::prefetch`]; [`cli::load_model`] opens the device, applies the
//! placement and loads the model (or the embedded default model,
//! [`default_model`]) with a [`progress`] display. A run streams its text
//! through [`stream`] (whole UTF-8 characters only), in a [`chat`]
//! conversation when asked, stops cleanly on [`signals`], and ends with the
//! [`summary`] (speed, expert traffic, cache hit rates, the
//! [`hybrid_summary`], the [`prefetch_report`], simulated time from
//! [`simtime`]); files it writes go through [`outfile`] (atomic).
//! [`fit`] plans the device memory before loading (`--fit on`).
//! [`devices`] lists what `--device` can name; [`tok`] is the one place
//! the tools touch the tokenizer. [`forced`] reads `--expert-trace-in`.

#![warn(missing_docs)]

pub mod args;
pub mod chat;
pub mod cli;
pub mod default_model;
pub mod devices;
pub mod draft;
pub mod fit;
pub mod flags;
pub mod forced;
pub mod host_cache_summary;
pub mod hybrid_summary;
pub mod outfile;
pub mod pipeline_summary;
pub mod prefetch_report;
pub mod progress;
pub mod rpc_summary;
pub mod signals;
pub mod simtime;
pub mod spec_summary;
pub mod stream;
pub mod summary;
pub mod tok;
