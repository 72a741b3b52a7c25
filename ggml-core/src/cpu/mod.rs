//! The CPU backend: host buffers, a persistent worker pool, and kernels that
//! pick AVX2/FMA/F16C paths at run time (scalar references kept for tests).

pub mod buffer;
pub mod ops;
pub mod pool;
pub mod scratch;
pub mod view;

use std::sync::Arc;

use crate::backend::{Backend, BackendError, Buffer, BufferUsage};
use crate::graph::Graph;
use crate::tensor::TensorId;

pub use buffer::{HostBuffer, MappedBuffer};
pub use pool::ThreadPool;

/// The CPU backend.
pub struct CpuBackend {
    pool: ThreadPool,
}

impl CpuBackend {
    /// A CPU backend with `n_threads` worker threads (the caller's included).
    pub fn new(n_threads: usize) -> CpuBackend {
        CpuBackend {
            pool: ThreadPool::new(n_threads),
        }
    }

    /// Number of threads.
    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// What the worker pool did so far: jobs and sleeps (wake-up costs).
    pub fn pool_stats(&self) -> pool::PoolStats {
        self.pool.stats()
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "CPU"
    }

    fn is_host(&self) -> bool {
        true
    }

    fn alloc_buffer(
        &self,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Arc<dyn Buffer>, BackendError> {
        Ok(Arc::new(HostBuffer::new(size, usage)?))
    }

    fn can_use_buffer(&self, buf: &dyn Buffer) -> bool {
        buf.is_host()
    }

    fn supports_op(&self, g: &Graph, node: TensorId) -> bool {
        ops::supports(g, node)
    }

    fn compute(&self, g: &Graph, nodes: &[TensorId]) -> Result<(), BackendError> {
        let accept = |b: &dyn Buffer| b.is_host();
        let ctx = ops::ComputeCtx {
            pool: &self.pool,
            g,
            backend: "CPU",
            accept: &accept,
        };
        for &n in nodes {
            ops::compute_node(&ctx, n)?;
        }
        Ok(())
    }
}
