//! # ggml-cuda
//!
//! The CUDA backend of ggml-core (`CUDA0`, `CUDA1`, ...), on
//! [`cudarc`](https://docs.rs/cudarc) with dynamic loading: the crate builds
//! and its tests run on machines without CUDA; a missing driver is an
//! ordinary run-time error ([`BackendError::NoDevice`]), never a panic and
//! never a `cfg`.
//!
//! ## Design
//!
//! - **Driver interface.** Every CUDA call goes through [`driver`]
//!   (`Device`, `Stream`, `Event`), implemented on `cudarc` and by the
//!   [`emulator`] (`GGML_CUDA_EMULATOR=1` or [`emulator::enable`]): an
//!   emulated device on which this backend and `kernels.cu` (compiled for
//!   the CPU, [`emu_kernels`]) run without a GPU, with a hazard detector.
//! - **Probing.** cudarc panics when a library it needs is missing, so every
//!   entry point first calls [`probe_driver`] / [`probe_libraries`], which
//!   only try to `dlopen` `libcuda.so` and `libnvrtc.so` and report
//!   `NoDevice("no CUDA device: libcuda.so (CUDA driver) not found")`.
//! - **Streams.** Each device has a compute stream and two copy streams
//!   (`n_copy_streams() == 2`): `Copy(0)` for uploads, `Copy(1)` for reads
//!   back to the host, so a read does not queue behind uploads.
//!   [`BackendStream::write_async`] queues a host-to-device copy on the compute
//!   stream and returns (the caller keeps the bytes valid until
//!   [`BackendStream::synchronize`], as the trait requires). Events
//!   (`record_event` / `wait_event`) are CUDA events taken from a per-device
//!   pool and re-recorded (no new driver event per record); waiting on an
//!   event of a non-CUDA backend is a no-op (that work is already done).
//! - **Synchronization.** Only [`BackendStream::synchronize`] (the end of a
//!   graph) synchronizes the whole device. Buffer reads and writes and
//!   `read_after_compute` (router id reads) wait for one event;
//!   [`BackendDiagnostics::pipeline_counters`] counts device synchronizations,
//!   launches and graph replays.
//! - **Buffers.** [`CudaBuffer`] is device memory (`cuMemAlloc`, freed on
//!   drop): `is_host() == false`, `base_ptr() == None`, read and written with
//!   memcpy on the stream. [`PinnedBuffer`] is page-locked host memory
//!   (`cuMemHostAlloc`), usable by the CPU backend, fast to copy from.
//!   [`CudaBackend::register_host`] page-locks an existing host range (a
//!   mapped GGUF file) with `cuMemHostRegister` where the driver allows it;
//!   where it does not, the caller keeps using pageable copies.
//! - **Kernels.** `kernels.cu` followed by the kernel families of
//!   `src/kernels/*.cu` (`kernels::KERNEL_PARTS`: int8 dot building blocks,
//!   flash attention, MMQ, MMVQ) is one plain CUDA C++ source without any
//!   `#include` (its own half/bfloat16 conversions, by bit manipulation),
//!   compiled by NVRTC once per process and GPU architecture (a PTX cache
//!   keyed by architecture), and loaded once per backend. Kernels take each
//!   tensor as a pointer plus ggml's `ne`/`nb`, so any strides work.
//! - **Id validation.** `get_rows`, `set_rows`, `add_id` and `mul_mat_id`
//!   check every id on the device; a bad id sets the op kind's bit in an
//!   error flag and is never used as an address. The flag is copied to
//!   page-locked memory just before the synchronize that ends the graph and
//!   checked after it (`err_flag.rs`): `synchronize` then returns
//!   [`BackendError::InvalidInput`] naming the op kind. Nothing inside a
//!   graph synchronizes for it.
//! - **Graphs** (`graphs.rs`). `compute` first plans a split's launches
//!   (kernel, geometry, parameters). The second time a split plans the same
//!   launches they are captured as a CUDA graph through the driver interface
//!   (the emulator records and replays them too); from then on an identical
//!   plan is one graph launch. Any change in shapes or pointers changes the
//!   plan and the split runs launch by launch again; the expert cache's slot
//!   maps are device data, so a replay serves any mapping. Disabled while an
//!   event timeline is recorded, and by `GGML_CUDA_DISABLE_GRAPHS=1`.
//! - **Bandwidth.** [`measure_h2d_bandwidth`] times pinned and pageable
//!   host-to-device copies with CUDA events (the `h2d-bandwidth` example,
//!   `scripts/gpu-check` step 4); it needs only the driver.
//! - **Read overhang.** No kernel reads past the end of a tensor or a slice
//!   of one: [`BackendDevice::read_overhang`] is 0.
//!
//! ## Supported ops
//!
//! F32/F16/BF16 sources for: add/sub/mul/div (ggml broadcasting), scale,
//! sqr, sqrt, silu, gelu, sigmoid, neg, relu, exp, swiglu/geglu/swiglu_oai
//! (fused and split), rms_norm, norm, sum_rows, mean, argmax, rope_ext
//! (normal and neox, partial `n_dims`, freq factors, YaRN), soft_max_ext
//! (scale, F32/F16 mask, ALiBi, sinks), cpy/cont/dup between F32, F16, BF16
//! (and I32 to I32) with any strides, get_rows (F32/F16/BF16/I32 and Q8_0,
//! Q4_0, Q4_K, Q5_K, Q6_K rows), set_rows (F32 into F32/F16/BF16, I32/I64
//! indices), concat, argsort, top_k, add_id, mul_mat / mul_mat_id and
//! flash_attn_ext.
//!
//! Weights of mul_mat / mul_mat_id and rows of get_rows: F32, F16, BF16,
//! Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
//! IQ4_XS, MXFP4. Quantized weights multiply activations quantized once per
//! op on the device to 8 bits (`k_quantize_q8_1`, rounded as the CPU
//! backend's Q8_0 / Q8_K): up to 8 columns (decode) with MMVQ (`k_mmvq`,
//! `k_mmvq_id`: weight rows loaded straight into registers, 1, 2 or 4 rows
//! per warp by type and row length, `__dp4a`, columns of one expert grouped;
//! `k_mmvq_id_glu` fuses gate and up with the GLU), more with MMQ int8 tensor-core tiles (`k_mmq`: 64 or
//! 128 rows x 16-64 columns per shape, raw blocks staged by `cp.async`
//! double-buffered, `ldmatrix` fragments, `mma.sync` m16n8k32, split-k
//! with `k_mmq_reduce` when the tiles do not fill the SMs; prompt
//! mul_mat_id grouped by expert on the device: `k_moe_group` + `k_mmq_id`
//! on the same core).
//! Float weights take a float mat-vec (activations rounded to F16/BF16 as
//! the CPU does) or the tiled float GEMM (`k_mul_mat_tiled`; prompt
//! mul_mat_id with float experts: `k_mul_mat_id_vec`).
//!
//! flash_attn_ext: the split-KV vector kernels (`k_fa_vec_*` + `k_fa_combine`;
//! decode, and prompts the tensor-core kernel does not take) and the
//! tensor-core kernels for prompts with F16/BF16 K/V of head dimension 64 or
//! 128 (`k_fa_mma_*`): F32/F16 mask, ALiBi, softcap, sinks, F32/F16/BF16 or
//! Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL K, V of any weight type, head dimensions
//! up to 576 for K and 512 for V (MLA).
//!
//! Not supported (the scheduler keeps these on the CPU): quantized
//! destinations of cpy, flash attention with a K-quant K cache, other quant
//! types.
//!
//! [`BackendStream::write_async`]: ggml_core::BackendStream::write_async
//! [`BackendStream::synchronize`]: ggml_core::BackendStream::synchronize
//! [`BackendDevice::read_overhang`]: ggml_core::BackendDevice::read_overhang
//! [`BackendDiagnostics::pipeline_counters`]: ggml_core::BackendDiagnostics::pipeline_counters

