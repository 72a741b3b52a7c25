//! The CUDA C++ kernel source, the kernels the Rust side launches (by
//! name), the NVRTC compile path and the process-wide PTX cache (NVRTC
//! compiles the source at most once per GPU architecture per process), and
//! [`Kernels`], what a device loaded: the image comes from the shipped
//! cubins and PTX first (`shipped.rs`, picked by `kernel_load.rs`), NVRTC
//! being the fallback.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use ggml_core::BackendError;

use crate::driver::{Device, Function};

/// The parts of the kernel source, in order: `kernels.cu` (types, helpers
/// and the first kernels), then each kernel family of `src/kernels/`, in
/// file-name order (`build.rs` compiles the same files for the emulator).
pub const KERNEL_PARTS: &[(&str, &str)] = &[
    ("kernels.cu", include_str!("kernels.cu")),
    (
        "kernels/async_copy_mma.cu",
        include_str!("kernels/async_copy_mma.cu"),
    ),
    ("kernels/dot_q8.cu", include_str!("kernels/dot_q8.cu")),
    (
        "kernels/flash_attn.cu",
        include_str!("kernels/flash_attn.cu"),
    ),
    ("kernels/mmq.cu", include_str!("kernels/mmq.cu")),
    (
        "kernels/mmv_pieces.cu",
        include_str!("kernels/mmv_pieces.cu"),
    ),
    ("kernels/mmvq.cu", include_str!("kernels/mmvq.cu")),
    (
        "kernels/mmvq_fused.cu",
        include_str!("kernels/mmvq_fused.cu"),
    ),
];

/// The kernel source ([`KERNEL_PARTS`] joined), compiled at run time by
/// NVRTC. It uses no `#include`, so no CUDA toolkit headers are needed.
pub const KERNELS_SRC: &str = concat!(
    include_str!("kernels.cu"),
    include_str!("kernels/async_copy_mma.cu"),
    include_str!("kernels/dot_q8.cu"),
    include_str!("kernels/flash_attn.cu"),
    include_str!("kernels/mmq.cu"),
    include_str!("kernels/mmv_pieces.cu"),
    include_str!("kernels/mmvq.cu"),
    include_str!("kernels/mmvq_fused.cu"),
);

/// The file name NVRTC is given for the source (it names it in its log).
pub const KERNELS_FILE_NAME: &str = "ggml_cuda_kernels.cu";

/// The architecture compiled for when NVRTC does not know the device's own
/// (an NVRTC older than the GPU): the driver JIT-compiles it forward. The
/// oldest architecture both CUDA 12 and CUDA 13 compile for (CUDA 13
/// dropped `compute_70`).
pub const FALLBACK_ARCH: &str = "compute_75";

/// Every kernel the Rust side launches. The launch code names kernels only
/// through this enum, so the list of entry points it looks up is
/// [`Kernel::ALL`] (tests check each is defined in the source and the PTX).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `k_binary`: add/sub/mul/div with broadcasting.
    Binary,
    /// `k_unary`: element-wise unary ops and scale.
    Unary,
    /// `k_glu`: swiglu/geglu/swiglu_oai.
    Glu,
    /// `k_cpy`: copies and type conversions between F32/F16/BF16/I32.
    Cpy,
    /// `k_to_f32`: dequantization of whole tensors to F32.
    ToF32,
    /// `k_get_rows`.
    GetRows,
    /// `k_set_rows`.
    SetRows,
    /// `k_concat`.
    Concat,
    /// `k_row_reduce`: rms_norm, norm, sum_rows, mean.
    RowReduce,
    /// `k_argmax`.
    Argmax,
    /// `k_soft_max`.
    SoftMax,
    /// `k_rope`.
    Rope,
    /// `k_rank_sort`: argsort and top_k.
    RankSort,
    /// `k_add_id`.
    AddId,
    /// `k_mul_mat_vec`: warp-per-row matrix-vector product (no longer
    /// dispatched: `k_mmvq` replaces it; kept for the emulator's kernel
    /// tests).
    MulMatVec,
    /// `k_mul_mat_id_vec`: matrix-vector product per selected expert (no
    /// longer dispatched: `k_mmvq_id` and the grouped kernels replace it;
    /// kept for the emulator's kernel tests).
    MulMatIdVec,
    /// `k_mul_mat_tiled`: tiled F32 GEMM.
    MulMatTiled,
    /// `k_quantize_q8_1`: activations to 8-bit values with a scale per 32.
    QuantizeQ8_1,
    /// `k_mmvq`: decode mat-vec, int8 dot products (float path for
    /// F32/F16/BF16 weights), up to 8 columns per weight read.
    Mmvq,
    /// `k_mmvq_id`: decode `mul_mat_id`, columns grouped by expert.
    MmvqId,
    /// `k_mmq`: prompt mul_mat with quantized weights, int8 tensor-core
    /// tiles of 64 or 128 rows (cp.async, ldmatrix, m16n8k32), split-k.
    Mmq,
    /// `k_mmq_reduce`: the sum of `k_mmq`'s split-k partial tiles.
    MmqReduce,
    /// `k_moe_group`: a ubatch's (slot, token) pairs sorted by expert id.
    MoeGroup,
    /// `k_mmq_id`: prompt `mul_mat_id`, one int8 tile of one expert per
    /// block.
    MmqId,
    /// `k_fa_vec_64`: flash_attn_ext's vector kernel (decode; rows of a KV
    /// head packed, split over the cells), v rows up to 64.
    FaVec64,
    /// `k_fa_vec_128`: the same for v rows up to 128.
    FaVec128,
    /// `k_fa_vec_256`: the same for v rows up to 256.
    FaVec256,
    /// `k_fa_vec_512`: the same for v rows up to 512 (MLA).
    FaVec512,
    /// `k_fa_combine`: merges the vector kernel's segments.
    FaCombine,
    /// `k_fa_mma_64`: flash_attn_ext on tensor cores (prompts, F16/BF16
    /// K/V, head dimension 64).
    FaMma64,
    /// `k_fa_mma_128`: the same for head dimension 128.
    FaMma128,
    /// `k_mmf_id`: prompt `mul_mat_id` with float experts, grouped tiles.
    MmfId,
    /// `k_mmvq_id_glu`: decode gate and up `mul_mat_id` (and their
    /// `add_id` biases) fused with the GLU.
    MmvqIdGlu,
    /// `k_mmvq_id_down`: decode down `mul_mat_id` (and its bias) fused with
    /// the router weights and the sum over the experts.
    MmvqIdDown,
}

