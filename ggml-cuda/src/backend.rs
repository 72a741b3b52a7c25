//! [`CudaBackend`]: device selection, buffers, copies, events, and the
//! dispatch of graph nodes to the kernels in `kernels.cu`.

use std::sync::{Arc, Mutex};

use ggml_core::backend::{
    check_range, BackendDevice, BackendDiagnostics, BackendStream, Event, Stream, WaitKind,
};
use ggml_core::offload::offload_host_weight_op;
use ggml_core::op::{GluOp, RopeMode, SortOrder, UnaryOp};
use ggml_core::timeline::{Span, SpanKind, Timeline};
use ggml_core::{
    Backend, BackendError, Buffer, BufferUsage, GgmlType, Graph, Op, TensorData, TensorId,
};

use crate::buffer::{CudaBuffer, Dev, DevMem, HostRegistration, PinnedBuffer, PooledEvent};
use crate::driver::{self, Access, DevPtr, KernelArg, LaunchDims, T4};
use crate::err_flag::{self, ErrFlag};
use crate::fusion::{self, Fused, Step};
use crate::graphs::{Decision, GraphCache, Planned};
use crate::kernels::{
    mmq_raw_bytes, mmq_shared_bytes, Kernel, Kernels, FAM_WARPS, FAV_QMAX, FAV_WARPS, FA_DMAX,
    GEMM_TILE, MMQ_TILE, MMQ_TK, MV_WARPS, Q8_1_BLOCK,
};

/// Largest `b.ne1` handled by the matrix-vector kernel; larger batches of
/// `mul_mat` use dequantize + tiled GEMM.
pub const MMV_MAX_COLS: i64 = 8;

/// Largest grid `y`/`z` dimension.
const GRID_YZ_MAX: i64 = 65535;

impl T4 {
    fn of(g: &Graph, id: TensorId) -> T4 {
        let t = g.tensor(id);
        T4 {
            ne: t.ne,
            nb: [
                t.nb[0] as i64,
                t.nb[1] as i64,
                t.nb[2] as i64,
                t.nb[3] as i64,
            ],
        }
    }

    /// A dense tensor of `ty` with shape `ne`.
    fn dense(ty: GgmlType, ne: [i64; 4]) -> T4 {
        let nb = ggml_core::tensor::contiguous_strides(ty, ne);
        T4 {
            ne,
            nb: [nb[0] as i64, nb[1] as i64, nb[2] as i64, nb[3] as i64],
        }
    }

    fn n(&self) -> i64 {
        self.ne.iter().product()
    }
}

/// One kernel argument.
enum A {
    P(DevPtr),
    I(i32),
    L(i64),
    F(f32),
    T(T4),
}

/// Kernel-side type id (the GGUF id).
fn tid(ty: GgmlType) -> A {
    A::I(ty.id() as i32)
}

