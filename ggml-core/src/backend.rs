//! The backend traits (`ggml-backend.h` in spirit): a backend owns buffers,
//! moves bytes in and out of them, and computes lists of graph nodes.
//!
//! The scheduler (`ggml-sched`) and the model code talk to devices only
//! through these traits, so the CPU, the simulated device and CUDA plug in the
//! same way.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::clock::DeviceClock;
use crate::graph::Graph;
use crate::link::LinkCounters;
use crate::pipeline::PipelineCounters;
use crate::tensor::{TensorData, TensorId};
use crate::timeline::Timeline;

pub use crate::buffer::{check_range, Buffer, BufferUsage};
pub use crate::error::BackendError;

/// A point in a backend's stream of work that another can wait on.
#[derive(Clone)]
pub struct Event(pub Arc<dyn Any + Send + Sync>);

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Event")
    }
}

/// A queue of work on a backend: work on one stream runs in issue order;
/// work on different streams may overlap unless events order it.
///
/// Every device backend has a compute stream; [`Backend::n_copy_streams`]
/// says how many copy streams it adds (copies on them overlap compute). A
/// backend without copy streams runs `Copy(_)` work on its compute stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    /// The stream kernels run on (and where plain `write_async` goes).
    Compute,
    /// Copy stream `k` (`k < n_copy_streams`).
    Copy(usize),
}

/// A compute device.
pub trait Backend: Send + Sync {
    /// Backend name as users type it (`"CPU"`, `"SIM0"`, `"CUDA0"`).
    fn name(&self) -> &str;

    /// Whether the backend computes on host memory (only the CPU backend).
    fn is_host(&self) -> bool;

