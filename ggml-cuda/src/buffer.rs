//! The device (streams, event pool, counters), and device memory, pinned
//! host memory and host registrations, each freed on drop.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex};

use ggml_core::backend::check_range;
use ggml_core::{BackendError, Buffer, BufferUsage, PipelineCounters};

use crate::driver::{self, DevPtr, Device, Stream};

/// One device: its context (through the driver interface), the stream
/// kernels (and plain copies) go on, two copy streams (uploads, and reads
/// back, so a read does not queue behind uploads), the event pool and the
/// pipeline counters.
pub(crate) struct Dev {
    pub ordinal: usize,
    pub name: String,
    pub drv: Arc<dyn Device>,
    pub stream: Arc<dyn Stream>,
    /// `Stream::Copy(0)`: uploads.
    pub upload_stream: Arc<dyn Stream>,
    /// `Stream::Copy(1)`: reads back to the host.
    pub readback_stream: Arc<dyn Stream>,
    /// Events no [`PooledEvent`] holds, re-recorded instead of created.
    events: Mutex<Vec<Arc<dyn driver::Event>>>,
    pub counters: PipelineCounters,
}

/// Copy streams per device (`BackendStream::n_copy_streams`).
pub(crate) const N_COPY_STREAMS: usize = 2;

impl Dev {
    /// Open CUDA device `device` (checked against the device count; the
    /// emulator's when it is enabled) with its compute and copy streams.
    pub fn open(device: usize) -> Result<Arc<Dev>, BackendError> {
        let count = crate::cuda_device_count()?;
        if device >= count {
            return Err(BackendError::NoDevice(format!(
                "no CUDA device {device}: {count} device(s) present"
            )));
        }
        let drv = driver::open(device)?;
        let stream = drv.new_stream("compute")?;
        let upload_stream = drv.new_stream("copy0 (uploads)")?;
        let readback_stream = drv.new_stream("copy1 (reads back)")?;
        Ok(Arc::new(Dev {
            ordinal: device,
            name: format!("CUDA{device}"),
            drv,
            stream,
            upload_stream,
            readback_stream,
            events: Mutex::new(Vec::new()),
            counters: PipelineCounters::default(),
        }))
    }

    pub fn bind(&self) -> Result<(), BackendError> {
        self.drv.bind()
    }

    /// Device-wide synchronize: every stream drained (counted).
    pub fn sync(&self) -> Result<(), BackendError> {
        self.counters.add_device_sync();
        self.upload_stream.synchronize()?;
        self.readback_stream.synchronize()?;
        self.stream.synchronize()
    }

    /// The CUDA stream behind a backend stream.
    pub fn stream_of(&self, s: ggml_core::Stream) -> &Arc<dyn Stream> {
        match s {
            ggml_core::Stream::Compute => &self.stream,
            ggml_core::Stream::Copy(k) if k % N_COPY_STREAMS == 0 => &self.upload_stream,
            ggml_core::Stream::Copy(_) => &self.readback_stream,
        }
    }

    /// An event from the pool (a new one when the pool is empty) recorded
    /// now on `stream`; it goes back to the pool when dropped.
    pub fn record_pooled(
        self: &Arc<Self>,
        stream: &Arc<dyn Stream>,
    ) -> Result<PooledEvent, BackendError> {
        let free = self
            .events
            .lock()
            .map_err(|_| BackendError::Device("event pool lock poisoned".into()))?
            .pop();
        let ev = match free {
            Some(ev) => ev,
            None => self.drv.new_event()?,
        };
        let pooled = PooledEvent {
            ev,
            dev: Arc::clone(self),
        };
        stream.record(pooled.event())?;
        Ok(pooled)
    }

    /// Make the compute stream wait for everything queued on the copy
    /// streams so far.
    fn compute_after_copies(self: &Arc<Self>) -> Result<(), BackendError> {
        for s in [&self.upload_stream, &self.readback_stream] {
            let ev = self.record_pooled(s)?;
            self.stream.wait_event(ev.event())?;
        }
        Ok(())
    }
}

/// An event of [`Dev`]'s pool, returned to it on drop (re-recording an
/// event a wait was queued on is safe: the wait keeps the record it saw).
pub(crate) struct PooledEvent {
    ev: Arc<dyn driver::Event>,
    dev: Arc<Dev>,
}

impl PooledEvent {
    pub fn event(&self) -> &dyn driver::Event {
        self.ev.as_ref()
    }
}

