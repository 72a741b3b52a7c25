//! The one interface between the backend and CUDA: everything `backend.rs`,
//! `buffer.rs`, `kernels.rs` and `bandwidth.rs` ask of a device goes through
//! the [`Device`], [`Stream`] and [`Event`] traits below.
//!
//! Two implementations:
//! - [`cudarc`] (`CudaDevice`): the real driver, each method one
//!   driver call plus error mapping;
//! - [`crate::emulator`] (`EmuDevice`): device memory in host allocations,
//!   one worker thread per stream, CUDA's event semantics, kernels run on
//!   the CPU by [`crate::emu_kernels`].
//!
//! [`open`] picks one per device ordinal: the emulator when it is enabled
//! (`GGML_CUDA_EMULATOR=1` or [`crate::emulator::enable`]), the driver
//! otherwise. Data flows as on a GPU: the backend holds device pointers
//! ([`DevPtr`]), queues copies and launches on streams, and orders streams
//! with events; the host only sees results after a synchronization.
//!
//! Two devices copy peer to peer where the driver says one can address the
//! other's memory ([`Device::can_access_peer`], then
//! [`Device::enable_peer_access`] and [`Stream::memcpy_peer`]); the backend
//! copies through host memory otherwise.
//!
//! Dispatch is dynamic (`Arc<dyn Device>`): one virtual call per driver call,
//! negligible next to the driver call itself.

pub mod cudarc;

use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;

use ggml_core::BackendError;

/// A device address (`CUdeviceptr`; in the emulator a host address).
pub type DevPtr = u64;

/// A tensor as the kernels see it: ggml's `ne` and `nb` (`struct T4` in
/// `kernels.cu`), passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct T4 {
    /// Elements per dimension.
    pub ne: [i64; 4],
    /// Bytes per step in each dimension.
    pub nb: [i64; 4],
}

/// One kernel parameter, by value. Equality compares floats by their bits
/// (two launches are the same launch when every parameter is bit-equal).
#[derive(Clone, Copy, Debug)]
pub enum KernelArg {
    /// A device pointer.
    Ptr(DevPtr),
    /// An `int`.
    I32(i32),
    /// A `long long`.
    I64(i64),
    /// A `float`.
    F32(f32),
    /// A `struct T4`.
    T4(T4),
}

impl PartialEq for KernelArg {
    fn eq(&self, o: &KernelArg) -> bool {
        match (self, o) {
            (KernelArg::Ptr(a), KernelArg::Ptr(b)) => a == b,
            (KernelArg::I32(a), KernelArg::I32(b)) => a == b,
            (KernelArg::I64(a), KernelArg::I64(b)) => a == b,
            (KernelArg::F32(a), KernelArg::F32(b)) => a.to_bits() == b.to_bits(),
            (KernelArg::T4(a), KernelArg::T4(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for KernelArg {}

impl KernelArg {
    /// A pointer to the value, as CUDA's `kernelParams` wants it: valid for
    /// as long as `self` is not moved or dropped.
    pub fn as_param(&self) -> *const c_void {
        match self {
            KernelArg::Ptr(v) => v as *const u64 as *const c_void,
            KernelArg::I32(v) => v as *const i32 as *const c_void,
            KernelArg::I64(v) => v as *const i64 as *const c_void,
            KernelArg::F32(v) => v as *const f32 as *const c_void,
            KernelArg::T4(v) => v as *const T4 as *const c_void,
        }
    }
}

/// One device byte range a launch reads or writes. The backend passes these
/// with each launch for the emulator's hazard detector; the driver ignores
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// First byte.
    pub ptr: DevPtr,
    /// Length in bytes.
    pub len: usize,
    /// Whether the launch writes the range (else it only reads it).
    pub write: bool,
    /// Only the experts of the range that device-side ids select are read
    /// (`mul_mat_id`'s expert tensor): which ones is known when the launch
    /// runs, not when it is queued. `None`: the whole range.
    pub select: Option<Selected>,
}

impl Access {
    /// The whole range `[ptr, ptr + len)`, written or only read.
    pub fn range(ptr: DevPtr, len: usize, write: bool) -> Access {
        Access {
            ptr,
            len,
            write,
            select: None,
        }
    }
}

/// The experts a launch reads from a stacked expert tensor (`[ptr, ptr +
/// len)` of its [`Access`]), chosen by i32 ids in device memory: expert `e`
/// is bytes `ptr + e * stride ..+ expert_bytes`. Ids outside `0..n_expert`
/// (`-1` rows) select nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selected {
    /// The ids: `ids_t.ne[0]` per row, `ids_t.ne[1]` rows (byte strides
    /// `ids_t.nb`).
    pub ids: DevPtr,
    /// The ids' layout.
    pub ids_t: T4,
    /// Bytes from one expert to the next.
    pub stride: usize,
    /// Bytes of one expert.
    pub expert_bytes: usize,
    /// Experts in the tensor.
    pub n_expert: usize,
}

/// A kernel looked up in a loaded module, named for error messages.
pub struct Function {
    /// The kernel's `extern "C"` name.
    pub name: &'static str,
    /// The implementation's handle (a `CudaFunction`, or nothing for the
    /// emulator, which launches by name).
    pub(crate) handle: Box<dyn Any + Send + Sync>,
}

/// A module image for [`Device::load_module`].
#[derive(Clone, Debug)]
pub struct ModuleImage {
    /// What it is.
    pub kind: ImageKind,
    /// The cubin's bytes, or the PTX text (no NUL byte).
    pub bytes: Vec<u8>,
    /// Where it came from, for messages (`shipped sm_90.cubin.xz`).
    pub origin: String,
}

/// The kind of a [`ModuleImage`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// Machine code for `sm_XY` (`sm` = XY).
    Cubin {
        /// The architecture (90 for `sm_90`).
        sm: u32,
    },
    /// PTX of ISA `isa` for `.target sm_XY` (`target` = XY).
    Ptx {
        /// The `.version` it declares.
        isa: crate::ptx_isa::Isa,
        /// The `.target` it declares.
        target: u32,
    },
}

impl std::fmt::Display for ModuleImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            ImageKind::Cubin { sm } => write!(f, "cubin sm_{sm} ({})", self.origin),
            ImageKind::Ptx { isa, target } => write!(
                f,
                "PTX compute_{target} ISA {} ({})",
                crate::ptx_isa::isa_text(isa),
                self.origin
            ),
        }
    }
}

