//! The error of the backends and their buffers: allocation, copies, compute.
//!
//! Everything that moves or computes bytes (buffers, [`crate::graph::Graph`]'s
//! reads and writes, the backends) reports through [`BackendError`]; it
//! names no other module, so every layer can use it.

/// Errors from backends: allocation, copies and compute.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum BackendError {
    /// A device or library is not present (e.g. no CUDA driver).
    #[error("no device: {0}")]
    NoDevice(String),
    /// Memory could not be allocated.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// A read, write or copy outside a buffer or tensor.
    #[error("out of bounds: {0}")]
    OutOfBounds(String),
    /// A tensor has no memory yet.
    #[error("tensor '{0}' has no memory allocated")]
    NotAllocated(String),
    /// The backend cannot run this op or reach this memory.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// An op's input is invalid (e.g. an expert id out of range).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A buffer is read-only (mapped weights).
    #[error("buffer '{0}' is read-only")]
    ReadOnly(String),
    /// The device reported an error.
    #[error("device error: {0}")]
    Device(String),
}
