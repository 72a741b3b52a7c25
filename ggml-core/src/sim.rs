//! A simulated device: the CPU kernels over memory that reports itself as
//! non-host, with every byte moved in or out counted. It lets CI and users
//! without a GPU exercise and measure the whole offload path (`SIM0`).
//!
//! Every sim device runs on a [`SimClock`] (its own, or one shared with
//! other backends of the run): ops, copies and waits advance simulated time
//! by a [`SimProfile`], per stream, honouring events, and can be recorded as
//! a [`Timeline`]. Results are computed for real, at issue time, so they
//! are bit-identical whatever the clock says.

pub mod clock;
pub mod cost;
pub mod profile;
pub mod timeline;

pub use clock::{CopyDir, SimClock, SimEvent, SimTotals, SpanDetail};
pub use profile::SimProfile;
pub use timeline::{MemRange, Span, SpanKind, Timeline};

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::backend::{Backend, BackendError, Buffer, BufferUsage, Event, Stream};
use crate::cpu::buffer::HostMemory;
use crate::cpu::{ops, ThreadPool};
use crate::graph::Graph;
use crate::offload::offload_host_weight_op;
use crate::tensor::TensorData;
use crate::tensor::TensorId;
use parking_lot::Mutex;

/// Byte counters of a sim device.
#[derive(Debug, Default)]
pub struct SimCounters {
    /// Bytes written into the device (host → device).
    pub bytes_in: AtomicU64,
    /// Bytes read out of the device (device → host).
    pub bytes_out: AtomicU64,
    /// Number of writes into the device.
    pub writes: AtomicU64,
}

impl SimCounters {
    /// `(bytes_in, bytes_out)`.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.bytes_in.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed),
        )
    }
    /// Zero all counters.
    pub fn reset(&self) {
        self.bytes_in.store(0, Ordering::Relaxed);
        self.bytes_out.store(0, Ordering::Relaxed);
        self.writes.store(0, Ordering::Relaxed);
    }
}

/// Memory of a sim device.
pub struct SimBuffer {
    name: String,
    device: usize,
    mem: HostMemory,
    usage: BufferUsage,
    counters: Arc<SimCounters>,
    clock: Arc<SimClock>,
}

impl SimBuffer {
    fn range(&self, offset: usize, len: usize) -> MemRange {
        MemRange {
            addr: self.mem.ptr() as usize + offset,
            len,
        }
    }

    /// Copy into the device's memory and count it (no clock).
    fn put(&self, offset: usize, data: &[u8]) -> Result<(), BackendError> {
        self.mem.write(&self.name, offset, data)?;
        self.counters
            .bytes_in
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Copy out of the device's memory and count it (no clock).
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        self.mem.read(&self.name, offset, out)?;
        self.counters
            .bytes_out
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn detail(&self, label: &str, reads: MemRange, writes: MemRange) -> Option<SpanDetail> {
        self.clock.recording().then(|| SpanDetail {
            name: label.to_string(),
            reads: vec![reads],
            writes: vec![writes],
        })
    }
}

impl fmt::Debug for SimBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimBuffer({}, {} bytes)", self.name, self.mem.size())
    }
}

