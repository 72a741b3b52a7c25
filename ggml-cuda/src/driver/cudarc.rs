//! The real driver behind [`super::Device`]: `cudarc`'s context, streams
//! and events, and its raw `result` calls. Each method is one driver call
//! plus error mapping (`load_module` loads the image `kernel_load.rs`
//! picked: a shipped cubin, PTX, or NVRTC's output).
//! None of this runs without a GPU: the emulator replaces it in CI.

use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{result, CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaStream};
use cudarc::nvrtc::Ptx;
use ggml_core::BackendError;

use super::{
    Access, DevPtr, Device, Event, Function, GraphExec, ImageKind, KernelArg, LaunchDims,
    ModuleImage, Stream,
};
use crate::dev_err;

/// A CUDA device's primary context.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
}

impl CudaDevice {
    /// Open device `ordinal` (the caller checked it against the count).
    pub fn open(ordinal: usize) -> Result<Arc<dyn Device>, BackendError> {
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| BackendError::NoDevice(format!("CUDA device {ordinal}: {e}")))?;
        Ok(Arc::new(CudaDevice { ctx }))
    }
}

impl Device for CudaDevice {
    fn is_emulated(&self) -> bool {
        false
    }

    fn bind(&self) -> Result<(), BackendError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| dev_err("binding the context", e))
    }

    fn name(&self) -> Result<String, BackendError> {
        self.ctx.name().map_err(|e| dev_err("device name", e))
    }

    fn mem_info(&self) -> Result<(usize, usize), BackendError> {
        self.ctx
            .mem_get_info()
            .map_err(|e| dev_err("cuMemGetInfo", e))
    }

    fn total_mem(&self) -> Result<usize, BackendError> {
        self.ctx.total_mem().map_err(|e| dev_err("total memory", e))
    }

    fn new_stream(&self, _label: &str) -> Result<Arc<dyn Stream>, BackendError> {
        let s = self
            .ctx
            .new_stream()
            .map_err(|e| dev_err("creating a stream", e))?;
        Ok(Arc::new(CudaStreamH {
            ctx: Arc::clone(&self.ctx),
            s,
            captured: std::sync::Mutex::new(None),
        }))
    }

    fn new_event(&self) -> Result<Arc<dyn Event>, BackendError> {
        let ev = self
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(|e| dev_err("creating an event", e))?;
        Ok(Arc::new(CudaEventH(ev)))
    }

    fn malloc(&self, size: usize) -> Result<DevPtr, BackendError> {
        self.bind()?;
        // SAFETY: the context is current on this thread; the caller owns the
        // result and frees it once with `free`.
        unsafe { result::malloc_sync(size) }
            .map_err(|e| dev_err(&format!("cuMemAlloc of {size} bytes"), e))
    }

    unsafe fn free(&self, ptr: DevPtr) {
        let _ = self.bind();
        // SAFETY: the caller guarantees `ptr` came from `malloc`, once.
        let _ = unsafe { result::free_sync(ptr as CUdeviceptr) };
    }

    fn host_alloc(&self, size: usize) -> Result<*mut u8, BackendError> {
        self.bind()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer; the context is current.
        let r = unsafe { sys::cuMemHostAlloc(&mut p, size, sys::CU_MEMHOSTALLOC_PORTABLE) };
        r.result()
            .map_err(|e| dev_err(&format!("cuMemHostAlloc of {size} bytes"), e))?;
        Ok(p as *mut u8)
    }

    unsafe fn host_free(&self, ptr: *mut u8) {
        let _ = self.bind();
        // SAFETY: the caller guarantees `ptr` came from `host_alloc`, once.
        let _ = unsafe { sys::cuMemFreeHost(ptr as *mut c_void) };
    }

    fn host_register_supported(&self) -> bool {
        self.ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED)
            .unwrap_or(0)
            != 0
    }

    unsafe fn host_register(
        &self,
        ptr: *const u8,
        len: usize,
        read_only: bool,
    ) -> Result<(), BackendError> {
        self.bind()?;
        let mut flags = sys::CU_MEMHOSTREGISTER_PORTABLE;
        if read_only {
            flags |= sys::CU_MEMHOSTREGISTER_READ_ONLY;
        }
        // SAFETY: the caller keeps the range allocated until unregistered.
        unsafe { sys::cuMemHostRegister_v2(ptr as *mut c_void, len, flags) }
            .result()
            .map_err(|e| dev_err(&format!("cuMemHostRegister of {len} bytes"), e))
    }

    fn is_page_locked(&self, ptr: *const u8, len: usize) -> bool {
        if self.bind().is_err() {
            return false;
        }
        let (mut first, mut last): (u32, u32) = (0, 0);
        // SAFETY: valid out-pointers of the attribute's type (an unsigned
        // int); the driver only looks the addresses up (an address it does
        // not know is an error, not an access).
        let ok = |out: &mut u32, p: usize| unsafe {
            sys::cuPointerGetAttribute(
                out as *mut u32 as *mut c_void,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                p as CUdeviceptr,
            )
        } == sys::cudaError_enum::CUDA_SUCCESS;
        let host = sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32;
        ok(&mut first, ptr as usize)
            && ok(&mut last, ptr as usize + len.saturating_sub(1))
            && first == host
            && last == host
    }

    unsafe fn host_unregister(&self, ptr: *const u8) {
        let _ = self.bind();
        // SAFETY: the caller passes the start of a registered range.
        let _ = unsafe { sys::cuMemHostUnregister(ptr as *mut c_void) };
    }

    fn can_access_peer(&self, peer: &dyn Device) -> Result<bool, BackendError> {
        let Some(p) = peer.as_any().downcast_ref::<CudaDevice>() else {
            return Ok(false);
        };
        let mut can: std::ffi::c_int = 0;
        // SAFETY: `can` is a valid out-pointer; both device handles are live.
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.ctx.cu_device(), p.ctx.cu_device()) }
            .result()
            .map_err(|e| dev_err("cuDeviceCanAccessPeer", e))?;
        Ok(can != 0)
    }

    fn enable_peer_access(&self, peer: &dyn Device) -> Result<(), BackendError> {
        let Some(p) = peer.as_any().downcast_ref::<CudaDevice>() else {
            return Err(BackendError::Device(
                "peer access to a device of another driver".into(),
            ));
        };
        self.bind()?;
        // SAFETY: this context is current; the peer's context is live.
        let r = unsafe { sys::cuCtxEnablePeerAccess(p.ctx.cu_ctx(), 0) };
        match r {
            sys::cudaError_enum::CUDA_SUCCESS
            | sys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
            e => e.result().map_err(|e| dev_err("cuCtxEnablePeerAccess", e)),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn compute_capability(&self) -> Result<(u32, u32), BackendError> {
        let (major, minor) = self
            .ctx
            .compute_capability()
            .map_err(|e| dev_err("compute capability", e))?;
        Ok((major.max(0) as u32, minor.max(0) as u32))
    }

    fn multiprocessor_count(&self) -> Result<u32, BackendError> {
        let n = self
            .ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| dev_err("multiprocessor count", e))?;
        Ok(n.max(1) as u32)
    }

    fn set_max_dynamic_shared(&self, f: &Function, bytes: u32) -> Result<(), BackendError> {
        let Some(cf) = f.handle.downcast_ref::<CudaFunction>() else {
            return Err(BackendError::Device(format!(
                "kernel {} was not loaded by the CUDA driver",
                f.name
            )));
        };
        self.bind()?;
        cf.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
        .map_err(|e| dev_err(&format!("{}: dynamic shared memory opt-in", f.name), e))
    }

    fn driver_version(&self) -> Result<i32, BackendError> {
        crate::driver_version()
            .ok_or_else(|| BackendError::Device("cuDriverGetVersion failed".into()))
    }

    fn load_module(
        &self,
        image: &ModuleImage,
        names: &[&'static str],
    ) -> Result<Vec<Function>, BackendError> {
        let ptx = match image.kind {
            ImageKind::Cubin { .. } => Ptx::from_binary(image.bytes.clone()),
            ImageKind::Ptx { .. } => {
                // cudarc turns the text into a C string (a NUL would panic)
                if image.bytes.contains(&0) {
                    return Err(BackendError::Device(format!(
                        "{image}: the PTX contains a NUL byte"
                    )));
                }
                Ptx::from_src(String::from_utf8_lossy(&image.bytes).into_owned())
            }
        };
        let module = self
            .ctx
            .load_module(ptx)
            .map_err(|e| BackendError::Device(format!("cuModuleLoadData: {e}")))?;
        names
            .iter()
            .map(|&name| {
                let f = module
                    .load_function(name)
                    .map_err(|e| BackendError::Device(format!("kernel {name}: {e}")))?;
                Ok(Function {
                    name,
                    handle: Box::new(f),
                })
            })
            .collect()
    }
}

/// A CUDA stream of a context.
struct CudaStreamH {
    ctx: Arc<CudaContext>,
    s: Arc<CudaStream>,
    /// The kernel nodes captured since the last [`Stream::begin_capture`],
    /// in capture order (`None`: not capturing).
    captured: std::sync::Mutex<Option<Vec<Node>>>,
}

fn lock_err() -> BackendError {
    BackendError::Device("stream lock poisoned".into())
}

impl CudaStreamH {
    fn bind(&self) -> Result<(), BackendError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| dev_err("binding the context", e))
    }
}