    /// Allocate a buffer on this backend.
    fn alloc_buffer(
        &self,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Arc<dyn Buffer>, BackendError>;

    /// Whether this backend's kernels can read and write tensors in `buf`
    /// directly, without a copy (`ggml_backend_supports_buft`).
    fn can_use_buffer(&self, buf: &dyn Buffer) -> bool;

    /// Whether this backend implements the node's op for its types and shapes.
    fn supports_op(&self, g: &Graph, node: TensorId) -> bool;

    /// Whether this backend wants to run `node` even though its weight lives
    /// in host memory (worth it for large batches: `offload_op`).
    fn offload_op(&self, _g: &Graph, _node: TensorId) -> bool {
        false
    }

    /// Compute `nodes` (in order). Every tensor they read or write must be in
    /// memory this backend can use.
    fn compute(&self, g: &Graph, nodes: &[TensorId]) -> Result<(), BackendError>;

    /// Write `data` into `dst` at `offset` bytes past the tensor start; may
    /// return before the copy is done, and the backend orders it before later
    /// compute. `data` must stay valid and unchanged until `synchronize`.
    fn write_async(
        &self,
        dst: &TensorData,
        offset: usize,
        data: &[u8],
    ) -> Result<(), BackendError> {
        dst.buffer.write(dst.offset + offset, data)
    }

    /// Read bytes of `src` into `out` (may be asynchronous until `synchronize`).
    fn read_async(
        &self,
        src: &TensorData,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        src.buffer.read(src.offset + offset, out)
    }

    /// Wait until all queued work is done.
    fn synchronize(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// Record an event after the work queued so far.
    fn record_event(&self) -> Result<Event, BackendError> {
        Ok(Event(Arc::new(())))
    }

    /// Make later work on this backend wait for `ev`.
    fn wait_event(&self, _ev: &Event) -> Result<(), BackendError> {
        Ok(())
    }

    /// Copy streams this backend offers besides its compute stream (0: none,
    /// copies go on the compute stream).
    fn n_copy_streams(&self) -> usize {
        0
    }

    /// Write `data` into `dst` at `offset` on `stream`, asynchronously where
    /// the backend can; `data` must stay valid and unchanged until the
    /// stream's work is complete (an event on it, or `synchronize`).
    fn write_on(
        &self,
        _stream: Stream,
        dst: &TensorData,
        offset: usize,
        data: &[u8],
    ) -> Result<(), BackendError> {
        self.write_async(dst, offset, data)
    }

    /// Read bytes of `src` into `out` on `stream` (complete once an event
    /// recorded after it on that stream is, or after `synchronize`).
    fn read_on(
        &self,
        _stream: Stream,
        src: &TensorData,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        self.read_async(src, offset, out)
    }

    /// The stream this backend's uploads go on: its first copy stream, or
    /// the compute stream where it has none.
    fn upload_stream(&self) -> Stream {
        if self.n_copy_streams() > 0 {
            Stream::Copy(0)
        } else {
            Stream::Compute
        }
    }

    /// The stream device data is read back on: a second copy stream where
    /// there is one (so reads do not queue behind uploads), else the first,
    /// else the compute stream.
    fn readback_stream(&self) -> Stream {
        match self.n_copy_streams() {
            0 => Stream::Compute,
            n => Stream::Copy(1 % n),
        }
    }

    /// Read bytes of `src` (this backend's memory, written by compute) into
    /// host memory once the compute queued so far is done, without a
    /// device-wide synchronize: the readback stream waits for an event on
    /// the compute stream (not for the uploads, which may go on meanwhile),
    /// the read goes on it, and the host waits for the read's event only.
    /// Memory of another backend is read with a plain buffer read.
    fn read_after_compute(
        &self,
        src: &TensorData,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        if src.buffer.is_host() || !self.can_use_buffer(src.buffer.as_ref()) {
            return src.buffer.read(src.offset + offset, out);
        }
        let rs = self.readback_stream();
        if rs != Stream::Compute && !self.planted_drop_wait("readback") {
            let ev = self.record_event_on(Stream::Compute)?;
            self.wait_event_on(rs, &ev)?;
        }
        self.read_on(rs, src, offset, out)?;
        let done = self.record_event_on(rs)?;
        self.event_synchronize(&done)
    }

    /// This backend's pipeline counters ([`crate::pipeline`]), where it keeps
    /// them (device backends); `None` for the CPU.
    fn pipeline_counters(&self) -> Option<&PipelineCounters> {
        None
    }

    /// The counters of the network link to this backend's device, where it
    /// has one (an RPC worker: bytes and messages each way, round trips;
    /// [`crate::link`]); `None` for devices of this host.
    fn link_counters(&self) -> Option<&LinkCounters> {
        None
    }

    /// Record an event after the work queued so far on `stream`.
    fn record_event_on(&self, _stream: Stream) -> Result<Event, BackendError> {
        self.record_event()
    }

    /// Make later work on `stream` wait for `ev` (recorded by this or any
    /// other backend).
    fn wait_event_on(&self, _stream: Stream, ev: &Event) -> Result<(), BackendError> {
        self.wait_event(ev)
    }

    /// Block the calling (host) thread until `ev`, recorded by this backend,
    /// is complete.
    fn event_synchronize(&self, _ev: &Event) -> Result<(), BackendError> {
        self.synchronize()
    }

    /// Name the work queued next (copies), for timelines (`nvtxRangePush` in
    /// spirit); a no-op where nothing records.
    fn set_label(&self, _label: &str) {}

    /// Start (`true`) or stop recording a timeline of this backend's own
    /// work from its device's events (CUDA events). Returns whether the
    /// backend records one; the sim device's timeline is its clock's
    /// ([`Backend::device_clock`]), not this.
    fn set_event_timeline(&self, _on: bool) -> bool {
        false
    }

    /// The spans recorded since [`Backend::set_event_timeline`]`(true)`,
    /// leaving none behind (waits for the recorded work to finish).
    fn take_event_timeline(&self) -> Result<Option<Timeline>, BackendError> {
        Ok(None)
    }

    /// Wall-clock nanoseconds host threads have spent so far inside this
    /// backend's calls doing its work there and then: kernels it runs on
    /// the calling thread (the CPU, a sim device) and copies it makes
    /// synchronously (a sim device's memory). Cumulative; what a run spends
    /// outside it (and outside waits) is the host's own time. A backend
    /// that only queues work (a GPU) has nothing to count: 0, the default.
    fn busy_wall_ns(&self) -> u64 {
        0
    }

    /// The clock this backend advances, if any: the sim device's simulated
    /// clock, which the CPU backend joins to share its timeline. The
    /// simulator's own figures (profile, totals, recorded timeline) come
    /// from the concrete clock, `sim::SimClock::of(backend)`.
    fn device_clock(&self) -> Option<Arc<dyn DeviceClock>> {
        None
    }

    /// Test-only: whether a planted bug drops waits of `kind` (`upload`,
    /// `readback`, `slot`, `staging`, `peer`, `peer-source`) on this
    /// backend, so tests can prove an emulated device catches each missing
    /// wait. Only the emulated CUDA device says yes
    /// (`GGML_CUDA_EMULATOR_DROP_WAIT`); the callers that own such a wait
    /// skip it then. Always `false` in normal use.
    fn planted_drop_wait(&self, _kind: &str) -> bool {
        false
    }

    /// Bytes this backend's kernels may read past the end of a weight tensor
    /// or a slice of one (e.g. vector loads of a whole tile). A partial copy
    /// must make that many bytes past its range valid. Zero for CPU and sim.
    fn read_overhang(&self) -> usize {
        0
    }

    /// `(free, total)` bytes of this backend's memory, where it knows them
    /// (a device with a capacity); `None` = unknown or unlimited.
    fn memory(&self) -> Option<(usize, usize)> {
        None
    }

    /// Page-lock `bytes`, host memory this backend will copy from (the host
    /// weights of a mapped model, `--load-mode pin`), so that uploads from
    /// it run as asynchronous DMA at full link speed. The returned value
    /// keeps the lock and releases it on drop. `Ok(None)`: this backend
    /// gains nothing from page-locked memory (CPU kernels, the sim device);
    /// `Err`: it would, but the driver refused (the cause is in the error).
    #[allow(clippy::type_complexity)]
    fn pin_host(
        &self,
        _bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    ) -> Result<Option<Box<dyn Any + Send + Sync>>, BackendError> {
        Ok(None)
    }

    /// Copy `len` bytes from `src` (at `src_off`) to `dst` (at `dst_off`),
    /// both in this backend's own memory, without crossing to the host,
    /// ordered with the backend's other work. `Ok(false)` when the backend
    /// cannot (or either tensor is elsewhere): nothing was copied.
    fn copy_within(
        &self,
        _src: &TensorData,
        _src_off: usize,
        _dst: &TensorData,
        _dst_off: usize,
        _len: usize,
    ) -> Result<bool, BackendError> {
        Ok(false)
    }

    /// Copy `len` bytes from `src`, memory of another device backend
    /// `src_be`, to `dst` (this backend's memory) on `stream`, device
    /// to device without host memory (`ggml_backend_cpy_tensor_async` in
    /// spirit: CUDA's peer copy, a sim device's peer link). `stream` first
    /// waits for `after`, an event of `src_be` after the work that wrote
    /// `src` (a cross-device wait); the copy is complete once an event
    /// recorded on `stream` after it is, and the caller keeps `src_be` from
    /// overwriting `src` until then (its compute stream waits for that
    /// event). `Ok(false)`: this pair of devices cannot, and nothing was
    /// queued; the caller copies through host memory.
    fn copy_from_peer(
        &self,
        _src_be: &dyn Backend,
        _src: &TensorData,
        _dst: &TensorData,
        _len: usize,
        _stream: Stream,
        _after: Option<&Event>,
    ) -> Result<bool, BackendError> {
        Ok(false)
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