impl Drop for PooledEvent {
    fn drop(&mut self) {
        if let Ok(mut pool) = self.dev.events.lock() {
            pool.push(Arc::clone(&self.ev));
        }
    }
}

/// An owned device allocation (`cuMemAlloc` / `cuMemFree`).
pub(crate) struct DevMem {
    pub ptr: DevPtr,
    pub size: usize,
    pub dev: Arc<Dev>,
}

impl DevMem {
    /// Allocate `size` bytes (at least 1) of device memory.
    pub fn alloc(dev: &Arc<Dev>, size: usize) -> Result<DevMem, BackendError> {
        let ptr = dev.drv.malloc(size.max(1)).map_err(|e| match e {
            BackendError::OutOfMemory(m) => BackendError::OutOfMemory(format!("{}: {m}", dev.name)),
            e => e,
        })?;
        Ok(DevMem {
            ptr,
            size,
            dev: Arc::clone(dev),
        })
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        // Work queued on the stream may still use this memory: wait for it.
        // Errors cannot be returned from drop; a failed free leaks at worst.
        let _ = self.dev.bind();
        let _ = self.dev.sync();
        // SAFETY: `ptr` came from `malloc` in `alloc` and is freed only
        // here, after the device's streams finished their work.
        unsafe { self.dev.drv.free(self.ptr) };
    }
}

/// Device memory of a [`crate::CudaBackend`].
pub struct CudaBuffer {
    pub(crate) mem: DevMem,
    usage: BufferUsage,
}

impl CudaBuffer {
    pub(crate) fn new(
        dev: &Arc<Dev>,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Self, BackendError> {
        let mem = DevMem::alloc(dev, size)?;
        // zero it, as host buffers are zeroed
        // SAFETY: `mem` spans at least `size.max(1)` bytes.
        unsafe { dev.stream.memset_d8(mem.ptr, 0, size.max(1)) }?;
        // Waited for here: an upload on the copy stream must not race the
        // memset (the emulator's hazard detector caught that race).
        dev.stream.synchronize()?;
        Ok(CudaBuffer { mem, usage })
    }

    /// Device address of byte `offset`.
    pub fn device_ptr(&self) -> DevPtr {
        self.mem.ptr
    }

    /// Device ordinal owning the memory.
    pub fn device(&self) -> usize {
        self.mem.dev.ordinal
    }

    pub(crate) fn same_dev(&self, dev: &Arc<Dev>) -> bool {
        Arc::ptr_eq(&self.mem.dev, dev)
    }
}

impl fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CudaBuffer({}, {} bytes)",
            self.mem.dev.name, self.mem.size
        )
    }
}

impl Buffer for CudaBuffer {
    fn name(&self) -> &str {
        &self.mem.dev.name
    }
    fn size(&self) -> usize {
        self.mem.size
    }
    fn is_host(&self) -> bool {
        false
    }
    fn usage(&self) -> BufferUsage {
        self.usage
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), BackendError> {
        check_range(self.name(), self.mem.size, offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        let dev = &self.mem.dev;
        dev.bind()?;
        let pinned = dev.drv.is_page_locked(data.as_ptr(), data.len());
        // SAFETY: the range was checked against the allocation. From
        // pageable memory the copy call returns once the driver has taken
        // the bytes (CUDA stages them); from page-locked memory the copy's
        // event is waited for before returning. Either way `data` outlives
        // the copy's use of it.
        unsafe {
            dev.stream
                .memcpy_htod(self.mem.ptr + offset as u64, data.as_ptr(), data.len())
        }?;
        if !pinned {
            // ordered on the compute stream like any later work: no wait
            return Ok(());
        }
        // the host waits for this copy (and the compute before it) only
        dev.record_pooled(&dev.stream)?.event().synchronize()
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        check_range(self.name(), self.mem.size, offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        let dev = &self.mem.dev;
        dev.bind()?;
        // after everything queued on the device's streams, without a
        // device-wide synchronize: the host waits for this read only
        dev.compute_after_copies()?;
        // SAFETY: the range was checked; queued after earlier work on the
        // streams and waited for before `out` is released.
        unsafe {
            dev.stream
                .memcpy_dtoh(out.as_mut_ptr(), self.mem.ptr + offset as u64, out.len())
        }?;
        dev.record_pooled(&dev.stream)?.event().synchronize()
    }
    fn base_ptr(&self) -> Option<*mut u8> {
        None
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Page-locked host memory (`cuMemHostAlloc`): host-addressable, so the CPU
/// backend computes on it, and copies from it to the device are true DMA.
pub struct PinnedBuffer {
    ptr: *mut u8,
    size: usize,
    usage: BufferUsage,
    dev: Arc<Dev>,
}

// SAFETY: plain host memory owned by this value; concurrent access is
// coordinated by its users as for any host buffer.
unsafe impl Send for PinnedBuffer {}
// SAFETY: see above.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    pub(crate) fn new(
        dev: &Arc<Dev>,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Self, BackendError> {
        let p = dev.drv.host_alloc(size.max(1))?;
        if p.is_null() {
            return Err(BackendError::OutOfMemory(format!(
                "{size} bytes of pinned memory"
            )));
        }
        // SAFETY: `p` points to at least `size.max(1)` writable bytes.
        unsafe { std::ptr::write_bytes(p, 0, size.max(1)) };
        Ok(PinnedBuffer {
            ptr: p,
            size,
            usage,
            dev: Arc::clone(dev),
        })
    }
}

impl PinnedBuffer {
    /// The bytes, for filling them (exclusive through `&mut self`).
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `size` (allocated `size.max(1)`) bytes
        // owned by this value; `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.size) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let _ = self.dev.bind();
        let _ = self.dev.sync(); // queued copies may still read it
                                 // SAFETY: `ptr` came from `host_alloc` and is freed only here.
        unsafe { self.dev.drv.host_free(self.ptr) };
    }
}

impl fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PinnedBuffer({} bytes)", self.size)
    }
}

