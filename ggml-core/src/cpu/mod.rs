//! The CPU backend: host buffers, a persistent worker pool, and kernels
//! from the kernel table of the SIMD level chosen once at start
//! ([`crate::quants::cpu_level`]: the best the CPU has, or a lower one
//! named by `GGML_CPU_LEVEL`; a level the CPU lacks makes `compute` fail
//! with the error naming it).

pub mod buffer;
pub mod ops;
pub mod pool;
pub mod scratch;
pub mod view;

use std::sync::Arc;

use crate::backend::{Backend, BackendDevice, BackendDiagnostics, BackendStream, Event, Stream};
use crate::buffer::{Buffer, BufferUsage};
use crate::clock::{ClockEvent, DeviceClock};
use crate::error::BackendError;
use crate::graph::Graph;
use crate::tensor::TensorId;

pub use buffer::{HostBuffer, MappedBuffer};
pub use pool::ThreadPool;

/// The CPU backend.
pub struct CpuBackend {
    pool: ThreadPool,
    clock: Option<Arc<dyn DeviceClock>>,
    /// [`BackendDiagnostics::busy_wall_ns`]: wall time inside `compute`.
    busy_ns: std::sync::atomic::AtomicU64,
}

impl CpuBackend {
    /// A CPU backend with `n_threads` worker threads (the caller's included).
    pub fn new(n_threads: usize) -> CpuBackend {
        CpuBackend {
            pool: ThreadPool::new(n_threads),
            clock: None,
            busy_ns: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Join a device's clock (the sim device's simulated clock): each op
    /// also advances `clock`'s host time by what the clock says it costs,
    /// on one timeline with the device (the kernels run as before).
    pub fn with_clock(mut self, clock: Arc<dyn DeviceClock>) -> CpuBackend {
        self.clock = Some(clock);
        self
    }

    /// Threads the next ops run on.
    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }

    /// Run the next ops on `n` threads, at most the number the backend was
    /// made with (llama.cpp's `ggml_backend_cpu_set_n_threads`: `-t` for a
    /// token, `-tb` for a prompt batch).
    pub fn set_n_threads(&self, n: usize) {
        self.pool.set_n_threads(n)
    }

    /// Threads the backend was made with.
    pub fn max_threads(&self) -> usize {
        self.pool.max_threads()
    }

    /// What the worker pool did so far: jobs and sleeps (wake-up costs).
    pub fn pool_stats(&self) -> pool::PoolStats {
        self.pool.stats()
    }
}

impl BackendDevice for CpuBackend {
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
        buf.is_host() && !buf.copied_for_cpu()
    }

    fn supports_op(&self, g: &Graph, node: TensorId) -> bool {
        ops::supports(g, node)
    }
}

impl BackendStream for CpuBackend {
    fn compute(&self, g: &Graph, nodes: &[TensorId]) -> Result<(), BackendError> {
        crate::quants::cpu_level_checked().map_err(|e| BackendError::Unsupported(e.to_string()))?;
        let t0 = std::time::Instant::now();
        let accept = |b: &dyn Buffer| b.is_host();
        let ctx = ops::ComputeCtx {
            pool: &self.pool,
            g,
            backend: "CPU",
            accept: &accept,
        };
        let mut r = Ok(());
        for &n in nodes {
            r = ops::compute_node(&ctx, n);
            if r.is_err() {
                break;
            }
            if let Some(c) = &self.clock {
                c.host_compute("CPU", g, n);
            }
        }
        self.busy_ns.fetch_add(
            t0.elapsed().as_nanos() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        r
    }

    fn record_event_on(&self, _stream: Stream) -> Result<Event, BackendError> {
        // CPU work is complete when the host has issued it; without a
        // clock every event is the same one (a decode records one per
        // split and allocates none)
        static DONE: std::sync::OnceLock<Event> = std::sync::OnceLock::new();
        Ok(match &self.clock {
            Some(c) => Event(Arc::new(ClockEvent { at_ns: c.now_ns() })),
            None => DONE
                .get_or_init(|| Event(Arc::new(ClockEvent { at_ns: 0 })))
                .clone(),
        })
    }
}

impl BackendDiagnostics for CpuBackend {
    fn busy_wall_ns(&self) -> u64 {
        self.busy_ns.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn device_clock(&self) -> Option<Arc<dyn DeviceClock>> {
        self.clock.clone()
    }
}

impl Backend for CpuBackend {
    fn diagnostics(&self) -> Option<&dyn BackendDiagnostics> {
        Some(self)
    }
}