fn is_float(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// Weight types the mat-mul and get_rows kernels dequantize (and the MMVQ
/// kernels take int8 dot products with).
fn is_weight_type(ty: GgmlType) -> bool {
    use GgmlType as T;
    is_float(ty)
        || matches!(
            ty,
            T::Q4_0
                | T::Q4_1
                | T::Q5_0
                | T::Q5_1
                | T::Q8_0
                | T::Q2K
                | T::Q3K
                | T::Q4K
                | T::Q5K
                | T::Q6K
                | T::IQ4NL
                | T::IQ4XS
                | T::MXFP4
        )
}

/// Elements per activation scale of `k_quantize_q8_1` for weights of `ty`:
/// 256 where the CPU backend's activation type is Q8_K (the K-quants and
/// IQ4_XS), else 32 (Q8_0 / Q8_1).
fn q8_group(ty: GgmlType) -> i32 {
    use GgmlType as T;
    match ty {
        T::Q2K | T::Q3K | T::Q4K | T::Q5K | T::Q6K | T::IQ4XS => 256,
        _ => 32,
    }
}

/// `a / b` rounded up, for positive `b` and non-negative `a`.
fn cdiv(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// The 32-element block types flash attention's vector kernel takes for K.
fn fa_block_k_type(ty: GgmlType) -> bool {
    use GgmlType as T;
    matches!(
        ty,
        T::Q8_0 | T::Q4_0 | T::Q4_1 | T::Q5_0 | T::Q5_1 | T::IQ4NL
    )
}

/// Whether flash attention runs attention over a KV cache of K type `k`, V
/// type `v` and head dimensions `d_k`, `d_v` (what `-fa auto` asks of a
/// CUDA device, as llama.cpp resolves auto to on where the device's
/// flash attention supports the case; the per-node check stays
/// `supports_op`'s).
pub fn flash_attn_cache_supported(k: GgmlType, v: GgmlType, d_k: i64, d_v: i64) -> bool {
    (is_float(k) || (fa_block_k_type(k) && d_k % 32 == 0))
        && is_weight_type(v)
        && d_k <= FA_DMAX
        && d_v <= FA_DV_MAX
}

fn pad256(n: usize) -> usize {
    n.div_ceil(256) * 256
}

impl A {
    fn arg(&self) -> KernelArg {
        match *self {
            A::P(v) => KernelArg::Ptr(v),
            A::I(v) => KernelArg::I32(v),
            A::L(v) => KernelArg::I64(v),
            A::F(v) => KernelArg::F32(v),
            A::T(v) => KernelArg::T4(v),
        }
    }
}

/// A CUDA event (of the device's pool) behind [`Event`], with the device
/// ordinal and whether it was recorded on a copy stream (what the planted
/// `upload` bug looks at).
struct CudaEventHolder(PooledEvent, usize, bool);

/// Scratch device memory reused across ops (ordered on the compute stream).
#[derive(Default)]
struct Scratch {
    mem: Option<DevMem>,
    /// Smaller allocations replaced while a split's launches were being
    /// planned: planned launches may still use them, so they are freed
    /// once those are queued.
    retired: Vec<DevMem>,
}

/// One span of a CUDA event timeline: two timing events around work on a
/// stream.
struct TraceSpan {
    name: String,
    stream: &'static str,
    kind: SpanKind,
    bytes: u64,
    start: Arc<dyn driver::Event>,
    end: Arc<dyn driver::Event>,
}

/// A timeline being recorded from CUDA events (`--timeline-out` on CUDA).
struct Trace {
    /// Recorded on the compute stream when recording started: time zero.
    base: Arc<dyn driver::Event>,
    spans: Vec<TraceSpan>,
    label: String,
}

/// The CUDA backend for one device (`CUDA<n>`).
pub struct CudaBackend {
    dev: Arc<Dev>,
    kernels: Arc<Kernels>,
    err_flag: ErrFlag,
    scratch: Mutex<Scratch>,
    offload_min_batch: i64,
    trace: Mutex<Option<Trace>>,
    /// The device ranges the node being computed reads and writes, passed
    /// with each of its launches (for the emulator's hazard detector).
    node_access: Mutex<Vec<Access>>,
    /// While a split is being planned: its launches so far.
    planning: Mutex<Option<Vec<Planned>>>,
    /// The splits' captured graphs.
    graphs: Mutex<GraphCache>,
    /// Per peer device ordinal: whether this device copies from it peer to
    /// peer (access checked and enabled on the first copy).
    peers: Mutex<Vec<(usize, bool)>>,
}

impl CudaBackend {
    /// Open device `device`: probes the driver library first, so a machine
    /// without CUDA gets `BackendError::NoDevice`, never a panic. Loads the
    /// kernels once per process and device (the shipped images; NVRTC only
    /// where none serves the device: `kernel_load.rs`).
    pub fn new(device: usize) -> Result<CudaBackend, BackendError> {
        if !crate::emulator::enabled() {
            crate::probe_driver()?;
        }
        let dev = Dev::open(device)?;
        let kernels = Kernels::load(dev.drv.as_ref(), device)?;
        let err_flag = ErrFlag::new(&dev)?;
        Ok(CudaBackend {
            dev,
            kernels,
            err_flag,
            scratch: Mutex::new(Scratch::default()),
            offload_min_batch: 32,
            trace: Mutex::new(None),
            node_access: Mutex::new(Vec::new()),
            planning: Mutex::new(None),
            graphs: Mutex::new(GraphCache::new()),
            peers: Mutex::new(Vec::new()),
        })
    }

    /// Smallest batch for which this device claims an op whose weight is in
    /// host memory (llama.cpp's `GGML_OP_OFFLOAD_MIN_BATCH`, default 32).
    pub fn with_offload_min_batch(mut self, n: i64) -> CudaBackend {
        self.offload_min_batch = n;
        self
    }

    /// A timing event recorded now on `stream` (for the event timeline).
    fn timing_event(&self, stream: Stream) -> Result<Arc<dyn driver::Event>, BackendError> {
        self.dev.stream_of(stream).record_event(true)
    }

    /// Run `f` (work queued on `stream`) between two timing events when a
    /// timeline is being recorded.
    fn traced<R>(
        &self,
        stream: Stream,
        kind: SpanKind,
        bytes: u64,
        name: impl FnOnce() -> String,
        f: impl FnOnce() -> Result<R, BackendError>,
    ) -> Result<R, BackendError> {
        let on = self.trace.lock().map(|t| t.is_some()).unwrap_or(false);
        if !on {
            return f();
        }
        let start = self.timing_event(stream)?;
        let r = f()?;
        let end = self.timing_event(stream)?;
        if let Ok(mut t) = self.trace.lock() {
            if let Some(t) = t.as_mut() {
                let name = match kind {
                    SpanKind::Op => name(),
                    _ => t.label.clone(),
                };
                t.spans.push(TraceSpan {
                    name,
                    stream: match stream {
                        Stream::Compute => "compute",
                        Stream::Copy(k) if k % crate::buffer::N_COPY_STREAMS == 0 => "copy0",
                        Stream::Copy(_) => "copy1",
                    },
                    kind,
                    bytes,
                    start,
                    end,
                });
            }
        }
        Ok(r)
    }

    /// The device's name as the driver reports it (e.g. `NVIDIA H200`; an
    /// emulated device's name says so).
    pub fn device_name(&self) -> Result<String, BackendError> {
        self.dev.drv.name()
    }

    /// The kernel image the device runs: `cubin sm_90 (shipped
    /// sm_90.cubin.xz)`, `PTX compute_75 ISA 8.4 (shipped
    /// compute_75.ptx.xz)`, or NVRTC's.
    pub fn kernel_image(&self) -> &str {
        self.kernels.image()
    }

    /// Every kernel image considered for the device, in order, with what
    /// became of it (the last `...: loaded`).
    pub fn kernel_tries(&self) -> &[String] {
        self.kernels.tries()
    }

    /// The device's compute capability `(major, minor)`.
    pub fn compute_capability(&self) -> Result<(u32, u32), BackendError> {
        self.dev.drv.compute_capability()
    }

    /// The CUDA driver's version (`cuDriverGetVersion`: 12040 for 12.4).
    pub fn driver_version(&self) -> Result<i32, BackendError> {
        self.dev.drv.driver_version()
    }

    /// Whether this backend runs on the emulator ([`crate::emulator`]).
    pub fn is_emulated(&self) -> bool {
        self.dev.drv.is_emulated()
    }

    /// The device ordinal (`n` of `CUDAn`).
    pub fn ordinal(&self) -> usize {
        self.dev.ordinal
    }

    /// Free device memory in bytes.
    pub fn free_memory(&self) -> Result<usize, BackendError> {
        self.dev.drv.mem_info().map(|(free, _total)| free)
    }

    /// Total device memory in bytes.
    pub fn total_memory(&self) -> Result<usize, BackendError> {
        self.dev.drv.total_mem()
    }

    /// Allocate page-locked host memory (usable by the CPU backend, fast to
    /// copy to this device).
    pub fn alloc_pinned(
        &self,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Arc<dyn Buffer>, BackendError> {
        Ok(Arc::new(PinnedBuffer::new(&self.dev, size, usage)?))
    }

    /// Page-lock an existing host range (e.g. a mapped GGUF file) so copies
    /// from it are asynchronous DMA. Errs with `Unsupported` where the
    /// driver does not allow it; callers then copy from pageable memory.
    pub fn register_host(
        &self,
        bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    ) -> Result<HostRegistration, BackendError> {
        HostRegistration::new(&self.dev, bytes)
    }

    /// Whether this device copies from `peer`'s memory directly: asks the
    /// driver once per peer, enabling access where it can.
    fn peer_ok(&self, peer: &Arc<Dev>) -> Result<bool, BackendError> {
        let mut peers = self
            .peers
            .lock()
            .map_err(|_| BackendError::Device("peer table lock poisoned".into()))?;
        if let Some(&(_, ok)) = peers.iter().find(|(o, _)| *o == peer.ordinal) {
            return Ok(ok);
        }
        let ok = self.dev.drv.can_access_peer(peer.drv.as_ref())?;
        if ok {
            self.dev.drv.enable_peer_access(peer.drv.as_ref())?;
        }
        peers.push((peer.ordinal, ok));
        Ok(ok)
    }

    fn owns(&self, b: &dyn Buffer) -> bool {
        b.as_any()
            .downcast_ref::<CudaBuffer>()
            .is_some_and(|c| c.same_dev(&self.dev))
    }

    /// Device address of a tensor's memory, checked against its buffer.
    fn ptr(&self, g: &Graph, id: TensorId) -> Result<DevPtr, BackendError> {
        let t = g.tensor(id);
        let d = g
            .data_of(id)
            .ok_or_else(|| BackendError::NotAllocated(t.name.clone()))?;
        let cb = d
            .buffer
            .as_any()
            .downcast_ref::<CudaBuffer>()
            .filter(|c| c.same_dev(&self.dev))
            .ok_or_else(|| {
                BackendError::Unsupported(format!(
                    "backend {} cannot access tensor '{}' in buffer {}",
                    self.dev.name,
                    t.name,
                    d.buffer.name()
                ))
            })?;
        check_range(d.buffer.name(), d.buffer.size(), d.offset, t.nbytes())?;
        Ok(cb.device_ptr() + d.offset as u64)
    }

    /// A tensor as three kernel arguments, in the order the kernels take
    /// them: device pointer, layout ([`T4`]) and type id.
    fn tensor_args(&self, g: &Graph, id: TensorId) -> Result<[A; 3], BackendError> {
        Ok([
            A::P(self.ptr(g, id)?),
            A::T(T4::of(g, id)),
            tid(g.tensor(id).ty),
        ])
    }

    /// A tensor as two kernel arguments, for kernels that know its type:
    /// device pointer and layout ([`T4`]).
    fn tensor_args_untyped(&self, g: &Graph, id: TensorId) -> Result<[A; 2], BackendError> {
        Ok([A::P(self.ptr(g, id)?), A::T(T4::of(g, id))])
    }

    fn launch(
        &self,
        kernel: Kernel,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[&[A]],
    ) -> Result<(), BackendError> {
        self.launch_shared(kernel, grid, block, 0, args)
    }

    /// [`Self::launch`] with `shared_bytes` of dynamic shared memory.
    fn launch_shared(
        &self,
        kernel: Kernel,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[&[A]],
    ) -> Result<(), BackendError> {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        let f = self.kernels.get(kernel)?;
        let args: Vec<KernelArg> = args
            .iter()
            .flat_map(|part| part.iter())
            .map(A::arg)
            .collect();
        let dims = LaunchDims {
            grid: [grid.0, grid.1, grid.2],
            block: [block.0, block.1, block.2],
            shared_bytes,
        };
        let access = self
            .node_access
            .lock()
            .map_err(|_| BackendError::Device("access list lock poisoned".into()))?;
        let mut planning = self
            .planning
            .lock()
            .map_err(|_| BackendError::Device("plan lock poisoned".into()))?;
        if let Some(plan) = planning.as_mut() {
            plan.push(Planned {
                kernel,
                dims,
                args,
                access: access.clone(),
            });
            return Ok(());
        }
        self.dev.counters.add_launches(1);
        // SAFETY: the argument list matches the kernel's signature in
        // kernels.cu (checked by reading both; each op below passes exactly
        // the parameters in order), every pointer was range-checked against
        // its buffer for the tensor's extents, and the kernels never index
        // past those extents.
        unsafe { self.dev.stream.launch(f, dims, &args, Some(&access)) }
    }

    /// Queue a split's planned launches: one by one, or captured as a graph,
    /// or as a replay of the graph captured for the same plan
    /// ([`GraphCache`]).
    fn issue(&self, key: u64, plan: &[Planned]) -> Result<(), BackendError> {
        let mut graphs = self
            .graphs
            .lock()
            .map_err(|_| BackendError::Device("graph cache lock poisoned".into()))?;
        let stream = &self.dev.stream;
        let launch_all = || -> Result<(), BackendError> {
            for p in plan {
                let f = self.kernels.get(p.kernel)?;
                // SAFETY: as in `launch`: the plan holds the arguments and
                // ranges `launch` checked, unchanged.
                unsafe { stream.launch(f, p.dims, &p.args, Some(&p.access)) }?;
            }
            Ok(())
        };
        let d = graphs.decide(key, plan);
        match d {
            Decision::Direct => {
                self.dev.counters.add_launches(plan.len() as u64);
                launch_all()
            }
            Decision::Capture => {
                self.dev.counters.add_launches(plan.len() as u64 + 1);
                stream.begin_capture()?;
                let captured = launch_all();
                // always end the capture, even after a failed launch
                let exec = stream.end_capture();
                captured?;
                let exec = exec?;
                // SAFETY: the graph holds exactly the launches just planned,
                // whose pointers are live (see `launch`).
                unsafe { stream.launch_graph(exec.as_ref()) }?;
                graphs.set_exec(key, exec);
                Ok(())
            }
            Decision::Update(moved) => {
                let exec = graphs.exec_mut(key).ok_or_else(|| {
                    BackendError::Device("graph cache: an update without a graph".into())
                })?;
                let mut updated = Ok(());
                for &i in &moved {
                    let p = &plan[i];
                    let f = self.kernels.get(p.kernel)?;
                    // SAFETY: the planned launch's arguments are those
                    // `launch` checked for this split (see `launch`).
                    updated = unsafe { exec.set_launch(i, f, p.dims, &p.args, &p.access) };
                    if updated.is_err() {
                        break;
                    }
                }
                if updated.is_err() {
                    // the graph may be half updated: drop it and run the
                    // split launch by launch (a driver error shows there)
                    graphs.forget(key);
                    self.dev.counters.add_launches(plan.len() as u64);
                    return launch_all();
                }
                graphs.set_plan(key, plan);
                let exec = graphs.exec(key).ok_or_else(|| {
                    BackendError::Device("graph cache: an update without a graph".into())
                })?;
                self.dev.counters.add_graph_replay();
                // SAFETY: the graph now holds exactly this plan's launches.
                unsafe { stream.launch_graph(exec) }
            }
            Decision::Replay => {
                let exec = graphs.exec(key).ok_or_else(|| {
                    BackendError::Device("graph cache: a replay without a graph".into())
                })?;
                self.dev.counters.add_graph_replay();
                // SAFETY: the stored graph was captured from a plan equal to
                // this one (every kernel, geometry, parameter and pointer),
                // so replaying it queues exactly the launches `launch`
                // checked for this split.
                unsafe { stream.launch_graph(exec) }
            }
        }
    }

    /// Launch a grid-stride kernel over `n` items.
    fn launch_n(&self, kernel: Kernel, n: i64, args: &[&[A]]) -> Result<(), BackendError> {
        if n <= 0 {
            return Ok(());
        }
        let blocks = (n as u64).div_ceil(256).min(1 << 20) as u32;
        self.launch(kernel, (blocks, 1, 1), (256, 1, 1), args)
    }

    /// Scratch memory of at least `size` bytes (contents undefined).
    fn scratch(&self, s: &mut Scratch, size: usize) -> Result<DevPtr, BackendError> {
        let size = size.max(256);
        if s.mem.as_ref().is_none_or(|m| m.size < size) {
            // launches planned but not yet queued may use the old
            // allocation: it is freed after they are (dropping waits for
            // queued work using it)
            if let Some(old) = s.mem.take() {
                s.retired.push(old);
            }
            s.mem = Some(DevMem::alloc(&self.dev, size + size / 4)?);
        }
        Ok(s.mem.as_ref().map(|m| m.ptr).unwrap_or(0))
    }

    /// A dense F32 copy of `id` in scratch at `at`, unless it already is F32
    /// with dense rows. Returns the pointer and layout to use.
    fn f32_rows(
        &self,
        g: &Graph,
        id: TensorId,
        at: DevPtr,
    ) -> Result<(DevPtr, T4, usize), BackendError> {
        let t = g.tensor(id);
        let p = self.ptr(g, id)?;
        if t.ty == GgmlType::F32 && t.nb[0] == 4 {
            return Ok((p, T4::of(g, id), 0));
        }
        let td = T4::dense(GgmlType::F32, t.ne);
        let n = td.n();
        self.launch_n(
            Kernel::Cpy,
            n,
            &[
                &[A::P(at), A::T(td), tid(GgmlType::F32)],
                &[A::P(p), A::T(T4::of(g, id)), tid(t.ty)],
            ],
        )?;
        Ok((at, td, pad256(n as usize * 4)))
    }

    /// The device ranges node `n`'s launches access: its destination
    /// (written), its sources (read), and the error flag (written) when it
    /// validates ids. Scratch memory is private to the compute stream.
    /// Of `mul_mat_id`'s expert tensor the kernel reads only the experts
    /// its device-side ids select (a cache bank's slots), which the host
    /// cannot name at launch: that access is [`driver::Selected`], resolved
    /// by the emulator when the launch runs (listing the whole tensor would
    /// report uploads into other slots as hazards).
    fn set_node_access(&self, g: &Graph, n: TensorId) -> Result<(), BackendError> {
        let t = g.tensor(n);
        let mut acc = self
            .node_access
            .lock()
            .map_err(|_| BackendError::Device("access list lock poisoned".into()))?;
        acc.clear();
        if matches!(
            t.op,
            Op::None | Op::Reshape | Op::View | Op::Permute | Op::Transpose
        ) {
            return Ok(());
        }
        acc.push(Access::range(self.ptr(g, n)?, t.nbytes(), true));
        for (i, &src) in t.src.iter().enumerate() {
            if t.op == Op::MulMatId && i == 0 {
                if let Some(&ids) = t.src.get(2) {
                    acc.push(self.expert_access(g, src, ids)?);
                }
                continue;
            }
            acc.push(Access::range(
                self.ptr(g, src)?,
                g.tensor(src).nbytes(),
                false,
            ));
        }
        if validates_ids(t.op) {
            acc.push(Access::range(self.err_flag.dev_word.ptr, 4, true));
        }
        Ok(())
    }

    /// The read of a `mul_mat_id`'s expert tensor `w`: only the experts the
    /// device-side `ids` select ([`driver::Selected`]).
    fn expert_access(&self, g: &Graph, w: TensorId, ids: TensorId) -> Result<Access, BackendError> {
        let wt = g.tensor(w);
        let mut a = Access::range(self.ptr(g, w)?, wt.nbytes(), false);
        a.select = Some(driver::Selected {
            ids: self.ptr(g, ids)?,
            ids_t: T4::of(g, ids),
            stride: wt.nb[2],
            expert_bytes: wt.nb[2],
            n_expert: wt.ne[2].max(0) as usize,
        });
        Ok(a)
    }

    /// The access list of a fused step: it writes `out` (and the error
    /// flag), reads the experts of `experts` (weights, ids) that the ids
    /// select and every tensor of `reads`.
    fn set_fused_access(
        &self,
        g: &Graph,
        out: TensorId,
        experts: &[(TensorId, TensorId)],
        reads: &[TensorId],
    ) -> Result<(), BackendError> {
        let mut list = vec![
            Access::range(self.ptr(g, out)?, g.tensor(out).nbytes(), true),
            Access::range(self.err_flag.dev_word.ptr, 4, true),
        ];
        for &(w, ids) in experts {
            list.push(self.expert_access(g, w, ids)?);
        }
        for &r in reads {
            list.push(Access::range(self.ptr(g, r)?, g.tensor(r).nbytes(), false));
        }
        *self
            .node_access
            .lock()
            .map_err(|_| BackendError::Device("access list lock poisoned".into()))? = list;
        Ok(())
    }

    /// The arguments soft_max and flash attention share: the mask (source
    /// `i_mask`: pointer, layout, type, present), the sinks (source
    /// `i_mask + 1`: pointer, present), `scale`, `max_bias` and ALiBi's
    /// slopes for `n_head` heads (`m0`, `m1`, `n_head_log2`), as ggml.
    fn attn_args(
        &self,
        g: &Graph,
        t: &ggml_core::Tensor,
        i_mask: usize,
        scale: f32,
        max_bias: f32,
        n_head: i64,
    ) -> Result<[A; 11], BackendError> {
        let (mp, tm, tym, has_mask) = match t.src.get(i_mask) {
            Some(&m) => (self.ptr(g, m)?, T4::of(g, m), g.tensor(m).ty, 1),
            None => (0, T4::default(), GgmlType::F32, 0),
        };
        let (sp, has_sinks) = match t.src.get(i_mask + 1) {
            Some(&sk) => (self.ptr(g, sk)?, 1),
            None => (0, 0),
        };
        let n_head = n_head.max(1) as u32;
        let n_head_log2 = 1u32 << (31 - n_head.leading_zeros());
        let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
        let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
        Ok([
            A::P(mp),
            A::T(tm),
            tid(tym),
            A::I(has_mask),
            A::P(sp),
            A::I(has_sinks),
            A::F(scale),
            A::F(max_bias),
            A::F(m0),
            A::F(m1),
            A::I(n_head_log2 as i32),
        ])
    }

    /// One step of a split ([`fusion::plan`]): a node, or a fused group
    /// (each of its nodes on its own where the fused kernel cannot take
    /// its tensors).
    fn compute_step(&self, g: &Graph, step: &Step, s: &mut Scratch) -> Result<(), BackendError> {
        match step {
            Step::Node(n) => {
                self.set_node_access(g, *n)?;
                self.compute_node(g, *n, s)
            }
            Step::Fused { fused, nodes } => {
                if self.compute_fused(g, fused, s)? {
                    return Ok(());
                }
                for &n in nodes {
                    self.set_node_access(g, n)?;
                    self.compute_node(g, n, s)?;
                }
                Ok(())
            }
        }
    }

    /// Launch a fused group; `false` (nothing launched) when its weights are
    /// not at their blocks' alignment or its output overlaps a tensor the
    /// fused kernel reads (a buffer the allocator reused inside the group).
    fn compute_fused(&self, g: &Graph, f: &Fused, s: &mut Scratch) -> Result<bool, BackendError> {
        let out = f.output();
        let (op_out, out_len) = (self.ptr(g, out)?, g.tensor(out).nbytes() as u64);
        let overlaps = |ids: &[TensorId]| -> Result<bool, BackendError> {
            for &r in ids {
                let (p, l) = (self.ptr(g, r)?, g.tensor(r).nbytes() as u64);
                if p < op_out + out_len && op_out < p + l {
                    return Ok(true);
                }
            }
            Ok(false)
        };
        let errp = self.err_flag.dev_word.ptr;
        match *f {
            Fused::ExpertGlu {
                glu,
                gate,
                up,
                gate_bias,
                up_bias,
                op,
            } => {
                let (gt, ut) = (g.tensor(gate), g.tensor(up));
                let (wg, wu, x, ids) = (gt.src[0], ut.src[0], gt.src[1], gt.src[2]);
                let sel = gate_bias.or(up_bias).map(|b| b.sel);
                let mut reads = vec![ids];
                reads.extend(gate_bias.map(|b| b.bias));
                reads.extend(up_bias.map(|b| b.bias));
                reads.extend(sel);
                if !mmv_aligned(g.tensor(wg), self.ptr(g, wg)?)
                    || !mmv_aligned(g.tensor(wu), self.ptr(g, wu)?)
                    || overlaps(&reads)?
                {
                    return Ok(false);
                }
                reads.push(x);
                self.set_fused_access(g, glu, &[(wg, ids), (wu, ids)], &reads)?;
                let wty = g.tensor(wg).ty;
                let base = self.scratch(s, q8_scratch(g.tensor(x).nelements()))?;
                let (q8, ds) = self.quantize_acts(g, x, wty, base)?;
                let td = T4::of(g, glu);
                let rpw = mmvq_rows_per_warp(wty, g.tensor(wg).ne[0]);
                let blocks_x = (td.ne[0] as u32).div_ceil(MV_WARPS * rpw);
                let opt = |t: Option<TensorId>| -> Result<[A; 2], BackendError> {
                    Ok(match t {
                        Some(t) => self.tensor_args_untyped(g, t)?,
                        None => [A::P(0), A::T(T4::default())],
                    })
                };
                let (opi, alpha, limit) = match op {
                    GluOp::Swiglu => (0, 0.0, 0.0),
                    GluOp::Geglu => (1, 0.0, 0.0),
                    GluOp::SwigluOai { alpha, limit } => (2, alpha.get(), limit.get()),
                };
                self.launch(
                    Kernel::MmvqIdGlu,
                    (blocks_x, (td.ne[1] * td.ne[2]) as u32, 1),
                    (32 * MV_WARPS, 1, 1),
                    &[
                        &self.tensor_args_untyped(g, glu)?,
                        &self.tensor_args(g, wg)?,
                        &self.tensor_args(g, wu)?,
                        &[A::P(q8), A::P(ds), A::T(T4::of(g, x))],
                        &self.tensor_args_untyped(g, ids)?,
                        &opt(gate_bias.map(|b| b.bias))?,
                        &opt(up_bias.map(|b| b.bias))?,
                        &opt(sel)?,
                        &[
                            A::I(opi),
                            A::F(alpha),
                            A::F(limit),
                            A::P(errp),
                            A::I(rpw as i32),
                        ],
                    ],
                )?;
                Ok(true)
            }
            Fused::ExpertDown {
                out,
                down,
                bias,
                weights,
            } => {
                let dt = g.tensor(down);
                let (wd, par, ids) = (dt.src[0], dt.src[1], dt.src[2]);
                let mut reads = vec![ids, weights];
                reads.extend(bias.map(|b| b.bias));
                reads.extend(bias.map(|b| b.sel));
                if !mmv_aligned(g.tensor(wd), self.ptr(g, wd)?) || overlaps(&reads)? {
                    return Ok(false);
                }
                reads.push(par);
                self.set_fused_access(g, out, &[(wd, ids)], &reads)?;
                let wty = g.tensor(wd).ty;
                let base = self.scratch(s, q8_scratch(g.tensor(par).nelements()))?;
                let (q8, ds) = self.quantize_acts(g, par, wty, base)?;
                let td = T4::of(g, out);
                let rpw = mmvq_rows_per_warp(wty, g.tensor(wd).ne[0]);
                let blocks_x = (td.ne[0] as u32).div_ceil(MV_WARPS * rpw);
                let (bp, sp) = match bias {
                    Some(b) => (
                        self.tensor_args_untyped(g, b.bias)?,
                        self.tensor_args_untyped(g, b.sel)?,
                    ),
                    None => (
                        [A::P(0), A::T(T4::default())],
                        [A::P(0), A::T(T4::default())],
                    ),
                };
                self.launch(
                    Kernel::MmvqIdDown,
                    (blocks_x, td.ne[1] as u32, 1),
                    (32 * MV_WARPS, 1, 1),
                    &[
                        &self.tensor_args_untyped(g, out)?,
                        &self.tensor_args(g, wd)?,
                        &[A::P(q8), A::P(ds), A::T(T4::of(g, par))],
                        &self.tensor_args_untyped(g, ids)?,
                        &self.tensor_args_untyped(g, weights)?,
                        &bp,
                        &sp,
                        &[A::P(errp), A::I(rpw as i32)],
                    ],
                )?;
                Ok(true)
            }
        }
    }

    fn compute_node(&self, g: &Graph, node: TensorId, s: &mut Scratch) -> Result<(), BackendError> {
        let t = g.tensor(node);
        let src = |i: usize| t.src[i];
        let errp = self.err_flag.dev_word.ptr;
        match t.op {
            Op::None | Op::Reshape | Op::View | Op::Permute | Op::Transpose => Ok(()),
            Op::Add | Op::Sub | Op::Mul | Op::Div => {
                let op = match t.op {
                    Op::Add => 0,
                    Op::Sub => 1,
                    Op::Mul => 2,
                    _ => 3,
                };
                let (a, b) = (src(0), src(1));
                let td = T4::of(g, node);
                self.launch_n(
                    Kernel::Binary,
                    td.n(),
                    &[
                        &self.tensor_args_untyped(g, node)?,
                        &self.tensor_args(g, a)?,
                        &self.tensor_args(g, b)?,
                        &[A::I(op)],
                    ],
                )
            }
            Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Unary(_) => {
                let (op, p0, p1) = match t.op {
                    Op::Scale { s, b } => (0, s.get(), b.get()),
                    Op::Sqr => (1, 0.0, 0.0),
                    Op::Sqrt => (2, 0.0, 0.0),
                    Op::Unary(UnaryOp::Silu) => (3, 0.0, 0.0),
                    Op::Unary(UnaryOp::Gelu) => (4, 0.0, 0.0),
                    Op::Unary(UnaryOp::Sigmoid) => (5, 0.0, 0.0),
                    Op::Unary(UnaryOp::Neg) => (6, 0.0, 0.0),
                    Op::Unary(UnaryOp::Relu) => (7, 0.0, 0.0),
                    _ => (8, 0.0, 0.0),
                };
                let a = src(0);
                let td = T4::of(g, node);
                self.launch_n(
                    Kernel::Unary,
                    td.n(),
                    &[
                        &self.tensor_args_untyped(g, node)?,
                        &self.tensor_args(g, a)?,
                        &[A::I(op), A::F(p0), A::F(p1)],
                    ],
                )
            }
            Op::Glu { op, swapped } => {
                let (opi, alpha, limit) = match op {
                    GluOp::Swiglu => (0, 0.0, 0.0),
                    GluOp::Geglu => (1, 0.0, 0.0),
                    GluOp::SwigluOai { alpha, limit } => (2, alpha.get(), limit.get()),
                };
                let a = src(0);
                let split = t.src.len() > 1;
                let b = if split { src(1) } else { a };
                let td = T4::of(g, node);
                self.launch_n(
                    Kernel::Glu,
                    td.n(),
                    &[
                        &self.tensor_args_untyped(g, node)?,
                        &self.tensor_args(g, a)?,
                        &self.tensor_args(g, b)?,
                        &[
                            A::I(split as i32),
                            A::I(swapped as i32),
                            A::I(opi),
                            A::F(alpha),
                            A::F(limit),
                        ],
                    ],
                )
            }
            Op::Cpy | Op::Cont | Op::Dup => {
                let a = src(0);
                let ts = T4::of(g, a);
                self.launch_n(
                    Kernel::Cpy,
                    ts.n(),
                    &[&self.tensor_args(g, node)?, &self.tensor_args(g, a)?],
                )
            }
            Op::GetRows => {
                let (a, ids) = (src(0), src(1));
                let td = T4::of(g, node);
                self.launch_n(
                    Kernel::GetRows,
                    td.n(),
                    &[
                        &self.tensor_args(g, node)?,
                        &self.tensor_args(g, a)?,
                        &self.tensor_args_untyped(g, ids)?,
                        &[A::P(errp)],
                    ],
                )
            }
            Op::SetRows => {
                let (b, idx) = (src(1), src(2));
                let ts = T4::of(g, b);
                self.launch_n(
                    Kernel::SetRows,
                    ts.n(),
                    &[
                        &self.tensor_args(g, node)?,
                        &self.tensor_args(g, b)?,
                        &self.tensor_args(g, idx)?,
                        &[A::P(errp)],
                    ],
                )
            }
            Op::Concat { dim } => {
                let (a, b) = (src(0), src(1));
                let td = T4::of(g, node);
                self.launch_n(
                    Kernel::Concat,
                    td.n(),
                    &[
                        &self.tensor_args_untyped(g, node)?,
                        &self.tensor_args_untyped(g, a)?,
                        &self.tensor_args_untyped(g, b)?,
                        &[A::I(dim), A::I(t.ty.type_size() as i32)],
                    ],
                )
            }
            Op::RmsNorm { .. } | Op::Norm { .. } | Op::SumRows | Op::Mean => {
                let (mode, eps) = match t.op {
                    Op::RmsNorm { eps } => (0, eps.get()),
                    Op::Norm { eps } => (1, eps.get()),
                    Op::SumRows => (2, 0.0),
                    _ => (3, 0.0),
                };
                let a = src(0);
                let rows = g.tensor(a).nrows();
                self.launch(
                    Kernel::RowReduce,
                    (rows as u32, 1, 1),
                    (256, 1, 1),
                    &[
                        &self.tensor_args_untyped(g, node)?,
                        &self.tensor_args(g, a)?,
                        &[A::I(mode), A::F(eps)],
                    ],
                )
            }
            Op::Argmax => {
                let a = src(0);
                let rows = g.tensor(a).nrows();
                self.launch(
                    Kernel::Argmax,
                    (rows as u32, 1, 1),
                    (256, 1, 1),
                    &[&[A::P(self.ptr(g, node)?)], &self.tensor_args(g, a)?],
                )
            }
            Op::SoftMaxExt { scale, max_bias } => {
                let a = src(0);
                let n_head = T4::of(g, a).ne[2];
                let rows = g.tensor(a).nrows();
                self.launch(
                    Kernel::SoftMax,
                    (rows as u32, 1, 1),
                    (256, 1, 1),
                    &[
                        &self.tensor_args_untyped(g, node)?,
                        &self.tensor_args(g, a)?,
                        &self.attn_args(g, t, 1, scale.get(), max_bias.get(), n_head)?,
                    ],
                )
            }
            Op::RopeExt(p) => {
                let (a, pos) = (src(0), src(1));
                let (ffp, has_ff) = match t.src.get(2) {
                    Some(&f) => (self.ptr(g, f)?, 1),
                    None => (0, 0),
                };
                let freq_base = p.freq_base.get();
                let theta_scale = freq_base.powf(-2.0 / p.n_dims as f32);
                let (c0, c1) = rope_yarn_corr_dims(
                    p.n_dims,
                    p.n_ctx_orig,
                    freq_base,
                    p.beta_fast.get(),
                    p.beta_slow.get(),
                );
                let td = T4::of(g, node);
                let n = td.n() / 2;
                self.launch_n(
                    Kernel::Rope,
                    n,
                    &[
                        &self.tensor_args_untyped(g, node)?,
                        &self.tensor_args(g, a)?,
                        &[
                            A::P(self.ptr(g, pos)?),
                            A::P(ffp),
                            A::I(has_ff),
                            A::I(p.n_dims),
                            A::I(if p.mode == RopeMode::Neox { 2 } else { 0 }),
                            A::F(theta_scale),
                            A::F(p.freq_scale.get()),
                            A::F(p.ext_factor.get()),
                            A::F(p.attn_factor.get()),
                            A::F(c0),
                            A::F(c1),
                        ],
                    ],
                )
            }
            Op::Argsort(_) | Op::TopK { .. } => {
                let desc = !matches!(t.op, Op::Argsort(SortOrder::Asc));
                let a = src(0);
                let ta = T4::of(g, a);
                self.launch_n(
                    Kernel::RankSort,
                    ta.n(),
                    &[
                        &self.tensor_args_untyped(g, node)?,
                        &self.tensor_args(g, a)?,
                        &[A::I(desc as i32)],
                    ],
                )
            }
            Op::AddId => {
                let (a, b, ids) = (src(0), src(1), src(2));
                let td = T4::of(g, node);
                self.launch_n(
                    Kernel::AddId,
                    td.n(),
                    &[
                        &self.tensor_args_untyped(g, node)?,
                        &self.tensor_args(g, a)?,
                        &self.tensor_args(g, b)?,
                        &self.tensor_args_untyped(g, ids)?,
                        &[A::P(errp)],
                    ],
                )
            }
            Op::FlashAttnExt { .. } => self.flash_attn(g, node, s),
            Op::MulMat => self.mul_mat(g, node, s),
            Op::MulMatId if g.tensor(node).ne[2] <= MMV_MAX_COLS => self.mmvq(g, node, s),
            Op::MulMatId => self.mmq_id(g, node, s),
        }
    }

    /// flash_attn_ext: the tensor-core kernel (`k_fa_mma_*`) for prompts
    /// with F16/BF16 K and V it takes ([`fa_mma_kernel`]), else the vector
    /// kernel (`k_fa_vec_*`, [`fa_vec_plan`]) with the cells split into
    /// segments over enough blocks to fill the device and `k_fa_combine`
    /// merging them.
    fn flash_attn(&self, g: &Graph, node: TensorId, s: &mut Scratch) -> Result<(), BackendError> {
        let t = g.tensor(node);
        let Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } = t.op
        else {
            return Err(BackendError::Device(
                "flash_attn: not a flash_attn_ext node".into(),
            ));
        };
        let (q, k, v) = (t.src[0], t.src[1], t.src[2]);
        let (mut scale, softcap) = (scale.get(), softcap.get());
        if softcap != 0.0 {
            scale /= softcap;
        }
        let (tq, tk) = (T4::of(g, q), T4::of(g, k));
        let (qp, kp, vp) = (self.ptr(g, q)?, self.ptr(g, k)?, self.ptr(g, v)?);
        let shape = FaShape::of(g, node);
        let z = (shape.n_head_kv * tq.ne[3]) as u32;
        let attn = self.attn_args(g, t, 3, scale, max_bias.get(), tq.ne[2])?;
        let dst = self.tensor_args_untyped(g, node)?;
        if let Some(kernel) = fa_mma_kernel(g, node, [qp, kp, vp]) {
            let rows_per_block = 16 * FAM_WARPS as i64;
            return self.launch(
                kernel,
                (cdiv(shape.n_rows, rows_per_block) as u32, z, 1),
                (32 * FAM_WARPS, 1, 1),
                &[
                    &dst,
                    &self.tensor_args(g, q)?,
                    &self.tensor_args(g, k)?,
                    &self.tensor_args_untyped(g, v)?,
                    &attn,
                    &[A::F(softcap)],
                ],
            );
        }
        let (kernel, rt) = fa_vec_plan(shape.dk, shape.dv, shape.n_rows);
        let row_tiles = cdiv(shape.n_rows, rt);
        // segments of whole chunks of 32 cells, enough for FA_TARGET_WARPS
        // warps over the grid
        let chunks = cdiv(shape.n_kv, 32).max(1);
        let want = (FA_TARGET_WARPS / (row_tiles * z as i64)).clamp(1, chunks);
        let seg_chunks = cdiv(chunks, want);
        let n_seg = cdiv(chunks, seg_chunks);
        let part = if n_seg > 1 {
            let floats = z as i64 * shape.n_rows * n_seg * (shape.dv + 2);
            self.scratch(s, floats as usize * 4)?
        } else {
            0
        };
        let vec = fa_vec_flags(g, node, [kp, vp]);
        self.launch(
            kernel,
            (cdiv(n_seg, FAV_WARPS as i64) as u32, row_tiles as u32, z),
            (32 * FAV_WARPS, 1, 1),
            &[
                &dst,
                &[
                    A::P(part),
                    A::I(n_seg as i32),
                    A::I((seg_chunks * 32) as i32),
                ],
                &self.tensor_args(g, q)?,
                &self.tensor_args(g, k)?,
                &self.tensor_args(g, v)?,
                &attn,
                &[A::F(softcap), A::I(rt as i32), A::I(vec)],
            ],
        )?;
        if n_seg > 1 {
            let sinks = match t.src.get(4) {
                Some(&sk) => [A::P(self.ptr(g, sk)?), A::I(1)],
                None => [A::P(0), A::I(0)],
            };
            let rows = z as i64 * shape.n_rows;
            self.launch(
                Kernel::FaCombine,
                (cdiv(rows, 4) as u32, 1, 1),
                (128, 1, 1),
                &[
                    &dst,
                    &[A::P(part), A::I(n_seg as i32), A::T(tq), A::T(tk)],
                    &[A::I(shape.dv as i32)],
                    &sinks,
                ],
            )?;
        }
        Ok(())
    }

    /// Decode `mul_mat` / `mul_mat_id` (at most [`MMV_MAX_COLS`] columns,
    /// or tokens for `mul_mat_id`): quantized weights get their
    /// activations quantized once (`k_quantize_q8_1`) and register-fed
    /// int8 dot products (`k_mmvq`, `k_mmvq_id`, [`mmvq_rows_per_warp`]
    /// rows per warp); float weights read F32 rows. Quantized weights not
    /// at their blocks' alignment take the generic mat-vec.
    fn mmvq(&self, g: &Graph, node: TensorId, s: &mut Scratch) -> Result<(), BackendError> {
        let t = g.tensor(node);
        let (a, b) = (t.src[0], t.src[1]);
        let (at, bt) = (g.tensor(a), g.tensor(b));
        if !is_float(at.ty) && !mmv_aligned(at, self.ptr(g, a)?) {
            return self.mat_vec_generic(g, node, s);
        }
        let td = T4::of(g, node);
        let (bp, tb, q8, ds) = if is_float(at.ty) {
            let base = self.scratch(s, pad256(bt.nelements() as usize * 4))?;
            let (bp, tb, _) = self.f32_rows(g, b, base)?;
            (bp, tb, 0, 0)
        } else {
            let base = self.scratch(s, q8_scratch(bt.nelements()))?;
            let (q8, ds) = self.quantize_acts(g, b, at.ty, base)?;
            (self.ptr(g, b)?, T4::of(g, b), q8, ds)
        };
        let rpw = mmvq_rows_per_warp(at.ty, at.ne[0]);
        let blocks_x = (td.ne[0] as u32).div_ceil(MV_WARPS * rpw);
        let out = self.tensor_args_untyped(g, node)?;
        let weights = self.tensor_args(g, a)?;
        let acts = [A::P(bp), A::T(tb), A::P(q8), A::P(ds)];
        if t.op == Op::MulMatId {
            let pairs = (td.ne[1] * td.ne[2]) as u32;
            self.launch(
                Kernel::MmvqId,
                (blocks_x, pairs, 1),
                (32 * MV_WARPS, 1, 1),
                &[
                    &out,
                    &weights,
                    &acts,
                    &self.tensor_args_untyped(g, t.src[2])?,
                    &[A::P(self.err_flag.dev_word.ptr), A::I(rpw as i32)],
                ],
            )
        } else {
            let r2 = (bt.ne[2] / at.ne[2]).max(1);
            let r3 = (bt.ne[3] / at.ne[3]).max(1);
            let grid_z = (td.ne[2] * td.ne[3]) as u32;
            self.launch(
                Kernel::Mmvq,
                (blocks_x, 1, grid_z),
                (32 * MV_WARPS, 1, 1),
                &[
                    &out,
                    &weights,
                    &acts,
                    &[A::L(r2), A::L(r3), A::I(rpw as i32)],
                ],
            )
        }
    }

    /// Decode `mul_mat` / `mul_mat_id` with quantized weights that are not
    /// at their blocks' natural alignment (a view at an odd offset): the
    /// generic warp-per-element mat-vec (`k_mul_mat_vec`,
    /// `k_mul_mat_id_vec`) on F32 activation rows.
    fn mat_vec_generic(
        &self,
        g: &Graph,
        node: TensorId,
        s: &mut Scratch,
    ) -> Result<(), BackendError> {
        let t = g.tensor(node);
        let (a, b) = (t.src[0], t.src[1]);
        let (at, bt) = (g.tensor(a), g.tensor(b));
        let td = T4::of(g, node);
        let base = self.scratch(s, pad256(bt.nelements() as usize * 4))?;
        let (bp, tb, _) = self.f32_rows(g, b, base)?;
        let blocks_x = (td.ne[0] as u32).div_ceil(MV_WARPS);
        let out = self.tensor_args_untyped(g, node)?;
        let weights = self.tensor_args(g, a)?;
        if t.op == Op::MulMatId {
            self.launch(
                Kernel::MulMatIdVec,
                (blocks_x, td.ne[1] as u32, td.ne[2] as u32),
                (32 * MV_WARPS, 1, 1),
                &[
                    &out,
                    &weights,
                    &[A::P(bp), A::T(tb)],
                    &self.tensor_args_untyped(g, t.src[2])?,
                    &[A::P(self.err_flag.dev_word.ptr)],
                ],
            )
        } else {
            let r2 = (bt.ne[2] / at.ne[2]).max(1);
            let r3 = (bt.ne[3] / at.ne[3]).max(1);
            self.launch(
                Kernel::MulMatVec,
                (blocks_x, td.ne[1] as u32, (td.ne[2] * td.ne[3]) as u32),
                (32 * MV_WARPS, 1, 1),
                &[&out, &weights, &[A::P(bp), A::T(tb), A::L(r2), A::L(r3)]],
            )
        }
    }

    /// Prompt `mul_mat` (more than [`MMV_MAX_COLS`] columns): quantized
    /// weights take int8 tiles on quantized activations (`k_mmq`, the tile
    /// shape by `mmq_tile_shape`, K split by `mmq_split` when the tiles do
    /// not fill the device, then `k_mmq_reduce`), float weights the tiled
    /// float GEMM.
    fn mul_mat(&self, g: &Graph, node: TensorId, s: &mut Scratch) -> Result<(), BackendError> {
        let t = g.tensor(node);
        let (a, b) = (t.src[0], t.src[1]);
        let (at, bt) = (g.tensor(a), g.tensor(b));
        let td = T4::of(g, node);
        let r2 = (bt.ne[2] / at.ne[2]).max(1);
        let r3 = (bt.ne[3] / at.ne[3]).max(1);
        if bt.ne[1] <= MMV_MAX_COLS {
            return self.mmvq(g, node, s);
        }
        let grid_z = (td.ne[2] * td.ne[3]) as u32;
        if at.ty.is_quantized() {
            let (m, n) = (td.ne[0], td.ne[1]);
            let (tm, tn) = mmq_tile_shape(m, n);
            let tiles =
                (m as u64).div_ceil(tm as u64) * (n as u64).div_ceil(tn as u64) * grid_z as u64;
            let steps = (at.ne[0] as u64).div_ceil(MMQ_TK as u64);
            let nsplit = mmq_split(tiles, steps, self.dev.drv.multiprocessor_count()?);
            let q8_bytes = q8_scratch(bt.nelements());
            let part_bytes = if nsplit > 1 {
                pad256(nsplit as usize * t.nelements() as usize * 4)
            } else {
                0
            };
            let base = self.scratch(s, q8_bytes + part_bytes)?;
            let part = base + q8_bytes as u64;
            let (q8, ds) = self.quantize_acts(g, b, at.ty, base)?;
            let rawb = mmq_raw_bytes(at.ty.blck_size() as u32, at.ty.type_size() as u32);
            let out = self.tensor_args_untyped(g, node)?;
            self.launch_shared(
                Kernel::Mmq,
                (
                    (m as u32).div_ceil(tm),
                    (n as u32).div_ceil(tn),
                    grid_z * nsplit,
                ),
                (256, 1, 1),
                mmq_shared_bytes(tm, tn, rawb),
                &[
                    &out,
                    &self.tensor_args(g, a)?,
                    &[A::T(T4::of(g, b)), A::P(q8), A::P(ds), A::L(r2), A::L(r3)],
                    &[
                        A::I(tm as i32),
                        A::I(tn as i32),
                        A::I(nsplit as i32),
                        A::P(part),
                    ],
                ],
            )?;
            if nsplit > 1 {
                self.launch_n(
                    Kernel::MmqReduce,
                    t.nelements(),
                    &[&out, &[A::P(part), A::I(nsplit as i32)]],
                )?;
            }
            return Ok(());
        }
        let base = self.scratch(s, pad256(bt.nelements() as usize * 4))?;
        let (bp, tb, _) = self.f32_rows(g, b, base)?;
        let grid = (
            (td.ne[0] as u32).div_ceil(GEMM_TILE),
            (td.ne[1] as u32).div_ceil(GEMM_TILE),
            grid_z,
        );
        self.launch(
            Kernel::MulMatTiled,
            grid,
            (GEMM_TILE, GEMM_TILE, 1),
            &[
                &self.tensor_args_untyped(g, node)?,
                &self.tensor_args(g, a)?,
                &[A::P(bp), A::T(tb), A::L(r2), A::L(r3)],
            ],
        )
    }

    /// Quantize `b` (activations for weights of type `wty`) into scratch
    /// at `base` (at least [`q8_scratch`] bytes): returns the int8 values
    /// and the scales (`k_quantize_q8_1`).
    fn quantize_acts(
        &self,
        g: &Graph,
        b: TensorId,
        wty: GgmlType,
        base: DevPtr,
    ) -> Result<(DevPtr, DevPtr), BackendError> {
        let n = g.tensor(b).nelements();
        let ds = base + pad256(n as usize) as u64;
        let warps = n / Q8_1_BLOCK;
        self.launch(
            Kernel::QuantizeQ8_1,
            ((warps as u64).div_ceil(8) as u32, 1, 1),
            (256, 1, 1),
            &[
                &[A::P(base), A::P(ds)],
                &self.tensor_args(g, b)?,
                &[
                    A::I(q8_group(wty)),
                    A::I(matches!(wty, GgmlType::Q4_1 | GgmlType::Q5_1) as i32),
                ],
            ],
        )?;
        Ok((base, ds))
    }

    /// Prompt `mul_mat_id`, grouped by expert: `k_moe_group` sorts the
    /// (slot, token) pairs by id on the device and lists tiles of one
    /// expert; `k_mmq_id` (quantized experts, int8 activations) or
    /// `k_mmf_id` (float experts) runs them (id -1: zeros).
    fn mmq_id(&self, g: &Graph, node: TensorId, s: &mut Scratch) -> Result<(), BackendError> {
        let t = g.tensor(node);
        let (a, b, ids) = (t.src[0], t.src[1], t.src[2]);
        let (at, bt) = (g.tensor(a), g.tensor(b));
        let td = T4::of(g, node);
        let n_expert = at.ne[2];
        let pairs = td.ne[1] * td.ne[2];
        let max_tiles = mmq_id_max_tiles(pairs, n_expert);
        let float = is_float(at.ty);
        let q8_bytes = if float {
            pad256(bt.nelements() as usize * 4)
        } else {
            q8_scratch(bt.nelements())
        };
        let ints = |n: i64| pad256(n as usize * 4);
        let group_bytes = 2 * ints(n_expert + 2)
            + ints(n_expert + 2)
            + ints(pairs)
            + ints(2 * max_tiles)
            + ints(1);
        let base = self.scratch(s, q8_bytes + group_bytes)?;
        // float experts: F32 activation rows; quantized: int8 activations
        let (acts, tb) = if float {
            let (bp, tb, _) = self.f32_rows(g, b, base)?;
            ([bp, 0], tb)
        } else {
            let (q8, ds) = self.quantize_acts(g, b, at.ty, base)?;
            ([q8, ds], T4::of(g, b))
        };
        let cnt = base + q8_bytes as u64;
        let fill = cnt + ints(n_expert + 2) as u64;
        let off = fill + ints(n_expert + 2) as u64;
        let sorted = off + ints(n_expert + 2) as u64;
        let tiles = sorted + ints(pairs) as u64;
        let n_tiles = tiles + ints(2 * max_tiles) as u64;
        self.launch(
            Kernel::MoeGroup,
            (1, 1, 1),
            (1024, 1, 1),
            &[
                &self.tensor_args_untyped(g, ids)?,
                &[
                    A::I(n_expert as i32),
                    A::P(cnt),
                    A::P(fill),
                    A::P(off),
                    A::P(sorted),
                    A::P(tiles),
                    A::P(n_tiles),
                    A::P(self.err_flag.dev_word.ptr),
                ],
            ],
        )?;
        let groups = [A::P(off), A::P(sorted), A::P(tiles), A::P(n_tiles)];
        if float {
            let grid = ((td.ne[0] as u32).div_ceil(MMQ_TILE), max_tiles as u32, 1);
            self.launch(
                Kernel::MmfId,
                grid,
                (256, 1, 1),
                &[
                    &self.tensor_args_untyped(g, node)?,
                    &self.tensor_args(g, a)?,
                    &[A::P(acts[0]), A::T(tb)],
                    &groups,
                ],
            )
        } else {
            let (tm, _) = mmq_tile_shape(td.ne[0], MMQ_TILE as i64);
            let rawb = mmq_raw_bytes(at.ty.blck_size() as u32, at.ty.type_size() as u32);
            self.launch_shared(
                Kernel::MmqId,
                ((td.ne[0] as u32).div_ceil(tm), max_tiles as u32, 1),
                (256, 1, 1),
                mmq_shared_bytes(tm, MMQ_TILE, rawb),
                &[
                    &self.tensor_args_untyped(g, node)?,
                    &self.tensor_args(g, a)?,
                    &[A::T(tb), A::P(acts[0]), A::P(acts[1])],
                    &groups,
                    &[A::I(tm as i32)],
                ],
            )
        }
    }
}

/// `k_mmq`'s tile for an output of `m` rows x `n` columns: 128 rows
/// where there are that many (64 otherwise), and 64, 32 or 16 columns,
/// the fewest that cover `n` up to 64 (larger `n` in tiles of 64).
fn mmq_tile_shape(m: i64, n: i64) -> (u32, u32) {
    let tm = if m >= 128 { 128 } else { 64 };
    let tn = match n {
        ..=16 => 16,
        17..=32 => 32,
        _ => 64,
    };
    (tm, tn)
}

/// K splits of a `k_mmq` launch of `tiles` tiles over `steps` K steps on
/// `sms` multiprocessors: as many as fill the device (up to 8), keeping
/// at least 2 steps per split; 1 when the tiles fill it already.
fn mmq_split(tiles: u64, steps: u64, sms: u32) -> u32 {
    let fill = u64::from(sms) / tiles.max(1);
    fill.min(steps / 2).clamp(1, 8) as u32
}

/// Upper bound of `k_moe_group`'s tiles for `pairs` (slot, token) pairs
/// over `n_expert` experts plus the skip bucket (the `k_mmq_id` grid).
fn mmq_id_max_tiles(pairs: i64, n_expert: i64) -> i64 {
    (pairs + MMQ_TILE as i64 - 1) / MMQ_TILE as i64 + n_expert + 1
}

/// Scratch bytes of `k_quantize_q8_1`'s output for `n` activations: the
/// int8 values and a `Q8Ds` (8 bytes) per 32.
/// Warps the flash-attention vector kernel's cell segments aim to fill
/// (about two blocks of 4 warps per SM of a 132-SM GPU).
const FA_TARGET_WARPS: i64 = 1024;

/// Query rows from which flash attention takes the tensor-core kernel
/// (fewer: decode, the vector kernel).
const FA_MMA_MIN_Q: i64 = 8;

/// A flash_attn_ext node's shape as the kernels see it: the rows of one
/// KV head are (query, head) pairs, `n_rows = n_q * n_head / n_head_kv`.
struct FaShape {
    dk: i64,
    dv: i64,
    n_kv: i64,
    n_head_kv: i64,
    n_rows: i64,
}

impl FaShape {
    fn of(g: &Graph, node: TensorId) -> FaShape {
        let t = g.tensor(node);
        let (q, k, v) = (g.tensor(t.src[0]), g.tensor(t.src[1]), g.tensor(t.src[2]));
        let n_head_kv = k.ne[2].max(1);
        FaShape {
            dk: q.ne[0],
            dv: v.ne[0],
            n_kv: k.ne[1],
            n_head_kv,
            n_rows: q.ne[1] * (q.ne[2] / n_head_kv),
        }
    }
}

/// The vector kernel for v rows of `dv` and the rows it packs per block
/// (at most its instance's, with `rt * dk <= FAV_QMAX`).
fn fa_vec_plan(dk: i64, dv: i64, n_rows: i64) -> (Kernel, i64) {
    let (kernel, rt_max) = if dv <= 64 {
        (Kernel::FaVec64, 8)
    } else if dv <= 128 {
        (Kernel::FaVec128, 8)
    } else if dv <= 256 {
        (Kernel::FaVec256, 4)
    } else {
        (Kernel::FaVec512, 4)
    };
    let rt = rt_max.min(FAV_QMAX / dk.max(1)).min(n_rows).max(1);
    (kernel, rt)
}

/// The vector kernel's `vec` flags: bit 0, float K rows of dense
/// elements at 16-byte aligned addresses; bit 1, F16/BF16 V rows of dense
/// elements at 4-byte aligned addresses.
fn fa_vec_flags(g: &Graph, node: TensorId, ptrs: [DevPtr; 2]) -> i32 {
    let t = g.tensor(node);
    let (k, v) = (g.tensor(t.src[1]), g.tensor(t.src[2]));
    let aligned = |t: &ggml_core::Tensor, p: DevPtr, a: u64| {
        let es = t.ty.type_size();
        t.nb[0] == es
            && p.is_multiple_of(a)
            && t.nb[1..].iter().all(|&nb| (nb as u64).is_multiple_of(a))
            && (t.ne[0] as u64 * es as u64).is_multiple_of(a)
    };
    let mut f = 0;
    if is_float(k.ty) && aligned(k, ptrs[0], 16) {
        f |= 1;
    }
    if matches!(v.ty, GgmlType::F16 | GgmlType::BF16) && aligned(v, ptrs[1], 4) {
        f |= 2;
    }
    f
}

/// The tensor-core kernel for a flash_attn_ext node, when it takes it:
/// at least [`FA_MMA_MIN_Q`] queries, K and V both F16 or both BF16 with
/// dense 16-byte aligned rows, head dimension 64 or 128 for both.
fn fa_mma_kernel(g: &Graph, node: TensorId, ptrs: [DevPtr; 3]) -> Option<Kernel> {
    let t = g.tensor(node);
    let (q, k, v) = (g.tensor(t.src[0]), g.tensor(t.src[1]), g.tensor(t.src[2]));
    let aligned = |t: &ggml_core::Tensor, p: DevPtr| {
        t.nb[0] == 2 && p.is_multiple_of(16) && t.nb[1..].iter().all(|&nb| nb.is_multiple_of(16))
    };
    let ok = q.ne[1] >= FA_MMA_MIN_Q
        && matches!(k.ty, GgmlType::F16 | GgmlType::BF16)
        && v.ty == k.ty
        && q.ne[0] == v.ne[0]
        && aligned(k, ptrs[1])
        && aligned(v, ptrs[2])
        && cdiv(FaShape::of(g, node).n_rows, 16 * FAM_WARPS as i64) <= u32::MAX as i64;
    match (ok, q.ne[0]) {
        (true, 64) => Some(Kernel::FaMma64),
        (true, 128) => Some(Kernel::FaMma128),
        _ => None,
    }
}

fn q8_scratch(n: i64) -> usize {
    pad256(n as usize) + pad256((n / Q8_1_BLOCK) as usize * 8)
}

/// Elements per block, 16-byte pieces per block (`Piece<TY>::PPB` in
/// `mmv_pieces.cu`) and the natural alignment of a block (`AL`) of the
/// register-fed mat-vec's weight types.
fn mmv_piece_layout(ty: GgmlType) -> (i64, i64, u64) {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q5_0 | T::IQ4NL => (32, 1, 2),
        T::Q4_1 => (32, 1, 4),
        T::Q5_1 => (32, 1, 8),
        T::Q8_0 => (32, 2, 2),
        T::MXFP4 => (32, 1, 1),
        T::Q2K => (256, 4, 4),
        T::Q3K => (256, 4, 2),
        T::Q4K | T::Q5K => (256, 8, 16),
        T::Q6K => (256, 8, 2),
        T::IQ4XS => (256, 8, 8),
        // float rows: 16-byte words
        _ => ((16 / ty.type_size().max(1)) as i64, 1, 1),
    }
}

/// Rows per warp of the decode mat-vec for rows of `k` elements of `ty`:
/// as many as keep each row's lanes (32 / rows) busy with its pieces.
pub fn mmvq_rows_per_warp(ty: GgmlType, k: i64) -> u32 {
    let (qk, ppb, _) = mmv_piece_layout(ty);
    let pieces = k / qk * ppb;
    if pieces <= 8 {
        4
    } else if pieces <= 16 {
        2
    } else {
        1
    }
}

/// Whether a quantized weight tensor at `ptr` has every block at its
/// type's natural alignment (and its first byte at 4 or more, so the
/// funnel-shift loads of 2-byte aligned blocks stay inside the tensor).
fn mmv_aligned(t: &ggml_core::Tensor, ptr: DevPtr) -> bool {
    let (_, _, al) = mmv_piece_layout(t.ty);
    ptr.is_multiple_of(al.max(4)) && t.nb[1..].iter().all(|&nb| (nb as u64).is_multiple_of(al))
}

/// `ggml_rope_yarn_corr_dims`: the dimension range YaRN ramps over (the
/// CPU backend's definition, so both agree bit for bit, NaN included).
pub fn rope_yarn_corr_dims(
    n_dims: i32,
    n_ctx_orig: i32,
    freq_base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> (f32, f32) {
    let [lo, hi] =
        ggml_core::op::rope_yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow);
    (lo, hi)
}

/// Whether the CUDA kernels implement this node (op, types, layout, grid
/// limits). Pure: needs no device, so it is tested without a GPU.
pub fn supports_node(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let st = |i: usize| g.tensor(t.src[i]);
    let f32_dst = t.ty == GgmlType::F32;
    let grid_ok = |n: i64| n <= i32::MAX as i64; // grid.x limit
    match t.op {
        Op::None | Op::Reshape | Op::View | Op::Permute | Op::Transpose => true,
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            f32_dst && is_float(st(0).ty) && is_float(st(1).ty)
        }
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Unary(_) => f32_dst && is_float(st(0).ty),
        Op::Glu { .. } => f32_dst && t.src.iter().all(|&s| is_float(g.tensor(s).ty)),
        Op::Cpy | Op::Cont | Op::Dup => {
            let (s, d) = (st(0).ty, t.ty);
            (is_float(s) && is_float(d)) || (s == GgmlType::I32 && d == GgmlType::I32)
        }
        Op::GetRows => {
            let a = st(0).ty;
            st(1).ty == GgmlType::I32
                && st(0).rows_contiguous()
                && ((is_weight_type(a) && f32_dst) || (a == GgmlType::I32 && t.ty == GgmlType::I32))
        }
        Op::SetRows => {
            matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
                && st(1).ty == GgmlType::F32
                && matches!(st(2).ty, GgmlType::I32 | GgmlType::I64)
        }
        Op::Concat { dim } => {
            (0..4).contains(&dim) && !t.ty.is_quantized() && st(0).ty == t.ty && st(1).ty == t.ty
        }
        Op::RmsNorm { .. } | Op::Norm { .. } | Op::SumRows | Op::Mean | Op::Argmax => {
            is_float(st(0).ty)
                && grid_ok(st(0).nrows())
                && (t.op != Op::Argmax || t.is_contiguous())
        }
        Op::SoftMaxExt { .. } => {
            is_float(st(0).ty)
                && grid_ok(st(0).nrows())
                && t.src
                    .get(1)
                    .is_none_or(|&m| matches!(g.tensor(m).ty, GgmlType::F32 | GgmlType::F16))
                && t.src.get(2).is_none_or(|&sk| {
                    let s = g.tensor(sk);
                    s.ty == GgmlType::F32 && s.is_contiguous()
                })
        }
        Op::RopeExt(_) => {
            is_float(st(0).ty)
                && f32_dst
                && t.ne[0] % 2 == 0
                && st(1).ty == GgmlType::I32
                && st(1).is_contiguous()
                && t.src.get(2).is_none_or(|&f| {
                    let f = g.tensor(f);
                    f.ty == GgmlType::F32 && f.is_contiguous()
                })
        }
        Op::Argsort(_) | Op::TopK { .. } => is_float(st(0).ty) && t.ty == GgmlType::I32,
        Op::AddId => {
            f32_dst && is_float(st(0).ty) && is_float(st(1).ty) && st(2).ty == GgmlType::I32
        }
        Op::MulMat => {
            let (a, b) = (st(0), st(1));
            is_weight_type(a.ty)
                && a.rows_contiguous()
                && is_float(b.ty)
                && f32_dst
                && t.ne[2] * t.ne[3] <= GRID_YZ_MAX
                && (b.ne[1] > MMV_MAX_COLS || t.ne[1] <= GRID_YZ_MAX)
        }
        Op::MulMatId => {
            let (a, b) = (st(0), st(1));
            is_weight_type(a.ty)
                && a.rows_contiguous()
                && is_float(b.ty)
                && st(2).ty == GgmlType::I32
                && f32_dst
                && t.ne[1] <= GRID_YZ_MAX
                && t.ne[2] <= GRID_YZ_MAX
                && mmq_id_max_tiles(t.ne[1] * t.ne[2], a.ne[2]) <= GRID_YZ_MAX
        }
        Op::FlashAttnExt { .. } => {
            let (q, k, v) = (st(0), st(1), st(2));
            // k: float, or a 32-element block type (q quantized per 32 as
            // the CPU's Q8_0 / Q8_1)
            let k_ok = is_float(k.ty)
                || (fa_block_k_type(k.ty) && k.rows_contiguous() && q.ne[0] % 32 == 0);
            let shapes =
                g.flash_attn_ext_shapes_ok(node) && q.ne[0] <= FA_DMAX && v.ne[0] <= FA_DV_MAX;
            let mask_ok = t
                .src
                .get(3)
                .is_none_or(|&m| matches!(g.tensor(m).ty, GgmlType::F32 | GgmlType::F16));
            let sinks_ok = t.src.get(4).is_none_or(|&sk| {
                let sk = g.tensor(sk);
                sk.ty == GgmlType::F32 && sk.is_contiguous()
            });
            f32_dst
                && is_float(q.ty)
                && k_ok
                && is_weight_type(v.ty)
                && (is_float(v.ty) || v.rows_contiguous())
                && shapes
                && mask_ok
                && sinks_ok
                && fa_grid_ok(g, node)
        }
    }
}

