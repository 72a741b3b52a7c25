//! A simulated device: the CPU kernels over memory that reports itself as
//! non-host, with every byte moved in or out counted. It lets CI and users
//! without a GPU exercise and measure the whole offload path (`SIM0`).
//!
//! Every sim device runs on a [`SimClock`] (its own, or one shared with
//! other backends of the run): ops, copies and waits advance simulated time
//! by a [`SimProfile`], per stream, honouring events, and can be recorded as
//! a [`Timeline`]. Results are computed for real, at issue time, so they
//! are bit-identical whatever the clock says.
//!
//! Layering: the simulator sits on top of the backend traits and the CPU
//! kernels, never the reverse. It fills the backend-neutral
//! [`crate::timeline`] types, and its clock implements
//! [`crate::clock::DeviceClock`], through which a CPU backend joins it.
//!
//! [`Timeline`]: crate::timeline::Timeline

pub mod clock;
pub mod cost;
pub mod node_span;
pub mod profile;

pub use clock::{CopyDir, SimClock, SimTotals};
pub use profile::SimProfile;

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::backend::{Backend, BackendDevice, BackendDiagnostics, BackendStream, Event, Stream};
use crate::buffer::{check_range, Buffer, BufferUsage};
use crate::clock::{ClockEvent, DeviceClock};
use crate::cpu::buffer::HostMemory;
use crate::cpu::ops;
use crate::cpu::pool::ThreadPool;
use crate::error::BackendError;
use crate::graph::Graph;
use crate::offload::offload_host_weight_op;
use crate::pipeline::PipelineCounters;
use crate::tensor::{TensorData, TensorId};
use crate::timeline::{MemRange, SpanDetail};
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
    /// Bytes copied inside the device (`copy_within`).
    pub bytes_d2d: AtomicU64,
    /// Bytes copied into the device from another sim device's memory by a
    /// peer copy (`copy_from_peer`), not through host memory.
    pub bytes_peer_in: AtomicU64,
    /// Wall-clock nanoseconds spent computing and copying in the device's
    /// memory ([`BackendDiagnostics::busy_wall_ns`]).
    pub busy_ns: AtomicU64,
}

/// Run `f`, adding its wall time to `busy`.
fn busy<T>(busy: &AtomicU64, f: impl FnOnce() -> T) -> T {
    let t0 = std::time::Instant::now();
    let r = f();
    busy.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    r
}

impl SimCounters {
    /// `(bytes_in, bytes_out)`.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.bytes_in.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed),
        )
    }
    /// Zero the byte and write counters (`busy_ns` is cumulative: callers
    /// take differences).
    pub fn reset(&self) {
        self.bytes_in.store(0, Ordering::Relaxed);
        self.bytes_out.store(0, Ordering::Relaxed);
        self.writes.store(0, Ordering::Relaxed);
        self.bytes_d2d.store(0, Ordering::Relaxed);
    }
}

/// Memory accounting of a sim device: an optional capacity, the bytes its
/// live buffers hold, and the most they ever held at once (the peak).
#[derive(Debug, Default)]
pub struct SimMemory {
    /// Capacity in bytes; `None` = unlimited.
    capacity: Option<usize>,
    /// Bytes held by live buffers.
    used: AtomicUsize,
    /// The largest `used` seen since creation (or [`SimMemory::reset_peak`]).
    peak: AtomicUsize,
}

impl SimMemory {
    /// Bytes held by live buffers.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The capacity, `None` when unlimited.
    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// The most bytes live buffers held at once: the measured peak of the
    /// device's memory.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Restart the peak from the bytes held now.
    pub fn reset_peak(&self) {
        self.peak.store(self.used(), Ordering::Relaxed);
    }

    /// Reserve `size` bytes, or fail when they exceed the capacity.
    fn reserve(&self, name: &str, size: usize) -> Result<(), BackendError> {
        let Some(cap) = self.capacity else {
            let before = self.used.fetch_add(size, Ordering::Relaxed);
            self.peak
                .fetch_max(before.saturating_add(size), Ordering::Relaxed);
            return Ok(());
        };
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(size).filter(|&n| n <= cap)
            })
            .map(|before| {
                self.peak.fetch_max(before + size, Ordering::Relaxed);
            })
            .map_err(|u| {
                BackendError::OutOfMemory(format!(
                    "{name}: {size} bytes requested, {} of {cap} bytes free",
                    cap.saturating_sub(u)
                ))
            })
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
    account: Arc<SimMemory>,
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
        busy(&self.counters.busy_ns, || {
            self.mem.write(&self.name, offset, data)
        })?;
        self.counters
            .bytes_in
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Copy out of the device's memory and count it (no clock).
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        busy(&self.counters.busy_ns, || {
            self.mem.read(&self.name, offset, out)
        })?;
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

