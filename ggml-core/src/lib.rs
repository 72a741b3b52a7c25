#![doc = include_str!("../README.md")]
//!
//! ## How it works
//!
//! The ggml layer of the engine: element types (with the GGUF block quants),
//! tensors described by ggml's `ne`/`nb`, compute graphs built by op
//! constructors, the backend traits, a backend-neutral timeline and the
//! clock trait backends share, the CPU backend, a simulated device
//! backend, and GGUF file I/O.
//!
//! Data flows: a GGUF file is mapped (`gguf`) and its tensors become leafs
//! of a [`graph::Graph`] whose data points into the mapping; op constructors
//! add nodes; a backend (directly, or through `ggml-sched`) computes the
//! nodes in dependency order, each kernel reading its sources through
//! [`tensor::TensorData`] (a buffer and an offset).
//!
//! ## Layers
//!
//! Each module imports only from the ones before it (no import circle
//! outside `quants`; `scripts/import-cycles` checks it):
//! [`types`] and [`quants`]; [`op`] and [`error`]; [`buffer`], [`tensor`]
//! and [`graph`]; [`timeline`] (spans, the Chrome trace, hazard checks)
//! and [`clock`] (the [`clock::DeviceClock`] a backend advances);
//! [`backend`] (the traits, naming no simulator type) and [`offload`];
//! [`cpu`]; then [`sim`], which sits on the backend traits and the CPU
//! kernels: its [`sim::SimClock`] implements `DeviceClock`, which is how a
//! [`cpu::CpuBackend`] joins the sim device's timeline, and it fills the
//! same [`timeline::Timeline`] the CUDA backend fills from its events.
//! [`gguf`] needs only [`types`].

#![warn(missing_docs)]

pub mod backend;
pub mod buffer;
pub mod clock;
pub mod cpu;
pub mod error;
pub mod gguf;
pub mod graph;
pub mod link;
pub mod offload;
pub mod op;
pub mod pipeline;
pub mod quants;
pub mod sim;
pub mod tensor;
pub mod timeline;
pub mod types;

pub use backend::{
    Backend, BackendDevice, BackendDiagnostics, BackendStream, Event, Stream, WaitKind,
};
pub use buffer::{Buffer, BufferUsage};
pub use clock::DeviceClock;
pub use cpu::CpuBackend;
pub use error::BackendError;
pub use graph::Graph;
pub use link::{LinkCounters, LinkCounts};
pub use op::Op;
pub use pipeline::{PipelineCounters, PipelineCounts};
pub use sim::{SimBackend, SimClock, SimProfile};
pub use tensor::{Tensor, TensorData, TensorId};
pub use timeline::Timeline;
pub use types::{GgmlType, TypeTraits};