impl Kernel {
    /// Every kernel, in a fixed order.
    pub const ALL: [Kernel; 34] = [
        Kernel::Binary,
        Kernel::Unary,
        Kernel::Glu,
        Kernel::Cpy,
        Kernel::ToF32,
        Kernel::GetRows,
        Kernel::SetRows,
        Kernel::Concat,
        Kernel::RowReduce,
        Kernel::Argmax,
        Kernel::SoftMax,
        Kernel::Rope,
        Kernel::RankSort,
        Kernel::AddId,
        Kernel::MulMatVec,
        Kernel::MulMatIdVec,
        Kernel::MulMatTiled,
        Kernel::QuantizeQ8_1,
        Kernel::Mmvq,
        Kernel::MmvqId,
        Kernel::Mmq,
        Kernel::MmqReduce,
        Kernel::MoeGroup,
        Kernel::MmqId,
        Kernel::FaVec64,
        Kernel::FaVec128,
        Kernel::FaVec256,
        Kernel::FaVec512,
        Kernel::FaCombine,
        Kernel::FaMma64,
        Kernel::FaMma128,
        Kernel::MmfId,
        Kernel::MmvqIdGlu,
        Kernel::MmvqIdDown,
    ];

    /// The kernel's `extern "C"` name in `kernels.cu` (its PTX entry point).
    pub const fn name(self) -> &'static str {
        match self {
            Kernel::Binary => "k_binary",
            Kernel::Unary => "k_unary",
            Kernel::Glu => "k_glu",
            Kernel::Cpy => "k_cpy",
            Kernel::ToF32 => "k_to_f32",
            Kernel::GetRows => "k_get_rows",
            Kernel::SetRows => "k_set_rows",
            Kernel::Concat => "k_concat",
            Kernel::RowReduce => "k_row_reduce",
            Kernel::Argmax => "k_argmax",
            Kernel::SoftMax => "k_soft_max",
            Kernel::Rope => "k_rope",
            Kernel::RankSort => "k_rank_sort",
            Kernel::AddId => "k_add_id",
            Kernel::MulMatVec => "k_mul_mat_vec",
            Kernel::MulMatIdVec => "k_mul_mat_id_vec",
            Kernel::MulMatTiled => "k_mul_mat_tiled",
            Kernel::QuantizeQ8_1 => "k_quantize_q8_1",
            Kernel::Mmvq => "k_mmvq",
            Kernel::MmvqId => "k_mmvq_id",
            Kernel::Mmq => "k_mmq",
            Kernel::MmqReduce => "k_mmq_reduce",
            Kernel::MoeGroup => "k_moe_group",
            Kernel::MmqId => "k_mmq_id",
            Kernel::FaVec64 => "k_fa_vec_64",
            Kernel::FaVec128 => "k_fa_vec_128",
            Kernel::FaVec256 => "k_fa_vec_256",
            Kernel::FaVec512 => "k_fa_vec_512",
            Kernel::FaCombine => "k_fa_combine",
            Kernel::FaMma64 => "k_fa_mma_64",
            Kernel::FaMma128 => "k_fa_mma_128",
            Kernel::MmfId => "k_mmf_id",
            Kernel::MmvqIdGlu => "k_mmvq_id_glu",
            Kernel::MmvqIdDown => "k_mmvq_id_down",
        }
    }

    /// The dynamic shared memory the kernel's launches may use beyond the
    /// default 48 KiB (set with [`crate::driver::Device::set_max_dynamic_shared`]
    /// when the kernels are loaded).
    pub const fn max_dynamic_shared(self) -> Option<u32> {
        match self {
            Kernel::Mmq | Kernel::MmqId => Some(MMQ_MAX_SHARED),
            _ => None,
        }
    }
}