impl Buffer for SimBuffer {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> usize {
        self.mem.size()
    }
    fn is_host(&self) -> bool {
        false
    }
    fn usage(&self) -> BufferUsage {
        self.usage
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), BackendError> {
        self.put(offset, data)?;
        let src = MemRange {
            addr: data.as_ptr() as usize,
            len: data.len(),
        };
        let d = self.detail("write (sync)", src, self.range(offset, data.len()));
        self.clock.copy(
            &self.name,
            Stream::Compute,
            CopyDir::H2D,
            data.len(),
            true,
            d,
        );
        Ok(())
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        self.get(offset, out)?;
        let dst = MemRange {
            addr: out.as_ptr() as usize,
            len: out.len(),
        };
        let d = self.detail("read (sync)", self.range(offset, out.len()), dst);
        self.clock.copy(
            &self.name,
            Stream::Compute,
            CopyDir::D2H,
            out.len(),
            true,
            d,
        );
        Ok(())
    }
    fn base_ptr(&self) -> Option<*mut u8> {
        Some(self.mem.ptr())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A predicate restricting which nodes a sim device claims.
pub type OpFilter = Arc<dyn Fn(&Graph, TensorId) -> bool + Send + Sync>;

/// The sim device backend `SIM<n>`.
pub struct SimBackend {
    name: String,
    device: usize,
    pool: ThreadPool,
    counters: Arc<SimCounters>,
    supports: Option<OpFilter>,
    offload_min_batch: i64,
    clock: Arc<SimClock>,
    label: Mutex<String>,
}

impl SimBackend {
    /// Device `SIM<device>` computing with `n_threads` threads.
    pub fn new(device: usize, n_threads: usize) -> SimBackend {
        SimBackend {
            name: format!("SIM{device}"),
            device,
            pool: ThreadPool::new(n_threads),
            counters: Arc::new(SimCounters::default()),
            supports: None,
            offload_min_batch: 32,
            clock: SimClock::new(SimProfile::default_profile()),
            label: Mutex::new(String::new()),
        }
    }

    /// Run on `clock` (shared with the other backends of a run, so they have
    /// one timeline) instead of a clock of its own with the default profile.
    /// Buffers allocated before keep the clock they had.
    pub fn with_clock(mut self, clock: Arc<SimClock>) -> SimBackend {
        self.clock = clock;
        self
    }

    /// The simulated clock.
    pub fn clock(&self) -> &Arc<SimClock> {
        &self.clock
    }

    fn stream(&self, s: Stream) -> Stream {
        match s {
            Stream::Copy(k) => Stream::Copy(k % self.clock.profile().copy_engines.max(1)),
            Stream::Compute => Stream::Compute,
        }
    }

    fn sim_buffer<'a>(&self, d: &'a TensorData) -> Result<&'a SimBuffer, BackendError> {
        d.buffer
            .as_any()
            .downcast_ref::<SimBuffer>()
            .filter(|s| s.device == self.device)
            .ok_or_else(|| {
                BackendError::Unsupported(format!(
                    "{} cannot copy into or out of buffer '{}'",
                    self.name,
                    d.buffer.name()
                ))
            })
    }

    fn copy_detail(&self, reads: MemRange, writes: MemRange) -> Option<SpanDetail> {
        self.clock.recording().then(|| SpanDetail {
            name: self.label.lock().clone(),
            reads: vec![reads],
            writes: vec![writes],
        })
    }

    /// Restrict the ops this device claims (tests of fallback paths); the
    /// filter is and-ed with what the kernels implement.
    pub fn with_op_filter(mut self, f: OpFilter) -> SimBackend {
        self.supports = Some(f);
        self
    }

    /// Smallest batch (`ne[1]` of the activations) for which this device
    /// claims an op whose weight is in host memory (llama.cpp's
    /// `GGML_OP_OFFLOAD_MIN_BATCH`, default 32).
    pub fn with_offload_min_batch(mut self, n: i64) -> SimBackend {
        self.offload_min_batch = n;
        self
    }

    /// The byte counters.
    pub fn counters(&self) -> &Arc<SimCounters> {
        &self.counters
    }

