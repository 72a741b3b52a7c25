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
//! inputs, and computes it; the logits feed [`sampling`]. Before loading,
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
pub mod placement;
pub mod sampling;
pub mod tokenizer;

pub use batch::Batch;
pub use context::{Context, ContextParams, HostTime, TransferStats};
pub use device_stats::DeviceStats;
pub use error::{LlamaError, Result};
pub use kv_cache::SeqId;
pub use model::{Model, ModelParams};
pub use sampling::{Sampler, SamplerParams};
