//! The device interface (ggml's `ggml_backend_device_i`, with the buffer
//! type's allocation folded in): what a backend's hardware is and holds —
//! its name and kind, its memory and the buffers it allocates there, which
//! buffers and ops its kernels can use — with nothing queued or timed.

use std::any::Any;
use std::sync::Arc;

use crate::buffer::{Buffer, BufferUsage};
use crate::error::BackendError;
use crate::graph::Graph;
use crate::tensor::TensorId;

/// A compute device: its memory and what its kernels can do. Five methods
/// are required; the rest have the defaults of a device without limits,
/// pinning or overhang (a host backend's).
pub trait BackendDevice: Send + Sync {
    /// Backend name as users type it (`"CPU"`, `"SIM0"`, `"CUDA0"`)
    /// (`get_name`).
    fn name(&self) -> &str;

    /// Whether the backend computes on host memory (only the CPU backend)
    /// (`get_type` is `GGML_BACKEND_DEVICE_TYPE_CPU`).
    fn is_host(&self) -> bool;

    /// Allocate a buffer on this backend (its buffer type's
    /// `alloc_buffer`).
    fn alloc_buffer(
        &self,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Arc<dyn Buffer>, BackendError>;

    /// Whether this backend's kernels can read and write tensors in `buf`
    /// directly, without a copy (`supports_buft`).
    fn can_use_buffer(&self, buf: &dyn Buffer) -> bool;

    /// Whether this backend implements the node's op for its types and
    /// shapes (`supports_op`).
    fn supports_op(&self, g: &Graph, node: TensorId) -> bool;

    /// Whether this backend wants to run `node` even though its weight lives
    /// in host memory (worth it for large batches: `offload_op`).
    fn offload_op(&self, _g: &Graph, _node: TensorId) -> bool {
        false
    }

    /// `(free, total)` bytes of this backend's memory, where it knows them
    /// (a device with a capacity); `None` = unknown or unlimited
    /// (`get_memory`).
    fn memory(&self) -> Option<(usize, usize)> {
        None
    }

    /// Bytes this backend's kernels may read past the end of a weight tensor
    /// or a slice of one (e.g. vector loads of a whole tile). A partial copy
    /// must make that many bytes past its range valid. Zero for CPU and sim
    /// (the padding of ggml's buffer type `get_alloc_size`).
    fn read_overhang(&self) -> usize {
        0
    }

    /// Page-lock `bytes`, host memory this backend will copy from (the host
    /// weights of a mapped model, `--load-mode pin`), so that uploads from
    /// it run as asynchronous DMA at full link speed (`buffer_from_host_ptr`
    /// in spirit). The returned value keeps the lock and releases it on
    /// drop. `Ok(None)`: this backend gains nothing from page-locked memory
    /// (CPU kernels, the sim device); `Err`: it would, but the driver
    /// refused (the cause is in the error).
    #[allow(clippy::type_complexity)]
    fn pin_host(
        &self,
        _bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    ) -> Result<Option<Box<dyn Any + Send + Sync>>, BackendError> {
        Ok(None)
    }
}
