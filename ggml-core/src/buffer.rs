//! Memory owned by a backend: the [`Buffer`] trait, what a buffer holds
//! ([`BufferUsage`]), and the range check every read and write makes.
//!
//! Tensors point into buffers ([`crate::tensor::TensorData`]); the backends
//! ([`crate::backend`]) allocate them and move bytes in and out.

use std::any::Any;
use std::fmt;

use crate::error::BackendError;

/// What a buffer holds, which decides how the scheduler treats its tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferUsage {
    /// Model weights: read-only during compute.
    Weights,
    /// Activations, KV cache, copies of inputs.
    Compute,
}

/// A block of memory owned by a backend.
pub trait Buffer: Send + Sync + fmt::Debug {
    /// Name of the owning backend (`"CPU"`, `"SIM0"`, `"CUDA0"`).
    fn name(&self) -> &str;
    /// Size in bytes.
    fn size(&self) -> usize;
    /// Whether the CPU can read this memory directly (host memory).
    fn is_host(&self) -> bool;
    /// What the buffer holds.
    fn usage(&self) -> BufferUsage;
    /// Copy `data` into the buffer at `offset` (synchronous).
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), BackendError>;
    /// Copy bytes at `offset` out of the buffer (synchronous).
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError>;
    /// Base address for CPU kernels, where the memory is host-addressable to
    /// the owning backend's kernels (CPU memory, the sim device's memory).
    /// `None` for real device memory.
    fn base_ptr(&self) -> Option<*mut u8>;
    /// Whether compute may write into this buffer.
    fn is_writable(&self) -> bool {
        true
    }
    /// Whether the CPU's kernels reach this host memory only through a
    /// copy: the scheduler then treats a CPU split that reads it as reading
    /// a host weight it cannot use, and offers it to the copy hook (a host
    /// expert cache's slot maps, whose hook fills the cache from disk
    /// before the lookup). `false` for ordinary memory.
    fn copied_for_cpu(&self) -> bool {
        false
    }
    /// For downcasting by the owning backend.
    fn as_any(&self) -> &dyn Any;
}

/// Check that `[offset, offset + len)` lies within a buffer of `size` bytes.
pub fn check_range(name: &str, size: usize, offset: usize, len: usize) -> Result<(), BackendError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(BackendError::OutOfBounds(format!(
            "{len} bytes at offset {offset} in buffer '{name}' of {size} bytes"
        ))),
    }
}
