#![doc = include_str!("../README.md")]
//!
//! ## How it works
//!
//! MoE language models over ggml: what turns a GGUF file into tokens.
//!
//! Data flows: [`model::Model::load`] maps the file, checks every tensor and
//! places each weight (host memory or a device, by [`placement`] rules);
//! [`context::Context`] owns the KV cache (several sequences, see
//! [`kv_cache`] and [`batch`]) and the scheduler; each
//! `decode` builds the ubatch's graph with [`graph`] (shared blocks stacked by
//! the decoder, switched per architecture by [`arch::LayerStyle`]), binds the
//! inputs, and computes it; the logits feed [`sampling`]. The MoE features
//! (expert cache, prefetch, prediction, hybrid experts, forced routing)
//! have one owner in the context, [`moe_runtime::MoeRuntime`]: it builds
//! their states ([`moe_cache`]) from [`moe_runtime::MoeParams`], installs
//! the scheduler's copy hook over them, gives each graph its
//! [`graph::moe::MoeGraphInputs`], and reads their counters. Before loading,
//! [`fit`] can plan the devices' memory (`--fit on`) from the file's
//! header and each device's free memory.

#![warn(missing_docs)]

pub mod arch;
pub mod batch;
pub mod chat;
pub mod context;
pub mod device;
pub mod device_stats;
mod diagnostics;
pub mod error;
pub mod expert_copy;
pub mod fit;
pub mod graph;
pub mod hparams;
pub mod kv_cache;
pub mod model;
pub mod moe_cache;
pub mod moe_runtime;
pub mod placement;
pub mod sampling;
pub mod speculative;
pub mod tokenizer;
pub mod transfer_stats;

pub use batch::Batch;
pub use context::{Context, ContextParams, HostTime};
pub use device_stats::DeviceStats;
pub use error::{LlamaError, Result};
pub use kv_cache::SeqId;
pub use model::{Model, ModelParams};
pub use moe_runtime::{MoeParams, MoeRuntime, MoeStats};
pub use sampling::{Sampler, SamplerParams};
pub use transfer_stats::TransferStats;