/// A CUDA event.
struct CudaEventH(CudaEvent);

/// An instantiated CUDA graph and its kernel nodes in capture order.
struct CudaGraphH(CudaGraph, Vec<Node>);

/// A graph node handle (owned by its graph).
#[derive(Clone, Copy)]
struct Node(sys::CUgraphNode);
// SAFETY: a node handle is an opaque id into its graph; the backend
// serializes every call on one graph.
unsafe impl Send for Node {}

// SAFETY: a `CUgraphExec` may be launched from any thread; the backend
// serializes every call on one graph (it keeps them behind a mutex).
unsafe impl Send for CudaGraphH {}
// SAFETY: as above: no two threads call into one graph at once.
unsafe impl Sync for CudaGraphH {}

impl GraphExec for CudaGraphH {
    fn n_launches(&self) -> usize {
        self.1.len()
    }

    unsafe fn set_launch(
        &mut self,
        i: usize,
        f: &Function,
        dims: LaunchDims,
        args: &[KernelArg],
        _access: &[Access],
    ) -> Result<(), BackendError> {
        let Some(cf) = f.handle.downcast_ref::<CudaFunction>() else {
            return Err(BackendError::Device(format!(
                "kernel {} was not loaded by the CUDA driver",
                f.name
            )));
        };
        let node = self.1.get(i).copied().ok_or_else(|| {
            BackendError::Device(format!("the graph has no launch {i} to update"))
        })?;
        let mut params: Vec<*mut c_void> = args.iter().map(|a| a.as_param() as *mut _).collect();
        let p = sys::CUDA_KERNEL_NODE_PARAMS {
            func: cf.cu_function(),
            gridDimX: dims.grid[0],
            gridDimY: dims.grid[1],
            gridDimZ: dims.grid[2],
            blockDimX: dims.block[0],
            blockDimY: dims.block[1],
            blockDimZ: dims.block[2],
            sharedMemBytes: dims.shared_bytes,
            kernelParams: params.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: `node` is a kernel node of this graph's exec (recorded in
        // capture order); the caller guarantees `args` match the kernel;
        // the parameter values are copied before the call returns.
        unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.0.cu_graph_exec(), node.0, &p) }
            .result()
            .map_err(|e| dev_err(&format!("updating graph launch {i} ({})", f.name), e))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Stream for CudaStreamH {
    unsafe fn memset_d8(&self, dst: DevPtr, value: u8, n: usize) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: the caller guarantees the range is live device memory.
        unsafe { result::memset_d8_async(dst, value, n, self.s.cu_stream()) }
            .map_err(|e| dev_err("cuMemsetD8Async", e))
    }

