//! The stream interface (ggml's `ggml_backend_i`): work queued on a
//! device — computing nodes, copies in and out of its memory on its
//! streams, events that order streams — and the host's waits for it.
//!
//! A backend runs work on one stream in issue order; work on different
//! streams may overlap unless events order it. Every device backend has a
//! compute stream; [`BackendStream::n_copy_streams`] says how many copy
//! streams it adds. One method is required ([`BackendStream::compute`]);
//! the defaults are a host backend's, whose work is complete when the call
//! returns: copies are plain buffer reads and writes, every event is
//! complete, waits return at once.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::backend::device::BackendDevice;
use crate::error::BackendError;
use crate::graph::Graph;
use crate::tensor::{TensorData, TensorId};

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
/// Every device backend has a compute stream;
/// [`BackendStream::n_copy_streams`] says how many copy streams it adds
/// (copies on them overlap compute). A backend without copy streams runs
/// `Copy(_)` work on its compute stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    /// The stream kernels run on (and where plain `write_async` goes).
    Compute,
    /// Copy stream `k` (`k < n_copy_streams`).
    Copy(usize),
}

/// What a wait orders, said by the caller that owns the wait
/// ([`BackendStream::wait_event_for`]). Every backend orders these waits
/// like any other; the kind lets a backend's test double single one out:
/// the emulated CUDA device's planted bug
/// `GGML_CUDA_EMULATOR_DROP_WAIT=KIND` drops the waits of one kind, so its
/// hazard detector can prove it catches each missing order. (The planted
/// kinds `upload` and `peer` are waits a CUDA backend makes itself: compute
/// waiting for its own uploads, a peer copy waiting for its source.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitKind {
    /// A read of device memory into host memory (on the readback stream)
    /// waits for the work that writes that memory.
    Readback,
    /// The copy stream waits for the last reader of memory before staging
    /// a later split's input into it (the scheduler's look-ahead).
    Staging,
    /// The copy stream waits for the compute that may still read a cache
    /// slot before overwriting it (a copy hook's cache).
    Slot,
    /// The source device of a peer copy waits for the copy before its
    /// compute or uploads overwrite the source.
    PeerSource,
}

impl WaitKind {
    /// The kind as `GGML_CUDA_EMULATOR_DROP_WAIT` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitKind::Readback => "readback",
            WaitKind::Staging => "staging",
            WaitKind::Slot => "slot",
            WaitKind::PeerSource => "peer-source",
        }
    }
}

/// The work a backend queues: compute, copies, events. See the module
/// docs; only [`BackendStream::compute`] is required.
pub trait BackendStream: BackendDevice {
    /// Compute `nodes` (in order). Every tensor they read or write must be in
    /// memory this backend can use (`graph_compute`).
    fn compute(&self, g: &Graph, nodes: &[TensorId]) -> Result<(), BackendError>;

    /// Write `data` into `dst` at `offset` bytes past the tensor start; may
    /// return before the copy is done, and the backend orders it before later
    /// compute. `data` must stay valid and unchanged until `synchronize`
    /// (`set_tensor_async`).
    fn write_async(
        &self,
        dst: &TensorData,
        offset: usize,
        data: &[u8],
    ) -> Result<(), BackendError> {
        dst.buffer.write(dst.offset + offset, data)
    }

    /// Read bytes of `src` into `out` (may be asynchronous until
    /// `synchronize`) (`get_tensor_async`).
    fn read_async(
        &self,
        src: &TensorData,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        src.buffer.read(src.offset + offset, out)
    }

    /// Wait until all queued work is done (`synchronize`).
    fn synchronize(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// Record an event after the work queued so far (`event_record`).
    fn record_event(&self) -> Result<Event, BackendError> {
        Ok(Event(Arc::new(())))
    }

    /// Make later work on this backend wait for `ev` (`event_wait`).
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
    /// the compute stream where it has none. (Derived from
    /// [`BackendStream::n_copy_streams`]; no backend needs to override it.)
    fn upload_stream(&self) -> Stream {
        if self.n_copy_streams() > 0 {
            Stream::Copy(0)
        } else {
            Stream::Compute
        }
    }

    /// The stream device data is read back on: a second copy stream where
    /// there is one (so reads do not queue behind uploads), else the first,
    /// else the compute stream. (Derived; no backend needs to override it.)
    fn readback_stream(&self) -> Stream {
        match self.n_copy_streams() {
            0 => Stream::Compute,
            n => Stream::Copy(1 % n),
        }
    }

    /// Read bytes of `src` (this backend's memory, written by compute) into
    /// host memory once the compute queued so far is done, without a
    /// device-wide synchronize: the readback stream waits for an event on
    /// the compute stream (not for the uploads, which may go on meanwhile:
    /// a [`WaitKind::Readback`] wait), the read goes on it, and the host
    /// waits for the read's event only. Memory of another backend is read
    /// with a plain buffer read. (Derived from the methods above; no
    /// backend needs to override it.)
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
        if rs != Stream::Compute {
            let ev = self.record_event_on(Stream::Compute)?;
            self.wait_event_for(rs, &ev, WaitKind::Readback)?;
        }
        self.read_on(rs, src, offset, out)?;
        let done = self.record_event_on(rs)?;
        self.event_synchronize(&done)
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

    /// [`BackendStream::wait_event_on`], for a wait the caller says the
    /// kind of ([`WaitKind`]). The default waits the same; only a test
    /// double overrides it (the emulated CUDA device's planted bugs).
    fn wait_event_for(
        &self,
        stream: Stream,
        ev: &Event,
        _kind: WaitKind,
    ) -> Result<(), BackendError> {
        self.wait_event_on(stream, ev)
    }

    /// Block the calling (host) thread until `ev`, recorded by this backend,
    /// is complete (the device interface's `event_synchronize`).
    fn event_synchronize(&self, _ev: &Event) -> Result<(), BackendError> {
        self.synchronize()
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

    /// Copy `len` bytes from `src`, memory of another device `src_be`, to
    /// `dst` (this backend's memory) on `stream`, device to device without
    /// host memory (`cpy_tensor_async`: CUDA's peer copy, a sim device's
    /// peer link). `stream` first waits for `after`, an event of `src_be`
    /// after the work that wrote `src` (a cross-device wait); the copy is
    /// complete once an event recorded on `stream` after it is, and the
    /// caller keeps `src_be` from overwriting `src` until then (its compute
    /// stream waits for that event). `Ok(false)`: this pair of devices
    /// cannot, and nothing was queued; the caller copies through host
    /// memory.
    fn copy_from_peer(
        &self,
        _src_be: &dyn BackendDevice,
        _src: &TensorData,
        _dst: &TensorData,
        _len: usize,
        _stream: Stream,
        _after: Option<&Event>,
    ) -> Result<bool, BackendError> {
        Ok(false)
    }
}