#![warn(missing_docs)]

pub mod backend;
pub mod bandwidth;
mod buffer;
pub mod cubin;
pub mod driver;
pub mod emu_kernels;
pub mod emulator;
mod err_flag;
pub mod fusion;
mod graphs;
pub mod kernel_load;
pub mod kernels;
pub mod libraries;
pub mod nvrtc;
pub mod ptx_isa;
pub mod shipped;

pub use backend::CudaBackend;
pub use bandwidth::{measure_h2d_bandwidth, H2dBandwidth};
pub use buffer::{CudaBuffer, HostRegistration, PinnedBuffer};
use ggml_core::BackendError;

use std::sync::OnceLock;

/// The error for a machine without the CUDA driver library.
pub const NO_DRIVER: &str = "no CUDA device: libcuda.so (CUDA driver) not found";
/// The error for a machine with the driver but without NVRTC.
pub const NO_NVRTC: &str = "no CUDA device: libnvrtc.so (NVRTC, needed for the kernels) not found";

/// Whether the CUDA driver library can be loaded (checked once).
pub fn probe_driver() -> Result<(), BackendError> {
    static DRIVER: OnceLock<bool> = OnceLock::new();
    // SAFETY: `is_culib_present` only tries `dlopen` on candidate library
    // names and drops what it opened; it calls no CUDA function.
    let ok = *DRIVER.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() });
    if ok {
        Ok(())
    } else {
        Err(BackendError::NoDevice(NO_DRIVER.into()))
    }
}