impl Drop for SimBuffer {
    fn drop(&mut self) {
        self.account
            .used
            .fetch_sub(self.mem.size(), Ordering::Relaxed);
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
    account: Arc<SimMemory>,
    pipeline: PipelineCounters,
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
            account: Arc::new(SimMemory::default()),
            pipeline: PipelineCounters::default(),
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

    /// Give the device a memory capacity of `bytes` (default: unlimited):
    /// allocations beyond it fail with [`BackendError::OutOfMemory`], and
    /// [`BackendDevice::memory`] reports free and total bytes. Set it before the
    /// first allocation.
    pub fn with_memory_capacity(mut self, bytes: usize) -> SimBackend {
        self.account = Arc::new(SimMemory {
            capacity: Some(bytes),
            ..SimMemory::default()
        });
        self
    }

    /// The device's memory accounting.
    pub fn memory_account(&self) -> &Arc<SimMemory> {
        &self.account
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

impl BackendDevice for SimBackend {
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
        self.account.reserve(&self.name, size)?;
        let mem = match HostMemory::new(size) {
            Ok(m) => m,
            Err(e) => {
                self.account.used.fetch_sub(size, Ordering::Relaxed);
                return Err(e);
            }
        };
        Ok(Arc::new(SimBuffer {
            name: self.name.clone(),
            device: self.device,
            mem,
            usage,
            counters: Arc::clone(&self.counters),
            clock: Arc::clone(&self.clock),
            account: Arc::clone(&self.account),
        }))
    }

    fn memory(&self) -> Option<(usize, usize)> {
        let cap = self.account.capacity?;
        Some((cap.saturating_sub(self.account.used()), cap))
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
}

impl BackendStream for SimBackend {
    fn copy_within(
        &self,
        src: &TensorData,
        src_off: usize,
        dst: &TensorData,
        dst_off: usize,
        len: usize,
    ) -> Result<bool, BackendError> {
        let (Some(s), Some(d)) = (
            src.buffer.as_any().downcast_ref::<SimBuffer>(),
            dst.buffer.as_any().downcast_ref::<SimBuffer>(),
        ) else {
            return Ok(false);
        };
        if s.device != self.device || d.device != self.device {
            return Ok(false);
        }
        let so = src.offset.checked_add(src_off);
        let dof = dst.offset.checked_add(dst_off);
        let (Some(so), Some(dof)) = (so, dof) else {
            return Err(BackendError::OutOfBounds(format!(
                "copy of {len} bytes inside {}: offset overflows",
                self.name
            )));
        };
        check_range(&s.name, s.mem.size(), so, len)?;
        check_range(&d.name, d.mem.size(), dof, len)?;
        busy(&self.counters.busy_ns, || {
            // SAFETY: both ranges were checked against their buffers, which
            // the TensorData keep alive; `copy` allows overlap; the sim
            // device runs its work in order on the calling thread, so
            // nothing computes in these buffers meanwhile.
            unsafe { std::ptr::copy(s.mem.ptr().add(so), d.mem.ptr().add(dof), len) }
        });
        self.counters
            .bytes_d2d
            .fetch_add(len as u64, Ordering::Relaxed);
        // on the copy stream, with the uploads it sits among: read and
        // write at the device's memory bandwidth
        let prof = self.clock.profile().device;
        let dur = clock::ns(2.0 * len as f64 / prof.mem_bw);
        let detail = self.clock.recording().then(|| SpanDetail {
            name: format!("copy within: {}", self.label.lock()),
            reads: vec![s.range(so, len)],
            writes: vec![d.range(dof, len)],
        });
        self.clock.device_op(
            &self.name,
            self.stream(Stream::Copy(0)),
            dur,
            2 * len as u64,
            detail,
        );
        Ok(true)
    }

    fn copy_from_peer(
        &self,
        src_be: &dyn BackendDevice,
        src: &TensorData,
        dst: &TensorData,
        len: usize,
        stream: Stream,
        after: Option<&Event>,
    ) -> Result<bool, BackendError> {
        // two sim devices of one clock (one run), unless the profile turns
        // peer copies off
        let Some(bw) = self.clock.profile().peer_bw() else {
            return Ok(false);
        };
        let Some(s) = src.buffer.as_any().downcast_ref::<SimBuffer>() else {
            return Ok(false);
        };
        if s.device == self.device || !Arc::ptr_eq(&s.clock, &self.clock) {
            return Ok(false);
        }
        let Ok(d) = self.sim_buffer(dst) else {
            return Ok(false);
        };
        let so = src.offset;
        let dof = dst.offset;
        check_range(&s.name, s.mem.size(), so, len)?;
        check_range(&d.name, d.mem.size(), dof, len)?;
        let stream = self.stream(stream);
        if let Some(ev) = after {
            self.wait_event_on(stream, ev)?;
        }
        busy(&self.counters.busy_ns, || {
            // SAFETY: both ranges were checked against their buffers, which
            // the TensorData keep alive; they are two devices' allocations,
            // so they do not overlap; sim work runs in order on the calling
            // thread, so nothing computes in them meanwhile.
            unsafe { std::ptr::copy_nonoverlapping(s.mem.ptr().add(so), d.mem.ptr().add(dof), len) }
        });
        self.counters
            .bytes_peer_in
            .fetch_add(len as u64, Ordering::Relaxed);
        let detail = self.clock.recording().then(|| SpanDetail {
            name: format!("peer copy from {}: {}", src_be.name(), self.label.lock()),
            reads: vec![s.range(so, len)],
            writes: vec![d.range(dof, len)],
        });
        self.clock
            .peer_copy(&s.name, &self.name, stream, len, bw, detail);
        Ok(true)
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
            busy(&self.counters.busy_ns, || ops::compute_node(&ctx, n))?;
            let op = g.tensor(n).op;
            if !(op.is_view() || op == crate::op::Op::None) {
                self.pipeline.add_launches(1);
            }
            let w = cost::node_work(g, n);
            let dur = clock::ns(cost::roofline_s(w, prof.flops, prof.mem_bw, prof.launch_s));
            let detail = self.clock.recording().then(|| node_span::node_detail(g, n));
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
        self.pipeline.add_device_sync();
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
        Ok(Event(Arc::new(ClockEvent { at_ns })))
    }

    fn wait_event_on(&self, stream: Stream, ev: &Event) -> Result<(), BackendError> {
        if let Some(e) = ev.0.downcast_ref::<ClockEvent>() {
            self.clock.wait(&self.name, self.stream(stream), e.at_ns);
        }
        Ok(())
    }

    fn event_synchronize(&self, ev: &Event) -> Result<(), BackendError> {
        match ev.0.downcast_ref::<ClockEvent>() {
            Some(e) => self.clock.host_wait(&self.name, e.at_ns),
            None => {
                self.pipeline.add_device_sync();
                self.clock.sync_device(&self.name)
            }
        }
        Ok(())
    }
}

impl BackendDiagnostics for SimBackend {
    fn set_label(&self, label: &str) {
        if self.clock.recording() {
            let mut l = self.label.lock();
            l.clear();
            l.push_str(label);
        }
    }

    fn pipeline_counters(&self) -> Option<&PipelineCounters> {
        Some(&self.pipeline)
    }

    fn device_clock(&self) -> Option<Arc<dyn DeviceClock>> {
        Some(Arc::clone(&self.clock) as Arc<dyn DeviceClock>)
    }

    fn busy_wall_ns(&self) -> u64 {
        self.counters.busy_ns.load(Ordering::Relaxed)
    }
}

impl Backend for SimBackend {
    fn diagnostics(&self) -> Option<&dyn BackendDiagnostics> {
        Some(self)
    }
}

#[cfg(test)]
mod memory_tests {
    use super::*;

    #[test]
    fn capacity_limits_allocations_and_frees_on_drop() {
        let unlimited = SimBackend::new(0, 1);
        assert_eq!(unlimited.memory(), None);
        let b = SimBackend::new(1, 1).with_memory_capacity(1000);
        assert_eq!(b.memory(), Some((1000, 1000)));
        let a = b.alloc_buffer(600, BufferUsage::Weights).expect("fits");
        assert_eq!(b.memory(), Some((400, 1000)));
        assert_eq!(b.memory_account().peak(), 600);
        let e = b.alloc_buffer(500, BufferUsage::Compute).unwrap_err();
        assert!(
            matches!(&e, BackendError::OutOfMemory(m) if m.contains("SIM1") && m.contains("400 of 1000")),
            "{e}"
        );
        drop(a);
        assert_eq!(b.memory(), Some((1000, 1000)));
        // a failed allocation does not count; the peak outlives the buffer
        assert_eq!(b.memory_account().peak(), 600);
        b.memory_account().reset_peak();
        assert_eq!(b.memory_account().peak(), 0);
        // copies inside the device: counted apart, bounds checked
        let x = b.alloc_buffer(64, BufferUsage::Compute).expect("fits");
        x.write(0, &[7u8; 16]).unwrap();
        let td = |o| TensorData {
            buffer: Arc::clone(&x),
            offset: o,
        };
        assert!(b.copy_within(&td(0), 0, &td(32), 0, 16).unwrap());
        let mut out = [0u8; 16];
        x.read(32, &mut out).unwrap();
        assert_eq!(out, [7u8; 16]);
        assert_eq!(b.counters().bytes_d2d.load(Ordering::Relaxed), 16);
        assert!(b.copy_within(&td(0), 0, &td(60), 0, 16).is_err());
        let other = SimBackend::new(2, 1);
        assert!(!other.copy_within(&td(0), 0, &td(32), 0, 16).unwrap());
        drop(x);
        assert!(b.alloc_buffer(1000, BufferUsage::Compute).is_ok());
        assert_eq!(b.memory_account().peak(), 1000);
        let u = SimBackend::new(3, 1);
        let y = u.alloc_buffer(70, BufferUsage::Compute).expect("unlimited");
        let z = u.alloc_buffer(30, BufferUsage::Compute).expect("unlimited");
        drop((y, z));
        assert_eq!(u.memory_account().peak(), 100);
    }
}

#[cfg(test)]
mod peer_tests {
    use super::*;
    use crate::timeline::SpanKind;

    /// Two sim devices of one clock copy peer to peer: the bytes arrive,
    /// count as the destination's `bytes_peer_in` (not as host traffic),
    /// and the recorded timeline shows a `d2d` span on the destination's
    /// copy stream reading the source's range. A device on another clock,
    /// a profile with `d2d_bw` 0 and a copy within one device decline.
    #[test]
    fn two_devices_of_one_clock_copy_peer_to_peer() {
        let clock = SimClock::new(SimProfile::default_profile());
        let d0 = SimBackend::new(0, 1).with_clock(Arc::clone(&clock));
        let d1 = SimBackend::new(1, 1).with_clock(Arc::clone(&clock));
        let a = d0.alloc_buffer(64, BufferUsage::Compute).unwrap();
        let b = d1.alloc_buffer(64, BufferUsage::Compute).unwrap();
        a.write(8, &[5u8; 32]).unwrap();
        let src = TensorData {
            buffer: Arc::clone(&a),
            offset: 8,
        };
        let dst = TensorData {
            buffer: Arc::clone(&b),
            offset: 16,
        };
        clock.set_recording(true);
        let ev = d0.record_event_on(Stream::Compute).unwrap();
        assert!(d1
            .copy_from_peer(&d0, &src, &dst, 32, Stream::Copy(0), Some(&ev))
            .unwrap());
        let mut out = [0u8; 32];
        b.read(16, &mut out).unwrap();
        assert_eq!(out, [5u8; 32]);
        assert_eq!(d1.counters().bytes_peer_in.load(Ordering::Relaxed), 32);
        assert_eq!(d0.counters().bytes_out.load(Ordering::Relaxed), 0);
        assert_eq!(d1.counters().bytes_in.load(Ordering::Relaxed), 0);
        let tl = clock.take_timeline();
        let sp: Vec<_> = tl
            .spans
            .iter()
            .filter(|s| s.kind == SpanKind::CopyD2D)
            .collect();
        assert_eq!(sp.len(), 1, "{:?}", tl.spans);
        assert_eq!((sp[0].backend.as_str(), sp[0].bytes), ("SIM1", 32));
        assert_eq!(sp[0].kind.category(), "d2d");
        assert!(sp[0].name.contains("from SIM0"), "{}", sp[0].name);
        // out of range: an error naming the buffer
        assert!(d1
            .copy_from_peer(&d0, &src, &dst, 60, Stream::Copy(0), None)
            .is_err());
        // declined: another clock, peer copies off, one device
        let lone = SimBackend::new(2, 1);
        let c = lone.alloc_buffer(64, BufferUsage::Compute).unwrap();
        let cd = TensorData {
            buffer: c,
            offset: 0,
        };
        assert!(!d1
            .copy_from_peer(&lone, &cd, &dst, 32, Stream::Copy(0), None)
            .unwrap());
        let mut p = SimProfile::default_profile();
        p.d2d_bw = Some(0.0);
        let off = SimClock::new(p);
        let o0 = SimBackend::new(0, 1).with_clock(Arc::clone(&off));
        let o1 = SimBackend::new(1, 1).with_clock(off);
        let (x, y) = (
            o0.alloc_buffer(8, BufferUsage::Compute).unwrap(),
            o1.alloc_buffer(8, BufferUsage::Compute).unwrap(),
        );
        let (xs, yd) = (
            TensorData {
                buffer: x,
                offset: 0,
            },
            TensorData {
                buffer: y,
                offset: 0,
            },
        );
        assert!(!o1
            .copy_from_peer(&o0, &xs, &yd, 8, Stream::Copy(0), None)
            .unwrap());
        assert!(!d1
            .copy_from_peer(&d1, &dst, &dst, 8, Stream::Copy(0), None)
            .unwrap());
    }
}