    unsafe fn memcpy_htod(
        &self,
        dst: DevPtr,
        src: *const u8,
        n: usize,
    ) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: the caller keeps `src..src+n` valid until the copy is done.
        let src = unsafe { std::slice::from_raw_parts(src, n) };
        // SAFETY: as above; `dst..dst+n` is live device memory.
        unsafe { result::memcpy_htod_async(dst, src, self.s.cu_stream()) }
            .map_err(|e| dev_err("host-to-device copy", e))
    }

    unsafe fn memcpy_dtoh(&self, dst: *mut u8, src: DevPtr, n: usize) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: the caller keeps `dst..dst+n` valid and unused until done.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst, n) };
        // SAFETY: as above; `src..src+n` is live device memory.
        unsafe { result::memcpy_dtoh_async(dst, src, self.s.cu_stream()) }
            .map_err(|e| dev_err("device-to-host copy", e))
    }

    unsafe fn memcpy_dtod(&self, dst: DevPtr, src: DevPtr, n: usize) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: the caller guarantees both ranges are live device memory.
        unsafe { result::memcpy_dtod_async(dst, src, n, self.s.cu_stream()) }
            .map_err(|e| dev_err("device-to-device copy", e))
    }

    unsafe fn memcpy_peer(
        &self,
        dst: DevPtr,
        src: DevPtr,
        src_dev: &dyn Device,
        n: usize,
    ) -> Result<(), BackendError> {
        let Some(p) = src_dev.as_any().downcast_ref::<CudaDevice>() else {
            return Err(BackendError::Device(
                "a peer copy from a device of another driver".into(),
            ));
        };
        self.bind()?;
        // SAFETY: the caller guarantees both ranges are live device memory
        // of their contexts until the copy completes.
        unsafe {
            sys::cuMemcpyPeerAsync(
                dst,
                self.ctx.cu_ctx(),
                src,
                p.ctx.cu_ctx(),
                n,
                self.s.cu_stream(),
            )
        }
        .result()
        .map_err(|e| dev_err("cuMemcpyPeerAsync", e))
    }

    fn record_event(&self, timing: bool) -> Result<Arc<dyn Event>, BackendError> {
        self.bind()?;
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        let ev = self
            .s
            .record_event(Some(flags))
            .map_err(|e| dev_err("recording an event", e))?;
        Ok(Arc::new(CudaEventH(ev)))
    }

    fn record(&self, ev: &dyn Event) -> Result<(), BackendError> {
        let Some(h) = ev.as_any().downcast_ref::<CudaEventH>() else {
            return Err(BackendError::Device(
                "recording an event of another driver".into(),
            ));
        };
        h.0.record(&self.s)
            .map_err(|e| dev_err("recording an event", e))
    }

    fn begin_capture(&self) -> Result<(), BackendError> {
        self.s
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| dev_err("cuStreamBeginCapture", e))?;
        *self.captured.lock().map_err(|_| lock_err())? = Some(Vec::new());
        Ok(())
    }

    fn end_capture(&self) -> Result<Box<dyn GraphExec>, BackendError> {
        let g = self
            .s
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(|e| dev_err("cuStreamEndCapture / cuGraphInstantiate", e))?
            .ok_or_else(|| BackendError::Device("cuStreamEndCapture: an empty graph".into()))?;
        let nodes = self
            .captured
            .lock()
            .map_err(|_| lock_err())?
            .take()
            .unwrap_or_default();
        Ok(Box::new(CudaGraphH(g, nodes)))
    }

    unsafe fn launch_graph(&self, g: &dyn GraphExec) -> Result<(), BackendError> {
        let Some(h) = g.as_any().downcast_ref::<CudaGraphH>() else {
            return Err(BackendError::Device(
                "launching a graph of another driver".into(),
            ));
        };
        h.0.launch().map_err(|e| dev_err("cuGraphLaunch", e))
    }

    fn wait_event(&self, ev: &dyn Event) -> Result<(), BackendError> {
        let Some(h) = ev.as_any().downcast_ref::<CudaEventH>() else {
            return Err(BackendError::Device(
                "waiting on an event of another driver".into(),
            ));
        };
        self.bind()?;
        // SAFETY: both handles are live (the caller holds the event);
        // cuStreamWaitEvent accepts events from other contexts.
        unsafe {
            result::stream::wait_event(
                self.s.cu_stream(),
                h.0.cu_event(),
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| dev_err("waiting on an event", e))
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.bind()?;
        self.s
            .synchronize()
            .map_err(|e| dev_err("stream synchronize", e))
    }

    unsafe fn launch(
        &self,
        f: &Function,
        dims: LaunchDims,
        args: &[KernelArg],
        _access: Option<&[Access]>,
    ) -> Result<(), BackendError> {
        let Some(cf) = f.handle.downcast_ref::<CudaFunction>() else {
            return Err(BackendError::Device(format!(
                "kernel {} was not loaded by the CUDA driver",
                f.name
            )));
        };
        self.bind()?;
        let mut params: Vec<*mut c_void> = args.iter().map(|a| a.as_param() as *mut _).collect();
        let [gx, gy, gz] = dims.grid;
        let [bx, by, bz] = dims.block;
        // SAFETY: the caller guarantees `args` match the kernel's signature;
        // each parameter pointer points into `args`, alive for the call
        // (cuLaunchKernel copies the values before returning).
        unsafe {
            result::launch_kernel(
                cf.cu_function(),
                (gx, gy, gz),
                (bx, by, bz),
                dims.shared_bytes,
                self.s.cu_stream(),
                &mut params,
            )
        }
        .map_err(|e| dev_err(&format!("launching {}", f.name), e))?;
        let mut captured = self.captured.lock().map_err(|_| lock_err())?;
        if let Some(nodes) = captured.as_mut() {
            // while capturing, the stream's dependency set is the node just
            // added: remember it, in order, for `set_launch`
            let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
            let mut id: sys::cuuint64_t = 0;
            let mut graph: sys::CUgraph = std::ptr::null_mut();
            let mut deps: *const sys::CUgraphNode = std::ptr::null();
            let mut n_deps: usize = 0;
            // SAFETY: every out-pointer points to a local of its type; the
            // dependency array is owned by the capture and read right away.
            unsafe {
                sys::cuStreamGetCaptureInfo_v2(
                    self.s.cu_stream(),
                    &mut status,
                    &mut id,
                    &mut graph,
                    &mut deps,
                    &mut n_deps,
                )
            }
            .result()
            .map_err(|e| dev_err("cuStreamGetCaptureInfo", e))?;
            if n_deps != 1 || deps.is_null() {
                return Err(BackendError::Device(format!(
                    "capturing {}: {n_deps} capture dependencies after a launch (expected the launch's node)",
                    f.name
                )));
            }
            // SAFETY: `deps` points to `n_deps` (1) node handles.
            nodes.push(Node(unsafe { *deps }));
        }
        Ok(())
    }
}

impl Event for CudaEventH {
    fn synchronize(&self) -> Result<(), BackendError> {
        self.0
            .synchronize()
            .map_err(|e| dev_err("event synchronize", e))
    }

    fn query(&self) -> Result<bool, BackendError> {
        self.0
            .try_is_complete()
            .map_err(|e| dev_err("event query", e))
    }

    fn elapsed_ms(&self, end: &dyn Event) -> Result<f32, BackendError> {
        let Some(end) = end.as_any().downcast_ref::<CudaEventH>() else {
            return Err(BackendError::Device(
                "timing against an event of another driver".into(),
            ));
        };
        self.0
            .elapsed_ms(&end.0)
            .map_err(|e| dev_err("reading timing events", e))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
