//! # ggml-core
//!
//! The ggml layer of the engine: element types (with the GGUF block quants),
//! tensors described by ggml's `ne`/`nb`, compute graphs built by op
//! constructors, the backend traits, the CPU backend, a simulated device
//! backend, and GGUF file I/O.
//!
//! Data flows: a GGUF file is mapped ([`gguf`]) and its tensors become leafs
//! of a [`graph::Graph`]; op constructors add nodes; a backend (directly, or
//! through `ggml-sched`) computes the nodes in dependency order.

pub mod gguf;
pub mod types;

pub use types::{GgmlType, TypeTraits};
