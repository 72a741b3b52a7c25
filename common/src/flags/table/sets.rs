//! The sets of tools that take an entry of the table (`RUN_SERVER`:
//! llama-run and llama-server), as the entries name them.

use crate::flags::spec::Tool;

/// `llama-run` only.
pub const RUN: &[Tool] = &[Tool::Run];
/// `llama-server` only.
pub const SERVER: &[Tool] = &[Tool::Server];
/// `llama-run` and `llama-server`.
pub const RUN_SERVER: &[Tool] = &[Tool::Run, Tool::Server];
/// `llama-run` and `llama-tokenize`.
pub const RUN_TOKENIZE: &[Tool] = &[Tool::Run, Tool::Tokenize];
/// `llama-bench` only.
pub const BENCH: &[Tool] = &[Tool::Bench];
/// `llama-quantize` only.
pub const QUANTIZE: &[Tool] = &[Tool::Quantize];
/// `llama-tokenize` only.
pub const TOKENIZE: &[Tool] = &[Tool::Tokenize];
/// `llama-moe-cache` only.
pub const MOE_CACHE: &[Tool] = &[Tool::MoeCache];
/// `llama-timeline` only.
pub const TIMELINE: &[Tool] = &[Tool::Timeline];