/// The names of [`Kernel::ALL`]: every entry point the backend looks up.
pub const KERNEL_NAMES: &[&str] = &{
    let mut names = [""; Kernel::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Kernel::ALL[i].name();
        i += 1;
    }
    names
};

/// Warps per block of the matrix-vector kernels (`MV_WARPS` in the source).
pub const MV_WARPS: u32 = 4;
/// Columns `k_mmvq` / `k_mmvq_id` multiply per weight read
/// (`MMVQ_MAX_COLS` in the source).
pub const MMVQ_MAX_COLS: u32 = 8;
/// Activation elements per scale of `k_quantize_q8_1`.
pub const Q8_1_BLOCK: i64 = 32;
/// (Slot, token) pairs of one `k_moe_group` tile, the columns of a
/// `k_mmq_id` tile, and the tile edge of `k_mmf_id` (`MMQ_TN`, `MMQ_TM` in
/// the source).
pub const MMQ_TILE: u32 = 32;
/// K elements per pipeline step of `k_mmq` / `k_mmq_id` (`MMQ_TK`).
pub const MMQ_TK: i64 = 256;
/// Bytes per staged int8 row of `k_mmq` (`MMQ_PITCH`).
const MMQ_PITCH: u32 = 272;
/// The most dynamic shared memory a `k_mmq` / `k_mmq_id` launch takes
/// ([`mmq_shared_bytes`] of 128 x 64 tiles of the widest raw type, Q8_0).
pub const MMQ_MAX_SHARED: u32 = mmq_shared_bytes(128, 64, 272);

/// Raw bytes of [`MMQ_TK`] elements of a weight type with blocks of
/// `block` elements of `size` bytes, rounded up to 16 (`mmq_rawb`).
pub const fn mmq_raw_bytes(block: u32, size: u32) -> u32 {
    ((MMQ_TK as u32 / block) * size).div_ceil(16) * 16
}

/// Dynamic shared memory of a `k_mmq` tile of `tm` rows x `tn` columns
/// with `rawb` raw bytes per row and step (`mmq_smem`'s layout: two raw
/// weight buffers, the int8 rows, scales and mins of each 16, two buffers
/// of int8 activations and their scales).
pub const fn mmq_shared_bytes(tm: u32, tn: u32, rawb: u32) -> u32 {
    2 * tm * rawb + tm * MMQ_PITCH + 2 * tm * 64 + 2 * tn * MMQ_PITCH + 2 * tn * 64
}
/// Largest head dimension flash attention takes (`FA_DMAX`: MLA's 576).
pub const FA_DMAX: i64 = 576;
/// Warps (cell segments) per block of the flash-attention vector kernels
/// (`FAV_WARPS`).
pub const FAV_WARPS: u32 = 4;
/// Floats of packed q rows a vector block holds (`FAV_QMAX`): rows x head
/// dimension.
pub const FAV_QMAX: i64 = 2304;
/// Warps per block of the flash-attention tensor-core kernels
/// (`FAM_WARPS`), 16 rows each.
pub const FAM_WARPS: u32 = 4;
/// Tile edge of `k_mul_mat_tiled` (`GT` in the source).
pub const GEMM_TILE: u32 = 16;

/// What NVRTC made of one source: the PTX and the program log (empty, or
/// the warnings of a successful compile).
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The PTX text.
    pub ptx: String,
    /// NVRTC's program log.
    pub log: String,
}

impl Compiled {
    /// The log's warning lines (NVRTC writes `file(line): warning #N-D: ...`
    /// for the source and `nvrtc: warning: ...` for its own notices).
    pub fn warnings(&self) -> Vec<&str> {
        self.log
            .lines()
            .filter(|l| l.contains(": warning"))
            .collect()
    }

    /// Whether the PTX defines the kernel entry point `name`.
    pub fn defines_entry(&self, name: &str) -> bool {
        self.entries().any(|e| e == name)
    }