impl Buffer for PinnedBuffer {
    fn name(&self) -> &str {
        "CUDA_Host"
    }
    fn size(&self) -> usize {
        self.size
    }
    fn is_host(&self) -> bool {
        true
    }
    fn usage(&self) -> BufferUsage {
        self.usage
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), BackendError> {
        check_range("CUDA_Host", self.size, offset, data.len())?;
        // SAFETY: range checked; `copy` tolerates overlap.
        unsafe { std::ptr::copy(data.as_ptr(), self.ptr.add(offset), data.len()) };
        Ok(())
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        check_range("CUDA_Host", self.size, offset, out.len())?;
        // SAFETY: range checked.
        unsafe { std::ptr::copy(self.ptr.add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }
    fn base_ptr(&self) -> Option<*mut u8> {
        Some(self.ptr)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// An existing host range page-locked with `cuMemHostRegister`; keeps the
/// bytes alive and unregisters on drop.
pub struct HostRegistration {
    bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    dev: Arc<Dev>,
    read_only: bool,
}

impl HostRegistration {
    pub(crate) fn new(
        dev: &Arc<Dev>,
        bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    ) -> Result<Self, BackendError> {
        dev.bind()?;
        let s: &[u8] = (*bytes).as_ref();
        if s.is_empty() {
            return Err(BackendError::Unsupported(
                "registering an empty range".into(),
            ));
        }
        if !dev.drv.host_register_supported() {
            return Err(BackendError::Unsupported(format!(
                "{}: cuMemHostRegister is not supported on this system",
                dev.name
            )));
        }
        // Mapped model files are read-only: try the read-only flag first.
        let mut last = None;
        for ro in [true, false] {
            // SAFETY: the range is live for as long as `bytes` (held by the
            // returned value, which unregisters before releasing it).
            let r = unsafe { dev.drv.host_register(s.as_ptr(), s.len(), ro) };
            match r {
                Ok(()) => {
                    return Ok(HostRegistration {
                        bytes: Arc::clone(&bytes),
                        dev: Arc::clone(dev),
                        read_only: ro,
                    })
                }
                Err(e) => last = Some(e),
            }
        }
        Err(BackendError::Unsupported(format!(
            "cuMemHostRegister of {} bytes failed: {}",
            s.len(),
            last.map(|e| e.to_string()).unwrap_or_default()
        )))
    }

    /// Registered bytes.
    pub fn len(&self) -> usize {
        (*self.bytes).as_ref().len()
    }

    /// Whether the range is empty (never: empty ranges are refused).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the read-only flag was accepted.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        let _ = self.dev.bind();
        let _ = self.dev.sync(); // copies from the range may be queued
        let p = (*self.bytes).as_ref().as_ptr();
        // SAFETY: `p` is the start of the range registered in `new`.
        unsafe { self.dev.drv.host_unregister(p) };
    }
}

impl fmt::Debug for HostRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostRegistration({} bytes)", self.len())
    }
}