/// Largest v row of flash attention (`k_fa_vec_512`: MLA's 512).
const FA_DV_MAX: i64 = 512;

/// Whether flash attention's grids fit: the vector kernel's row tiles
/// (grid y) and KV heads (grid z), the combine's rows (grid x).
fn fa_grid_ok(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let q = g.tensor(t.src[0]);
    let sh = FaShape::of(g, node);
    let (_, rt) = fa_vec_plan(sh.dk, sh.dv, sh.n_rows);
    let z = sh.n_head_kv * q.ne[3];
    cdiv(sh.n_rows, rt) <= GRID_YZ_MAX
        && z <= GRID_YZ_MAX
        && cdiv(z * sh.n_rows, 4) <= u32::MAX as i64
}

/// Whether a node's kernel validates ids through the device error flag.
fn validates_ids(op: Op) -> bool {
    matches!(op, Op::GetRows | Op::SetRows | Op::AddId | Op::MulMatId)
}

impl BackendDevice for CudaBackend {
    fn name(&self) -> &str {
        &self.dev.name
    }

    fn pin_host(
        &self,
        bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    ) -> Result<Option<Box<dyn std::any::Any + Send + Sync>>, BackendError> {
        let r = self.register_host(bytes)?;
        Ok(Some(Box::new(r)))
    }