/// A launch's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    /// Blocks per grid dimension.
    pub grid: [u32; 3],
    /// Threads per block dimension.
    pub block: [u32; 3],
    /// Dynamic shared memory per block in bytes.
    pub shared_bytes: u32,
}

/// A device and its context.
pub trait Device: Send + Sync {
    /// Whether this is the emulator.
    fn is_emulated(&self) -> bool;
    /// Make the context current on this thread (the emulator has none).
    fn bind(&self) -> Result<(), BackendError>;
    /// The device's name (`NVIDIA H200`, or the emulator's, which says so).
    fn name(&self) -> Result<String, BackendError>;
    /// `(free, total)` device memory in bytes.
    fn mem_info(&self) -> Result<(usize, usize), BackendError>;
    /// Total device memory in bytes.
    fn total_mem(&self) -> Result<usize, BackendError>;
    /// A new stream, ordered only by events with the others (`label`, e.g.
    /// `compute`, names it in the emulator's messages).
    fn new_stream(&self, label: &str) -> Result<Arc<dyn Stream>, BackendError>;
    /// A new event with nothing recorded, without timing
    /// (`cuEventCreate`, `CU_EVENT_DISABLE_TIMING`): what the backend's
    /// event pool holds and re-records with [`Stream::record`].
    fn new_event(&self) -> Result<Arc<dyn Event>, BackendError>;
    /// `size` bytes of device memory (`cuMemAlloc`).
    fn malloc(&self, size: usize) -> Result<DevPtr, BackendError>;
    /// Free memory from [`Device::malloc`].
    ///
    /// # Safety
    /// `ptr` came from `malloc` on this device, is freed once, and no queued
    /// work uses it any more.
    unsafe fn free(&self, ptr: DevPtr);
    /// `size` bytes of page-locked host memory (`cuMemHostAlloc`, portable).
    fn host_alloc(&self, size: usize) -> Result<*mut u8, BackendError>;
    /// Free memory from [`Device::host_alloc`].
    ///
    /// # Safety
    /// `ptr` came from `host_alloc` on this device and is freed once, after
    /// any queued copy from it is complete.
    unsafe fn host_free(&self, ptr: *mut u8);
    /// Whether host ranges can be page-locked in place.
    fn host_register_supported(&self) -> bool;
    /// Page-lock `len` bytes at `ptr` (`cuMemHostRegister`, portable,
    /// optionally read-only).
    ///
    /// # Safety
    /// The range stays allocated until [`Device::host_unregister`].
    unsafe fn host_register(
        &self,
        ptr: *const u8,
        len: usize,
        read_only: bool,
    ) -> Result<(), BackendError>;
    /// Whether host memory `[ptr, ptr + len)` is page-locked for this
    /// driver (allocated by [`Device::host_alloc`] or registered): a copy
    /// from it is asynchronous DMA; from any other memory the copy call
    /// returns only once the driver has taken the bytes.
    fn is_page_locked(&self, ptr: *const u8, len: usize) -> bool;
    /// Undo [`Device::host_register`].
    ///
    /// # Safety
    /// `ptr` is the start of a registered range.
    unsafe fn host_unregister(&self, ptr: *const u8);
    /// The device's compute capability `(major, minor)` (`(9, 0)` for an
    /// H200; the emulator's pretended one).
    fn compute_capability(&self) -> Result<(u32, u32), BackendError>;
    /// The driver's CUDA version as `cuDriverGetVersion` writes it (12040
    /// for CUDA 12.4; the emulator's pretended one).
    fn driver_version(&self) -> Result<i32, BackendError>;
    /// Streaming multiprocessors (`CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`;
    /// the emulator pretends an H100 SXM's 132): how many tiles fill the
    /// device, for the split-k choice of the prompt kernels.
    fn multiprocessor_count(&self) -> Result<u32, BackendError>;
    /// Let launches of `f` use up to `bytes` of dynamic shared memory
    /// (`cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`:
    /// above 48 KiB a kernel needs the opt-in; the emulator checks the same
    /// limits).
    fn set_max_dynamic_shared(&self, f: &Function, bytes: u32) -> Result<(), BackendError>;
    /// Load a module image (`cuModuleLoadData`: a cubin, or PTX the driver
    /// JIT-compiles) and look up the kernels `names` in it. A driver
    /// refuses a cubin of another architecture, PTX of a newer ISA than its
    /// own or for a newer target, and a missing kernel; the emulator checks
    /// the same before it launches its CPU build of the same source.
    fn load_module(
        &self,
        image: &ModuleImage,
        names: &[&'static str],
    ) -> Result<Vec<Function>, BackendError>;
    /// Test-only: whether the planted bug `GGML_CUDA_EMULATOR_DROP_WAIT`
    /// drops waits of `kind` on this device (never on a real device).
    fn planted_drop_wait(&self, _kind: &str) -> bool {
        false
    }
    /// Whether this device can address `peer`'s memory directly
    /// (`cuDeviceCanAccessPeer`); `false` for a device of another driver.
    fn can_access_peer(&self, peer: &dyn Device) -> Result<bool, BackendError>;
    /// Let this context access `peer`'s memory (`cuCtxEnablePeerAccess`;
    /// already enabled is success).
    fn enable_peer_access(&self, peer: &dyn Device) -> Result<(), BackendError>;
    /// For the implementation to downcast devices it is handed (a peer).
    fn as_any(&self) -> &dyn Any;
}

impl dyn Device {
    /// Load the kernels `names` from the image the loader picks for this
    /// device ([`crate::kernel_load::load_names`]; the backend shares one
    /// load per device instead).
    pub fn load_kernels(&self, names: &[&'static str]) -> Result<Vec<Function>, BackendError> {
        crate::kernel_load::load_names(self, names)
    }
}

/// A stream: work queued on it runs in order, asynchronously to the host.
pub trait Stream: Send + Sync {
    /// Queue setting `n` bytes at `dst` to `value`.
    ///
    /// # Safety
    /// `dst..dst+n` lies in live device memory.
    unsafe fn memset_d8(&self, dst: DevPtr, value: u8, n: usize) -> Result<(), BackendError>;
    /// Queue a copy of `n` host bytes at `src` to `dst`. The bytes are read
    /// when the copy runs, not when it is queued.
    ///
    /// # Safety
    /// `dst..dst+n` lies in live device memory; `src..src+n` stays valid and
    /// unchanged until the copy is complete (an event after it, or a
    /// synchronize).
    unsafe fn memcpy_htod(&self, dst: DevPtr, src: *const u8, n: usize)
        -> Result<(), BackendError>;
    /// Queue a copy of `n` device bytes at `src` to host memory at `dst`.
    ///
    /// # Safety
    /// `src..src+n` lies in live device memory; `dst..dst+n` stays valid and
    /// unused by the host until the copy is complete.
    unsafe fn memcpy_dtoh(&self, dst: *mut u8, src: DevPtr, n: usize) -> Result<(), BackendError>;
    /// Queue a device-to-device copy of `n` bytes.
    ///
    /// # Safety
    /// Both ranges lie in live device memory.
    unsafe fn memcpy_dtod(&self, dst: DevPtr, src: DevPtr, n: usize) -> Result<(), BackendError>;
    /// Queue a copy of `n` bytes from `src`, memory of the device
    /// `src_dev` (a peer this stream's device has enabled access to), to
    /// `dst` in this stream's device (`cuMemcpyPeerAsync`).
    ///
    /// # Safety
    /// Both ranges lie in live device memory of their devices, and the
    /// source stays allocated until the copy is complete.
    unsafe fn memcpy_peer(
        &self,
        dst: DevPtr,
        src: DevPtr,
        src_dev: &dyn Device,
        n: usize,
    ) -> Result<(), BackendError>;
    /// Record an event capturing the work queued so far (timing-capable
    /// when `timing`).
    fn record_event(&self, timing: bool) -> Result<Arc<dyn Event>, BackendError>;
    /// Record `ev` (from [`Device::new_event`] of this device) after the
    /// work queued so far (`cuEventRecord`): a wait or synchronize issued
    /// later sees this record; waits issued before keep the earlier one.
    fn record(&self, ev: &dyn Event) -> Result<(), BackendError>;
    /// Make work queued later on this stream wait for `ev`'s work.
    fn wait_event(&self, ev: &dyn Event) -> Result<(), BackendError>;
    /// Block the host until the stream's queued work is complete.
    fn synchronize(&self) -> Result<(), BackendError>;
    /// Queue a kernel launch. `access` lists the device ranges the kernel
    /// reads and writes, for the emulator's hazard detector (the driver
    /// ignores it).
    ///
    /// # Safety
    /// `args` match the kernel's parameters in number, order and type, and
    /// every pointer among them covers what the kernel touches.
    unsafe fn launch(
        &self,
        f: &Function,
        dims: LaunchDims,
        args: &[KernelArg],
        access: Option<&[Access]>,
    ) -> Result<(), BackendError>;
    /// Start capturing (`cuStreamBeginCapture`, thread-local mode): the
    /// launches queued next are recorded into a graph, not run. Only
    /// launches may be queued while capturing.
    fn begin_capture(&self) -> Result<(), BackendError>;
    /// End the capture and instantiate its graph (`cuStreamEndCapture`,
    /// `cuGraphInstantiate`); dropping the result destroys both.
    fn end_capture(&self) -> Result<Box<dyn GraphExec>, BackendError>;
    /// Queue a replay of a graph captured on this stream (`cuGraphLaunch`):
    /// its launches run in order, as if launched again with the same
    /// parameters.
    ///
    /// # Safety
    /// Every device pointer the captured launches use is still live and
    /// holds what their kernels expect (as for [`Stream::launch`]).
    unsafe fn launch_graph(&self, g: &dyn GraphExec) -> Result<(), BackendError>;
}

/// An instantiated graph of captured launches (`CUgraphExec`).
pub trait GraphExec: Send + Sync {
    /// Kernel launches the graph holds.
    fn n_launches(&self) -> usize;
    /// Replace the parameters of the graph's launch `i` (in capture order)
    /// for later replays (`cuGraphExecKernelNodeSetParams`): same kernel,
    /// `args` and geometry as a new launch would take.
    ///
    /// # Safety
    /// As [`Stream::launch`] for `f`, `args` and the graph's later replays.
    unsafe fn set_launch(
        &mut self,
        i: usize,
        f: &Function,
        dims: LaunchDims,
        args: &[KernelArg],
        access: &[Access],
    ) -> Result<(), BackendError>;
    /// For the implementation to downcast graphs it is handed.
    fn as_any(&self) -> &dyn Any;
}

/// A recorded event.
pub trait Event: Send + Sync {
    /// Block the host until the event's work is complete.
    fn synchronize(&self) -> Result<(), BackendError>;
    /// Whether the event's work is complete (without blocking).
    fn query(&self) -> Result<bool, BackendError>;
    /// Milliseconds from this event to `end` (waits for both).
    fn elapsed_ms(&self, end: &dyn Event) -> Result<f32, BackendError>;
    /// For the implementation to downcast events it is handed.
    fn as_any(&self) -> &dyn Any;
}

/// Open device `ordinal`: emulated when the emulator is enabled, else the
/// CUDA driver's (whose libraries must have been probed by the caller).
pub fn open(ordinal: usize) -> Result<Arc<dyn Device>, BackendError> {
    if crate::emulator::enabled() {
        crate::emulator::open(ordinal)
    } else {
        cudarc::CudaDevice::open(ordinal)
    }
}
