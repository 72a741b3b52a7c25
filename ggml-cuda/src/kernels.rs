//! The CUDA C++ kernel source, its kernel names, and the process-wide PTX
//! cache: NVRTC compiles the source once per GPU architecture per process;
//! each backend loads the PTX into its context once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};
use ggml_core::BackendError;

/// The kernel source (`kernels.cu`), compiled at run time by NVRTC. It uses
/// no `#include`, so no CUDA toolkit headers are needed.
pub const KERNELS_SRC: &str = include_str!("kernels.cu");

/// Every kernel the Rust side launches (a test checks each is defined).
pub const KERNEL_NAMES: &[&str] = &[
    "k_binary",
    "k_unary",
    "k_glu",
    "k_cpy",
    "k_to_f32",
    "k_get_rows",
    "k_set_rows",
    "k_concat",
    "k_row_reduce",
    "k_argmax",
    "k_soft_max",
    "k_rope",
    "k_rank_sort",
    "k_add_id",
    "k_mul_mat_vec",
    "k_mul_mat_id_vec",
    "k_mul_mat_tiled",
];

/// Warps per block of the matrix-vector kernels (`MV_WARPS` in the source).
pub const MV_WARPS: u32 = 4;
/// Tile edge of `k_mul_mat_tiled` (`GT` in the source).
pub const GEMM_TILE: u32 = 16;

/// PTX per `compute_XY` architecture, compiled once per process.
fn ptx_cache() -> &'static Mutex<HashMap<String, Result<String, String>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Result<String, String>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Compile (or fetch from the cache) the PTX for `arch` (`"compute_90"`).
pub fn ptx_for(arch: &str) -> Result<String, BackendError> {
    let mut cache = ptx_cache()
        .lock()
        .map_err(|_| BackendError::Device("PTX cache lock poisoned".into()))?;
    let entry = cache.entry(arch.to_string()).or_insert_with(|| {
        let opts = CompileOptions {
            options: vec![format!("--gpu-architecture={arch}")],
            name: Some("ggml_cuda_kernels.cu".into()),
            ..Default::default()
        };
        compile_ptx_with_opts(KERNELS_SRC, opts)
            .map(|p| p.to_src())
            .map_err(|e| format!("NVRTC compile for {arch} failed: {e:?}"))
    });
    entry.clone().map_err(BackendError::Device)
}

/// The kernels loaded into one device context, by name.
pub struct Kernels {
    funcs: HashMap<&'static str, CudaFunction>,
}

impl Kernels {
    /// Compile (once per process) and load every kernel into `ctx`.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Kernels, BackendError> {
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| BackendError::Device(format!("compute capability: {e}")))?;
        let arch = format!("compute_{major}{minor}");
        // An NVRTC older than the device may not know its architecture:
        // fall back to a baseline the driver can JIT forward.
        let ptx = match ptx_for(&arch) {
            Ok(p) => p,
            Err(first) => ptx_for("compute_70")
                .map_err(|e| BackendError::Device(format!("{first}; fallback compute_70: {e}")))?,
        };
        let module = ctx
            .load_module(Ptx::from_src(ptx))
            .map_err(|e| BackendError::Device(format!("loading the kernel PTX: {e}")))?;
        let mut funcs = HashMap::new();
        for &name in KERNEL_NAMES {
            let f = module
                .load_function(name)
                .map_err(|e| BackendError::Device(format!("kernel {name}: {e}")))?;
            funcs.insert(name, f);
        }
        Ok(Kernels { funcs })
    }

    /// A kernel by name.
    pub fn get(&self, name: &str) -> Result<&CudaFunction, BackendError> {
        self.funcs
            .get(name)
            .ok_or_else(|| BackendError::Device(format!("no kernel named {name}")))
    }
}