    fn is_host(&self) -> bool {
        false
    }

    fn alloc_buffer(
        &self,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Arc<dyn Buffer>, BackendError> {
        Ok(Arc::new(CudaBuffer::new(&self.dev, size, usage)?))
    }

    fn can_use_buffer(&self, buf: &dyn Buffer) -> bool {
        self.owns(buf)
    }

    fn supports_op(&self, g: &Graph, node: TensorId) -> bool {
        supports_node(g, node)
    }

    fn offload_op(&self, g: &Graph, node: TensorId) -> bool {
        offload_host_weight_op(g, node, self.offload_min_batch)
    }

    fn read_overhang(&self) -> usize {
        0
    }

    fn memory(&self) -> Option<(usize, usize)> {
        let free = self.free_memory().ok()?;
        let total = self.total_memory().ok()?;
        Some((free, total))
    }
}

impl BackendStream for CudaBackend {
    fn compute(&self, g: &Graph, nodes: &[TensorId]) -> Result<(), BackendError> {
        self.dev.bind()?;
        let mut s = self
            .scratch
            .lock()
            .map_err(|_| BackendError::Device("scratch lock poisoned".into()))?;
        let mut bits = 0;
        for &n in nodes {
            let t = g.tensor(n);
            if !supports_node(g, n) {
                return Err(BackendError::Unsupported(format!(
                    "op {} on {} for these types or shapes (tensor '{}')",
                    t.op.name(),
                    self.dev.name,
                    t.name
                )));
            }
            bits |= err_flag::bit_of(t.op);
        }
        let steps = fusion::plan(g, nodes);
        let tracing = self.trace.lock().map(|t| t.is_some()).unwrap_or(false);
        if tracing {
            // launch by launch, each op between timing events
            for step in &steps {
                let n = match step {
                    Step::Node(n) => *n,
                    Step::Fused { fused, .. } => fused.output(),
                };
                let t = g.tensor(n);
                self.traced(
                    Stream::Compute,
                    SpanKind::Op,
                    t.nbytes() as u64,
                    || match step {
                        Step::Node(_) => format!("{} {}", t.op.name(), t.name),
                        Step::Fused { fused, nodes } => {
                            format!("{} {}", fused.name(), fusion::label(g, nodes))
                        }
                    },
                    || self.compute_step(g, step, &mut s),
                )?;
            }
        } else {
            // plan the split's launches, then queue them (or their graph)
            *self
                .planning
                .lock()
                .map_err(|_| BackendError::Device("plan lock poisoned".into()))? = Some(Vec::new());
            let planned = steps
                .iter()
                .try_for_each(|step| self.compute_step(g, step, &mut s));
            let plan = self
                .planning
                .lock()
                .map_err(|_| BackendError::Device("plan lock poisoned".into()))?
                .take()
                .unwrap_or_default();
            planned?;
            self.issue(GraphCache::key(nodes), &plan)?;
        }
        self.err_flag.launched(bits);
        // allocations replaced while planning: free them now that the
        // launches using them are queued (dropping waits for them)
        if !s.retired.is_empty() {
            if let Ok(mut gc) = self.graphs.lock() {
                gc.clear();
            }
            s.retired.clear();
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

    fn n_copy_streams(&self) -> usize {
        crate::buffer::N_COPY_STREAMS
    }

    fn write_on(
        &self,
        stream: Stream,
        dst: &TensorData,
        offset: usize,
        data: &[u8],
    ) -> Result<(), BackendError> {
        let Some(cb) = dst
            .buffer
            .as_any()
            .downcast_ref::<CudaBuffer>()
            .filter(|c| c.same_dev(&self.dev))
        else {
            return dst.buffer.write(dst.offset + offset, data);
        };
        check_range(cb.name(), cb.size(), dst.offset + offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        self.dev.bind()?;
        let ptr = cb.device_ptr() + (dst.offset + offset) as u64;
        self.traced(
            stream,
            SpanKind::CopyH2D,
            data.len() as u64,
            String::new,
            || {
                // SAFETY: the range was checked against the buffer; the trait's
                // contract keeps `data` valid and unchanged until the stream's
                // work is complete (an event on it, or `synchronize`).
                unsafe {
                    self.dev
                        .stream_of(stream)
                        .memcpy_htod(ptr, data.as_ptr(), data.len())
                }
            },
        )
    }

    fn read_on(
        &self,
        stream: Stream,
        src: &TensorData,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        let Some(cb) = src
            .buffer
            .as_any()
            .downcast_ref::<CudaBuffer>()
            .filter(|c| c.same_dev(&self.dev))
        else {
            return src.buffer.read(src.offset + offset, out);
        };
        check_range(cb.name(), cb.size(), src.offset + offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        self.dev.bind()?;
        // SAFETY: the range was checked; the caller keeps `out` alive and
        // unread until an event recorded after this read is complete.
        unsafe {
            self.dev.stream_of(stream).memcpy_dtoh(
                out.as_mut_ptr(),
                cb.device_ptr() + (src.offset + offset) as u64,
                out.len(),
            )
        }
    }

    // read_async: the trait's default, a buffer read that completes in the
    // call (`out` is only borrowed for it).

    fn synchronize(&self) -> Result<(), BackendError> {
        self.dev.bind()?;
        // the out-of-range flag is read at the synchronize that ends the
        // graph, not inside it
        self.err_flag.before_sync()?;
        self.dev.sync()?;
        self.err_flag.after_sync()
    }

    fn record_event(&self) -> Result<Event, BackendError> {
        self.record_event_on(Stream::Compute)
    }

    fn wait_event(&self, ev: &Event) -> Result<(), BackendError> {
        self.wait_event_on(Stream::Compute, ev)
    }

    fn record_event_on(&self, stream: Stream) -> Result<Event, BackendError> {
        let ev = self.dev.record_pooled(self.dev.stream_of(stream))?;
        let copy = matches!(stream, Stream::Copy(_));
        Ok(Event(Arc::new(CudaEventHolder(ev, self.dev.ordinal, copy))))
    }

    fn wait_event_on(&self, stream: Stream, ev: &Event) -> Result<(), BackendError> {
        let Some(h) = ev.0.downcast_ref::<CudaEventHolder>() else {
            // another kind of backend: its work is complete when recorded
            return Ok(());
        };
        // The planted bug `upload` (emulated devices only): compute does not
        // wait for this device's uploads.
        if stream == Stream::Compute
            && h.2
            && h.1 == self.dev.ordinal
            && self.dev.drv.planted_drop_wait("upload")
        {
            return Ok(());
        }
        self.dev.stream_of(stream).wait_event(h.0.event())
    }

    fn wait_event_for(
        &self,
        stream: Stream,
        ev: &Event,
        kind: WaitKind,
    ) -> Result<(), BackendError> {
        // The planted bug of this kind (emulated devices only: the driver
        // answers) drops the wait.
        if self.dev.drv.planted_drop_wait(kind.as_str()) {
            return Ok(());
        }
        self.wait_event_on(stream, ev)
    }

    fn event_synchronize(&self, ev: &Event) -> Result<(), BackendError> {
        match ev.0.downcast_ref::<CudaEventHolder>() {
            Some(h) => h.0.event().synchronize(),
            None => self.synchronize(),
        }
    }

    fn copy_within(
        &self,
        src: &TensorData,
        src_off: usize,
        dst: &TensorData,
        dst_off: usize,
        len: usize,
    ) -> Result<bool, BackendError> {
        let mine = |d: &TensorData| {
            d.buffer
                .as_any()
                .downcast_ref::<CudaBuffer>()
                .filter(|c| c.same_dev(&self.dev))
                .map(|c| (c.device_ptr(), c.size()))
        };
        let (Some((sp, ss)), Some((dp, ds))) = (mine(src), mine(dst)) else {
            return Ok(false);
        };
        let so = src.offset.saturating_add(src_off);
        let dof = dst.offset.saturating_add(dst_off);
        check_range(src.buffer.name(), ss, so, len)?;
        check_range(dst.buffer.name(), ds, dof, len)?;
        if len == 0 {
            return Ok(true);
        }
        self.dev.bind()?;
        // SAFETY: both ranges were checked against their allocations, which
        // the TensorData keep alive; the copy is queued on the device's compute
        // stream, ordered with the compute that reads the destination.
        unsafe {
            self.dev
                .stream
                .memcpy_dtod(dp + dof as u64, sp + so as u64, len)
        }?;
        Ok(true)
    }

    fn copy_from_peer(
        &self,
        _src_be: &dyn BackendDevice,
        src: &TensorData,
        dst: &TensorData,
        len: usize,
        stream: Stream,
        after: Option<&Event>,
    ) -> Result<bool, BackendError> {
        let Some(sb) = src
            .buffer
            .as_any()
            .downcast_ref::<CudaBuffer>()
            .filter(|c| !c.same_dev(&self.dev))
        else {
            return Ok(false);
        };
        let Some(db) = dst
            .buffer
            .as_any()
            .downcast_ref::<CudaBuffer>()
            .filter(|c| c.same_dev(&self.dev))
        else {
            return Ok(false);
        };
        if !self.peer_ok(&sb.mem.dev)? {
            return Ok(false);
        }
        check_range(sb.name(), sb.size(), src.offset, len)?;
        check_range(db.name(), db.size(), dst.offset, len)?;
        // The planted bug `peer` (emulated devices only): the copy does not
        // wait for the work that wrote its source.
        if let Some(ev) = after.filter(|_| !self.dev.drv.planted_drop_wait("peer")) {
            self.wait_event_on(stream, ev)?;
        }
        if len == 0 {
            return Ok(true);
        }
        self.dev.bind()?;
        let (sp, dp) = (
            sb.device_ptr() + src.offset as u64,
            db.device_ptr() + dst.offset as u64,
        );
        self.traced(stream, SpanKind::CopyD2D, len as u64, String::new, || {
            // SAFETY: both ranges were checked against their allocations,
            // which the TensorData keep alive; the caller keeps the source
            // unwritten until an event after this copy is complete.
            unsafe {
                self.dev
                    .stream_of(stream)
                    .memcpy_peer(dp, sp, sb.mem.dev.drv.as_ref(), len)
            }
        })?;
        Ok(true)
    }
}

impl BackendDiagnostics for CudaBackend {
    fn pipeline_counters(&self) -> Option<&ggml_core::PipelineCounters> {
        Some(&self.dev.counters)
    }

    fn set_label(&self, label: &str) {
        if let Ok(mut t) = self.trace.lock() {
            if let Some(t) = t.as_mut() {
                t.label.clear();
                t.label.push_str(label);
            }
        }
    }

    fn set_event_timeline(&self, on: bool) -> bool {
        let base = if on {
            if self.dev.bind().is_err() {
                return false;
            }
            match self.timing_event(Stream::Compute) {
                Ok(b) => Some(b),
                Err(_) => return false,
            }
        } else {
            None
        };
        if let Ok(mut t) = self.trace.lock() {
            *t = base.map(|base| Trace {
                base,
                spans: Vec::new(),
                label: String::new(),
            });
        }
        on
    }

    fn take_event_timeline(&self) -> Result<Option<Timeline>, BackendError> {
        let spans = {
            let Ok(mut t) = self.trace.lock() else {
                return Ok(None);
            };
            let Some(t) = t.as_mut() else {
                return Ok(None);
            };
            let spans = std::mem::take(&mut t.spans);
            // an emulated device's track says so: its durations are the CPU
            // emulator's, never a GPU's
            let track = if self.dev.drv.is_emulated() {
                format!("{} (emulated)", self.dev.name)
            } else {
                self.dev.name.clone()
            };
            // times relative to the base event (elapsed_ms waits for both)
            let mut out = Vec::with_capacity(spans.len());
            for (seq, sp) in spans.into_iter().enumerate() {
                let at = |e: &Arc<dyn driver::Event>| -> Result<u64, BackendError> {
                    let ms = t.base.elapsed_ms(e.as_ref())?;
                    Ok((ms.max(0.0) as f64 * 1e6) as u64)
                };
                let (s, e) = (at(&sp.start)?, at(&sp.end)?);
                out.push(Span {
                    seq: seq as u64,
                    backend: track.clone(),
                    stream: sp.stream.to_string(),
                    kind: sp.kind,
                    name: sp.name,
                    start_ns: s,
                    end_ns: e.max(s),
                    bytes: sp.bytes,
                    reads: Vec::new(),
                    writes: Vec::new(),
                });
            }
            out
        };
        Ok(Some(Timeline { spans }))
    }
}

impl Backend for CudaBackend {
    fn diagnostics(&self) -> Option<&dyn BackendDiagnostics> {
        Some(self)
    }
}

#[cfg(test)]
mod mmq_shape_tests {
    use super::{mmq_split, mmq_tile_shape};
    use crate::kernels::{mmq_raw_bytes, mmq_shared_bytes, MMQ_MAX_SHARED};

    #[test]
    fn tiles_follow_the_shape() {
        assert_eq!(mmq_tile_shape(40, 17), (64, 32));
        assert_eq!(mmq_tile_shape(136, 128), (128, 64));
        assert_eq!(mmq_tile_shape(4096, 9), (128, 16));
        assert_eq!(mmq_tile_shape(127, 33), (64, 64));
    }

    #[test]
    fn k_splits_only_when_the_tiles_do_not_fill_the_device() {
        // 4 tiles of 4 K steps on 132 SMs: 2 splits (2 steps each)
        assert_eq!(mmq_split(4, 4, 132), 2);
        // one step: nothing to split
        assert_eq!(mmq_split(1, 1, 132), 1);
        // few tiles over a long K: at most 8 splits
        assert_eq!(mmq_split(2, 64, 132), 8);
        // the tiles fill the device
        assert_eq!(mmq_split(132, 64, 132), 1);
        assert_eq!(mmq_split(1000, 64, 132), 1);
    }

    #[test]
    fn the_largest_tile_fits_the_opt_in_shared_memory() {
        // Q8_0: 8 blocks of 34 B per 256 elements; Q4_K 144 B; MXFP4 17 B
        // blocks (136, rounded to 144)
        assert_eq!(mmq_raw_bytes(32, 34), 272);
        assert_eq!(mmq_raw_bytes(256, 144), 144);
        assert_eq!(mmq_raw_bytes(32, 17), 144);
        assert_eq!(mmq_shared_bytes(128, 64, 144), 128 * 1024);
        assert_eq!(MMQ_MAX_SHARED, mmq_shared_bytes(128, 64, 272));
    }

    // with the kernels' static shared memory, under 227 KiB
    const _: () = assert!(MMQ_MAX_SHARED + 1024 <= 227 * 1024);
}
