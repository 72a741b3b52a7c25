//! # tools
//!
//! The command-line tools over the `llama` crate, with llama.cpp's flags,
//! one module tree per tool; each binary in `src/bin` only parses its
//! flags and calls in here:
//! `llama-run` ([`run`]: generate text, report speed and expert traffic),
//! `llama-bench` ([`bench`](mod@bench): pp/tg throughput),
//! `llama-quantize` ([`quantize`], its command line in [`quantize::cli`]),
//! `llama-moe-cache` ([`moe_cache`]: replay a routing trace through the
//! cache policies), `llama-timeline` ([`timeline`]: draw a trace) and
//! `llama-tokenize` ([`tokenize`]: text to ids).
//!
//! Data flows from the command line through `common` (flags, model
//! loading, the run summary) into the tool's module; the synthetic models
//! come from the `synth` crate.

#![warn(missing_docs)]

pub mod bench;
pub mod moe_cache;
pub mod quantize;
pub mod run;
pub mod timeline;
pub mod tokenize;