    fn owns(&self, b: &dyn Buffer) -> bool {
        b.as_any()
            .downcast_ref::<SimBuffer>()
            .is_some_and(|s| s.device == self.device)
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_host(&self) -> bool {
        false
    }

    fn alloc_buffer(
        &self,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Arc<dyn Buffer>, BackendError> {
        Ok(Arc::new(SimBuffer {
            name: self.name.clone(),
            device: self.device,
            mem: HostMemory::new(size)?,
            usage,
            counters: Arc::clone(&self.counters),
            clock: Arc::clone(&self.clock),
        }))
    }

    fn can_use_buffer(&self, buf: &dyn Buffer) -> bool {
        self.owns(buf)
    }

    fn supports_op(&self, g: &Graph, node: TensorId) -> bool {
        ops::supports(g, node) && self.supports.as_ref().is_none_or(|f| f(g, node))
    }

    fn offload_op(&self, g: &Graph, node: TensorId) -> bool {
        offload_host_weight_op(g, node, self.offload_min_batch)
    }

    fn compute(&self, g: &Graph, nodes: &[TensorId]) -> Result<(), BackendError> {
        let dev = self.device;
        let accept = move |b: &dyn Buffer| {
            b.as_any()
                .downcast_ref::<SimBuffer>()
                .is_some_and(|s| s.device == dev)
        };
        let ctx = ops::ComputeCtx {
            pool: &self.pool,
            g,
            backend: &self.name,
            accept: &accept,
        };
        let prof = self.clock.profile().device;
        for &n in nodes {
            ops::compute_node(&ctx, n)?;
            let w = cost::node_work(g, n);
            let dur = clock::ns(cost::roofline_s(w, prof.flops, prof.mem_bw, prof.launch_s));
            let detail = self.clock.recording().then(|| timeline::node_detail(g, n));
            self.clock
                .device_op(&self.name, Stream::Compute, dur, w.bytes as u64, detail);
        }
        Ok(())
    }

    fn write_async(
        &self,
        dst: &TensorData,
        offset: usize,
        data: &[u8],
    ) -> Result<(), BackendError> {
        self.write_on(Stream::Compute, dst, offset, data)
    }

    fn read_async(
        &self,
        src: &TensorData,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        self.read_on(Stream::Compute, src, offset, out)
    }

    fn n_copy_streams(&self) -> usize {
        self.clock.profile().copy_engines
    }

    fn write_on(
        &self,
        stream: Stream,
        dst: &TensorData,
        offset: usize,
        data: &[u8],
    ) -> Result<(), BackendError> {
        let Ok(b) = self.sim_buffer(dst) else {
            return dst.buffer.write(dst.offset + offset, data);
        };
        let off = dst.offset + offset;
        b.put(off, data)?;
        let src = MemRange {
            addr: data.as_ptr() as usize,
            len: data.len(),
        };
        let d = self.copy_detail(src, b.range(off, data.len()));
        self.clock.copy(
            &self.name,
            self.stream(stream),
            CopyDir::H2D,
            data.len(),
            false,
            d,
        );
        Ok(())
    }

    fn read_on(
        &self,
        stream: Stream,
        src: &TensorData,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        let Ok(b) = self.sim_buffer(src) else {
            return src.buffer.read(src.offset + offset, out);
        };
        let off = src.offset + offset;
        b.get(off, out)?;
        let dst = MemRange {
            addr: out.as_ptr() as usize,
            len: out.len(),
        };
        let d = self.copy_detail(b.range(off, out.len()), dst);
        self.clock.copy(
            &self.name,
            self.stream(stream),
            CopyDir::D2H,
            out.len(),
            false,
            d,
        );
        Ok(())
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.clock.sync_device(&self.name);
        Ok(())
    }

    fn record_event(&self) -> Result<Event, BackendError> {
        self.record_event_on(Stream::Compute)
    }

    fn wait_event(&self, ev: &Event) -> Result<(), BackendError> {
        self.wait_event_on(Stream::Compute, ev)
    }

    fn record_event_on(&self, stream: Stream) -> Result<Event, BackendError> {
        let at_ns = self.clock.record(&self.name, self.stream(stream));
        Ok(Event(Arc::new(SimEvent { at_ns })))
    }

    fn wait_event_on(&self, stream: Stream, ev: &Event) -> Result<(), BackendError> {
        if let Some(e) = ev.0.downcast_ref::<SimEvent>() {
            self.clock.wait(&self.name, self.stream(stream), e.at_ns);
        }
        Ok(())
    }

    fn event_synchronize(&self, ev: &Event) -> Result<(), BackendError> {
        match ev.0.downcast_ref::<SimEvent>() {
            Some(e) => self.clock.host_wait(&self.name, e.at_ns),
            None => self.clock.sync_device(&self.name),
        }
        Ok(())
    }

    fn set_label(&self, label: &str) {
        if self.clock.recording() {
            let mut l = self.label.lock();
            l.clear();
            l.push_str(label);
        }
    }

    fn sim_clock(&self) -> Option<Arc<SimClock>> {
        Some(Arc::clone(&self.clock))
    }
}