/// Whether the driver and NVRTC libraries can both be loaded (checked once).
pub fn probe_libraries() -> Result<(), BackendError> {
    probe_driver()?;
    probe_nvrtc()
}

/// Whether an NVRTC library (CUDA 12 or 13) can be found and loaded: see
/// [`libraries`] for where it is looked for. NVRTC needs no GPU and no
/// driver: kernels compile on any machine that has it. Only success is
/// remembered, so a library installed later (as the NVRTC test does with a
/// wheel, through [`nvrtc::use_library`]) is found by the next call.
pub fn probe_nvrtc() -> Result<(), BackendError> {
    nvrtc::global().map(|_| ())
}

/// The NVRTC library in use, for summaries and `--list-devices`:
/// `NVRTC 13.0 (/usr/local/cuda/lib64/libnvrtc.so.13, from /usr/local/cuda)`.
pub fn nvrtc_description() -> Result<String, BackendError> {
    nvrtc::global().map(|n| n.describe())
}

/// The CUDA driver's major version (12 for a CUDA 12.x driver), `None`
/// without a driver.
pub fn driver_major() -> Option<u32> {
    driver_version().map(|v| v as u32 / 1000)
}

/// The CUDA driver's version as `cuDriverGetVersion` writes it (12040 for
/// CUDA 12.4), `None` without a driver.
pub fn driver_version() -> Option<i32> {
    probe_driver().ok()?;
    let mut v = 0;
    // SAFETY: the driver library is loadable (probed above); one valid
    // out-pointer. cuDriverGetVersion needs no cuInit.
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    (r == cudarc::driver::sys::cudaError_enum::CUDA_SUCCESS && v > 0).then_some(v)
}

/// Number of CUDA devices; a clean `NoDevice` error without CUDA. With the
/// emulator enabled ([`emulator::enabled`]), the emulated devices'.
pub fn cuda_device_count() -> Result<usize, BackendError> {
    if emulator::enabled() {
        return Ok(emulator::device_count());
    }
    probe_driver()?;
    cudarc::driver::result::init()
        .map_err(|e| BackendError::NoDevice(format!("no CUDA device: cuInit failed: {e}")))?;
    let n = cudarc::driver::result::device::get_count()
        .map_err(|e| BackendError::NoDevice(format!("no CUDA device: {e}")))?;
    Ok(n.max(0) as usize)
}

/// Why CUDA cannot be used here (`None` when a device is usable): the
/// reason GPU tests print when they skip.
pub fn unavailable_reason() -> Option<String> {
    if emulator::enabled() {
        return None;
    }
    // the driver alone opens CUDA0: the kernels are shipped compiled
    if let Err(e) = probe_driver() {
        return Some(e.to_string());
    }
    match cuda_device_count() {
        Ok(0) => Some("no CUDA device: the driver reports 0 devices".into()),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

pub(crate) fn dev_err(what: &str, e: cudarc::driver::DriverError) -> BackendError {
    use cudarc::driver::sys::cudaError_enum as E;
    if e.0 == E::CUDA_ERROR_OUT_OF_MEMORY {
        BackendError::OutOfMemory(format!("{what}: {e}"))
    } else {
        BackendError::Device(format!("{what}: {e}"))
    }
}