    /// The kernel entry points (`.entry NAME(`) the PTX defines.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.ptx.lines().filter_map(|l| {
            let rest = l.trim_start().strip_prefix(".visible .entry ")?;
            Some(rest.split('(').next().unwrap_or(rest).trim())
        })
    }
}

/// The NVRTC options the backend compiles with for `arch` (`"compute_90"`).
pub fn compile_options(arch: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={arch}")]
}

/// The NVRTC version `(major, minor)` (`NoDevice` without NVRTC).
pub fn nvrtc_version() -> Result<(i32, i32), BackendError> {
    crate::nvrtc::global().map(|n| n.version())
}

/// Compile `src` for `arch` with the backend's options
/// ([`compile_options`]), under the file name [`KERNELS_FILE_NAME`], with
/// the process's NVRTC ([`crate::nvrtc::global`]). A compile error is
/// `BackendError::Device` carrying NVRTC's log; a machine without NVRTC
/// gets [`crate::NO_NVRTC`] and the folders searched.
pub fn compile(src: &str, arch: &str) -> Result<Compiled, BackendError> {
    let nvrtc = crate::nvrtc::global()?;
    compile_with(&nvrtc, src, arch)
}

/// [`compile`] with a given NVRTC (one loaded by [`crate::nvrtc::Nvrtc::load`]
/// beside the process's, e.g. CUDA 13's next to CUDA 12's).
pub fn compile_with(
    nvrtc: &crate::nvrtc::Nvrtc,
    src: &str,
    arch: &str,
) -> Result<Compiled, BackendError> {
    let options = compile_options(arch);
    let out = nvrtc
        .compile(src, KERNELS_FILE_NAME, &options)
        .map_err(|e| match e {
            BackendError::Device(m) => BackendError::Device(format!("{m} (compiling for {arch})")),
            other => other,
        })?;
    if let Some(status) = out.error {
        return Err(BackendError::Device(format!(
            "NVRTC compile for {arch} failed ({status}, options {options:?}):\n{}",
            out.log.trim_end()
        )));
    }
    Ok(Compiled {
        ptx: out.ptx,
        log: out.log,
    })
}

/// One architecture's compile result (errors as text), computed once.
type PtxSlot = Arc<OnceLock<Result<Arc<Compiled>, String>>>;

/// [`compile`]d kernels per `compute_XY` architecture, once per process.
fn ptx_cache() -> &'static Mutex<HashMap<String, PtxSlot>> {
    static CACHE: OnceLock<Mutex<HashMap<String, PtxSlot>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// [`KERNELS_SRC`] compiled for `arch` (`"compute_90"`), with its log: the
/// path `Kernels::load` takes (compiled once per process, then cached;
/// different architectures may compile at the same time).
pub fn compiled_for(arch: &str) -> Result<Arc<Compiled>, BackendError> {
    let slot = {
        let mut cache = ptx_cache()
            .lock()
            .map_err(|_| BackendError::Device("PTX cache lock poisoned".into()))?;
        Arc::clone(cache.entry(arch.to_string()).or_default())
    };
    slot.get_or_init(|| {
        compile(KERNELS_SRC, arch)
            .map(Arc::new)
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(BackendError::Device)
}

/// The PTX of [`KERNELS_SRC`] for `arch` (`"compute_90"`), compiled once.
pub fn ptx_for(arch: &str) -> Result<String, BackendError> {
    compiled_for(arch).map(|c| c.ptx.clone())
}

/// The kernels loaded into one device context, with the image they came
/// from and every image tried before it (`kernel_load.rs`).
pub struct Kernels {
    funcs: HashMap<Kernel, Function>,
    image: String,
    tries: Vec<String>,
}

impl Kernels {
    pub(crate) fn new(funcs: HashMap<Kernel, Function>, image: String, tries: Vec<String>) -> Self {
        Kernels {
            funcs,
            image,
            tries,
        }
    }

    /// The kernels of device `ordinal`: loaded once per process and device
    /// ([`crate::kernel_load::load`]).
    pub(crate) fn load(dev: &dyn Device, ordinal: usize) -> Result<Arc<Kernels>, BackendError> {
        crate::kernel_load::load(dev, ordinal)
    }

    /// The image loaded: `cubin sm_90 (shipped sm_90.cubin.xz)`.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// Every image considered, in order, with what became of it (the last
    /// one `...: loaded`).
    pub fn tries(&self) -> &[String] {
        &self.tries
    }

    /// A loaded kernel.
    pub(crate) fn get(&self, k: Kernel) -> Result<&Function, BackendError> {
        self.funcs
            .get(&k)
            .ok_or_else(|| BackendError::Device(format!("kernel {} not loaded", k.name())))
    }
}
