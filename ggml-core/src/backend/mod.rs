//! The backend traits (`ggml-backend-impl.h` in spirit): a backend owns
//! buffers, moves bytes in and out of them, and computes lists of graph
//! nodes.
//!
//! ggml splits a backend in two interfaces, and so do we; what a backend
//! records about itself is a third, optional part:
//!
//! | trait | ggml | holds |
//! |---|---|---|
//! | [`BackendDevice`] | `ggml_backend_device_i` (and its buffer type) | `get_name`, `get_type` ([`BackendDevice::is_host`]), `get_memory`, the buffer type's `alloc_buffer` and `get_alloc_size` padding ([`BackendDevice::read_overhang`]), `supports_op`, `offload_op`, `supports_buft` ([`BackendDevice::can_use_buffer`]), `buffer_from_host_ptr` in spirit ([`BackendDevice::pin_host`]) |
//! | [`BackendStream`] | `ggml_backend_i` | `graph_compute` ([`BackendStream::compute`]), `set_tensor_async`/`get_tensor_async` on streams, `event_record`/`event_wait` (and ggml's device-side `event_synchronize`, kept here with the other event methods), `synchronize`, `cpy_tensor_async` ([`BackendStream::copy_from_peer`]) |
//! | [`BackendDiagnostics`] | (none) | copy labels, pipeline counters, link counters (RPC), event timelines, busy time, the sim clock |
//! | [`Backend`] | `ggml_backend_t` | the whole: device and stream, and its diagnostics if it keeps any |
//!
//! One object implements all of them (as a `ggml_backend_t` reaches its
//! device), and the rest of the engine holds it as `Arc<dyn Backend>`. A
//! minimal backend implements the five required device methods and
//! [`BackendStream::compute`], and writes `impl Backend for X {}`: the
//! other methods' defaults are a host backend's, and it has no diagnostics
//! ([`Backend::diagnostics`] is `None`), so it never reads that trait.
//! `ggml-sched/tests/minimal_backend.rs` is one, in six methods, which the
//! scheduler runs a graph on.
//!
//! The scheduler (`ggml-sched`) and the model code talk to devices only
//! through these traits, so the CPU, the simulated device and CUDA plug in
//! the same way. The scheduler uses only the device and stream parts
//! (`ggml-sched/tests/backend_parts.rs` checks its sources); the model code
//! labels copies and reads counters through [`Backend::diagnostics`].
//! Waits that a test double may single out say their kind
//! ([`WaitKind`], [`BackendStream::wait_event_for`]): the emulated CUDA
//! device's planted bugs live behind its driver, not in these traits.

mod device;
mod diagnostics;
mod stream;

pub use crate::buffer::{check_range, Buffer, BufferUsage};
pub use crate::error::BackendError;
pub use device::BackendDevice;
pub use diagnostics::BackendDiagnostics;
pub use stream::{BackendStream, Event, Stream, WaitKind};

use crate::tensor::TensorData;

/// A backend: its device and its stream ([`BackendDevice`],
/// [`BackendStream`]), and what it records about its work where it records
/// anything ([`BackendDiagnostics`]).
pub trait Backend: BackendStream {
    /// This backend's diagnostics, where it keeps any (the CPU's busy time
    /// and joined clock, a device's counters, labels and timelines); `None`,
    /// the default, for a backend that records nothing.
    fn diagnostics(&self) -> Option<&dyn BackendDiagnostics> {
        None
    }
}

/// Copy `len` bytes between two tensors' memory on any backends, staging
/// through host memory when neither side is host-addressable.
pub fn copy_bytes(
    src: &TensorData,
    src_off: usize,
    dst: &TensorData,
    dst_off: usize,
    len: usize,
) -> Result<(), BackendError> {
    if src.buffer.is_host() {
        if let Some(p) = src.buffer.base_ptr() {
            check_range(
                src.buffer.name(),
                src.buffer.size(),
                src.offset + src_off,
                len,
            )?;
            // SAFETY: the range was checked against the source buffer's size;
            // host buffers stay alive while `src` holds its Arc, and compute
            // does not write weights or inputs that are being copied.
            let s = unsafe { std::slice::from_raw_parts(p.add(src.offset + src_off), len) };
            return dst.buffer.write(dst.offset + dst_off, s);
        }
    }
    let mut tmp = vec![0u8; len];
    src.buffer.read(src.offset + src_off, &mut tmp)?;
    dst.buffer.write(dst.offset + dst_off, &tmp)
}
