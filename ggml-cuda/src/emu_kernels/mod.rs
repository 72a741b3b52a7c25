//! # CPU execution of CUDA kernels (the emulated device's kernels)
//!
//! [`launch`] runs a kernel of `kernels.cu` (or of the test-only
//! `emu/test_kernels.cu`) on the calling CPU thread with CUDA semantics, so
//! the real backend and the real kernel source can be exercised in CI
//! without a GPU. `build.rs` compiles both sources with the host C++
//! compiler under an emulation prelude (`emu/prelude.h`) and generates, for
//! each `extern "C" __global__` kernel, a trampoline that unpacks CUDA-style
//! `void** params` into the typed call; NVRTC still gets `kernels.cu`
//! unchanged.
//!
//! ## Execution model
//!
//! - **Launch flow.** [`launch`] looks the kernel up, checks the launch
//!   limits of a real GPU ([`limits`]: threads per block, block and grid
//!   dimensions, static and dynamic shared memory, `__launch_bounds__`)
//!   before anything runs, then hands the trampoline and `params` to the C++
//!   runtime (`emu/runtime.cpp`), which runs every block of the grid in turn
//!   (x fastest, then y, z) and returns when the grid is done.
//! - **Threads are fibers.** In each block, every one of the
//!   `blockDim.x*y*z` threads is a fiber: a user-mode context with its own
//!   64 KiB stack (a guard page below it; the stacks are mapped once per OS
//!   thread and reused by every launch; a stack is taken when a thread first
//!   runs and given back when it exits). `threadIdx`, `blockIdx`,
//!   `blockDim`, `gridDim` are per-OS-thread variables the runtime sets on
//!   every switch; `warpSize` is 32 and warps are 32 consecutive linear
//!   thread ids, as on a GPU. A fiber runs until it exits or must wait; a
//!   switch is a few instructions of assembly (x86_64 System V, aarch64)
//!   saving only callee-saved registers, with `ucontext` as the fallback on
//!   other targets (or when built with `GGML_CUDA_EMU_UCONTEXT` set).
//! - **Shared memory.** `__shared__` variables are `static __thread`: one
//!   copy per OS thread, shared by the fibers of the block it runs (blocks
//!   of one launch run one after another, so they never overlap).
//!   `extern __shared__` arrays point to a per-OS-thread buffer of the
//!   launch's `dynamic_shared_bytes` (256-byte aligned). Like on a GPU,
//!   shared memory is not cleared between blocks.
//! - **`__syncthreads`** (and `_count`, `_and`, `_or`) is a true block
//!   barrier: a thread waits until every thread of the block has arrived at
//!   the same `__syncthreads` (same source line); the last to arrive
//!   releases the others.
//! - **Warps in lockstep.** `__shfl_sync`, `__shfl_up_sync`,
//!   `__shfl_down_sync`, `__shfl_xor_sync` (with `width`), `__ballot_sync`,
//!   `__all_sync`, `__any_sync` and `__syncwarp` wait until every lane named
//!   in the mask has reached the call; the last lane computes every lane's
//!   result from the values deposited in a per-warp area, then all go on. So
//!   no lane reads before every lane has written. The sm_80 reductions
//!   (`__reduce_add_sync`, `_min`, `_max` on int and unsigned, `_and`, `_or`,
//!   `_xor`) work the same way. A source lane outside the
//!   mask (undefined on a GPU) yields the caller's own value.
//!   `__activemask()` is the set of lanes of the last collective this lane
//!   completed (all lanes of the warp before any): convergence as the
//!   program last established it.
//! - **Deadlocks are errors.** When no fiber of a block can run and some
//!   have not exited (a `__syncthreads` that some threads skip or reach at
//!   different lines, a shuffle waiting for a lane that exited), the launch
//!   stops with [`LaunchError::Deadlock`] describing who waits where,
//!   instead of hanging as a GPU would. This is stricter than the hardware
//!   in one case: PTX's `bar.sync` does not wait for threads that have
//!   exited, so `if (i >= n) return; ... __syncthreads();` completes on a
//!   GPU; CUDA C++ makes a `__syncthreads` that not every thread of the
//!   block reaches undefined, and the emulator reports it. A lane that calls a collective with
//!   a mask that does not name it is [`LaunchError::Misuse`].
//! - **Atomics** (`atomicAdd`, `Sub`, `Or`, `And`, `Xor`, `Max`, `Min`,
//!   `Exch`, `CAS`, `Inc`, `Dec` on int, unsigned, long long, unsigned long
//!   long; `atomicAdd` on float and double; `atomicExch` on float) are real
//!   sequentially consistent atomic operations, so they stay correct if
//!   several host threads launch at once.
//! - **Intrinsics.** `__ldg`, `__dp4a` (signed and unsigned), `__expf`,
//!   `__logf`, `__sinf`, `__cosf`, `__powf`, `__fdividef`, `rsqrtf`,
//!   `__saturatef`, bit casts (`__float_as_int`, ...), `__popc`, `__clz`,
//!   `__ffs`, `min`/`max`, `__threadfence`, the vector types (`float2`,
//!   `float4`, `int2`, `int4`, `uint2`, `uint4`, `char4`, `uchar4`, with
//!   CUDA's alignment, and `make_*`); `__launch_bounds__`,
//!   `__restrict__`, `__forceinline__` and `#pragma unroll` compile (the
//!   latter is ignored).
//!
//! ## Not emulated
//!
//! No memory model weaker than sequential consistency (every write is
//! visible to the next read of any thread, so a missing `__threadfence` or a
//! race between threads of a block that a GPU could expose may pass here);
//! no timing, no clock, no bank conflicts, no caches, no occupancy, no
//! concurrency between blocks; fast-math intrinsics run at full precision
//! and `a*b+c` is not fused (`-ffp-contract=off`; NVCC/NVRTC fuse by default,
//! so the last bits may differ from a GPU's);
//! device `printf` prints from the host. Static shared memory counts the
//! `__shared__` variables of the kernel's body and of the `__device__`
//! functions it calls (found by name, transitively); `__shared__` at file
//! scope is rejected by the build (its size could not be attributed).
//!
//! ## Speed
//!
//! Measured with `cargo test --release -p ggml-cuda --test emu_kernels timing
//! -- --nocapture` (`timing_of_representative_launches`, x86_64, on the
//! shared 2-core development machine at a load average near 10, so upper
//! bounds):
//!
//! - **17-26 million fiber switches per second** in `t_shuffle_loop`
//!   (16384 threads x 200 `__shfl_xor_sync`): 40-60 ns per lane per
//!   shuffle, the switch and the collective's bookkeeping together. The
//!   switch alone is a dozen instructions (no system call; `swapcontext`
//!   would make a `sigprocmask` system call per switch).
//! - `k_mul_mat_vec` on a 2048 x 2048 Q8_0 matrix (2048 warps, five
//!   shuffles each): 50-90 ms, mostly the kernel's own dequantization.
//! - `k_unary` over 2^20 elements (4096 blocks x 256 threads, no barrier):
//!   about 45 ms, about 40 ns per thread including its fiber start. A fiber
//!   that exits hands its (cache-warm) stack to the next thread started, so
//!   barrier-free kernels run on one stack.
//! - Whole models: with branch `emurt` merged, `llama/tests/model_cuda.rs`
//!   (13 fixtures on the emulated CUDA0) passed in 100 s of test time on the
//!   same loaded machine. `perf` on its slowest fixture: about 60% of the
//!   time in the emulator (`emu_warp_op` 31%, switches, fiber starts and
//!   parameter unpacking), mostly the five shuffles of each
//!   `k_mul_mat_vec` warp sum over short rows; the kernels' own work is the
//!   rest.
//!
//! ## Without a C++ compiler
//!
//! The crate still builds; [`launch`] then returns
//! [`LaunchError::Unavailable`] (`"emulator unavailable: <reason>"`, also
//! [`unavailable_reason`]) after the limit checks, and the emulator tests
//! print `skipped: <reason>`.

mod error;
pub mod limits;
mod table;

use core::ffi::c_void;
use std::sync::OnceLock;

pub use error::LaunchError;
pub use limits::set_max_dynamic_shared_bytes;

/// Why the emulator cannot run kernels here (`None` when it can): the
/// build found no C++ compiler.
pub fn unavailable_reason() -> Option<&'static str> {
    table::UNAVAILABLE
}

/// The kernels of `kernels.cu` that [`launch`] can run.
pub fn kernel_names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| {
        table::KERNELS
            .iter()
            .filter(|k| !k.test_only)
            .map(|k| k.name)
            .collect()
    })
}

/// The test-only kernels of `emu/test_kernels.cu` (never sent to NVRTC),
/// which [`launch`] also finds by name.
pub fn test_kernel_names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| {
        table::KERNELS
            .iter()
            .filter(|k| k.test_only)
            .map(|k| k.name)
            .collect()
    })
}

/// Bytes of static `__shared__` memory of `kernel` (computed at build time
/// from its declarations; checked against the C++ compiler's `sizeof`).
pub fn static_shared_bytes(kernel: &str) -> Option<usize> {
    table::find(kernel).map(|k| k.static_shared as usize)
}

/// The parameters of `kernel` as written in its source (`"const u8* a"`).
pub fn kernel_params(kernel: &str) -> Option<&'static [&'static str]> {
    table::find(kernel).map(|k| k.params)
}

/// Fiber context switches made by launches on the calling thread so far.
pub fn context_switches() -> u64 {
    #[cfg(ggml_cuda_emu)]
    {
        // SAFETY: reads a per-thread counter; no arguments.
        unsafe { ffi::emu_context_switches() }
    }
    #[cfg(not(ggml_cuda_emu))]
    {
        0
    }
}

/// The compute capability (x10: 750, 800, 900) the emulated kernels take
/// their architecture-dependent paths for: the tensor-core instructions
/// of sm_80 (`mma.sync` m16n8k32 int8, m16n8k16 f16) or their sm_75
/// composition (m8n8k16 int8, m16n8k8 f16). Process-wide, default 900,
/// read once when a launch starts: every lane of a launch takes the same
/// path (lanes of one warp reading different values would meet at
/// different warp collectives). The two give the same bits (integer
/// products; the same f32 summation order), so launches on other threads
/// are unaffected in their results; tests set it to run the sm_75 paths.
pub fn set_emulated_arch(arch: u32) {
    #[cfg(ggml_cuda_emu)]
    {
        // SAFETY: stores an int in the runtime's atomic; no pointers.
        unsafe { ffi::emu_set_arch(arch as i32) }
    }
    #[cfg(not(ggml_cuda_emu))]
    {
        let _ = arch;
    }
}

/// The compute capability set by [`set_emulated_arch`] (900 by default).
pub fn emulated_arch() -> u32 {
    #[cfg(ggml_cuda_emu)]
    {
        // SAFETY: reads the runtime's atomic; no arguments.
        unsafe { ffi::emu_arch() as u32 }
    }
    #[cfg(not(ggml_cuda_emu))]
    {
        900
    }
}

/// A CUDA launch run on the calling CPU thread, blocking until the grid is
/// done. `params` follows CUDA's kernelParams convention: `params[i]` points
/// to the value of the kernel's i-th parameter (a device pointer is a `u64`
/// holding a host address in the emulator; `struct T4` is the `#[repr(C)]`
/// ne/nb pair; ints, long longs, floats by value). The limits are checked
/// first ([`limits`]); an error names the kernel and the limit.
///
/// # Safety
///
/// As for a CUDA launch: `params` has one pointer per kernel parameter
/// (the count is checked), each pointing to a live value of that
/// parameter's type, and every address the kernel reads or writes through
/// its pointer parameters is valid host memory for the extents the kernel
/// touches, not accessed by other threads during the launch except through
/// atomics.
pub unsafe fn launch(
    kernel: &str,
    grid: [u32; 3],
    block: [u32; 3],
    dynamic_shared_bytes: u32,
    params: &[*const c_void],
) -> Result<(), LaunchError> {
    let info = table::find(kernel).ok_or_else(|| LaunchError::UnknownKernel(kernel.into()))?;
    limits::check(info, grid, block, dynamic_shared_bytes)?;
    if params.len() != info.params.len() {
        return Err(LaunchError::Params {
            kernel: kernel.into(),
            problem: format!(
                "{} parameters given, the kernel takes {} ({})",
                params.len(),
                info.params.len(),
                info.params.join(", ")
            ),
        });
    }
    if let Some(i) = params.iter().position(|p| p.is_null()) {
        return Err(LaunchError::Params {
            kernel: kernel.into(),
            problem: format!(
                "params[{i}] ({}) is a null pointer; it must point to the value",
                info.params[i]
            ),
        });
    }
    let tramp = match info.tramp {
        Some(t) => t,
        None => {
            return Err(LaunchError::Unavailable(
                table::UNAVAILABLE
                    .unwrap_or("emulator unavailable: kernel not compiled")
                    .into(),
            ))
        }
    };
    // SAFETY: the caller guarantees `params` and the memory the kernel
    // touches (this function's contract); the count and non-null-ness were
    // checked above, and the limits (at most 1024 threads, no zero
    // dimension) that the runtime relies on.
    unsafe { ffi::run(info.name, tramp, grid, block, dynamic_shared_bytes, params) }
}

#[cfg(ggml_cuda_emu)]
mod ffi {
    //! The C++ runtime's entry points (`emu/runtime.cpp`).
    use core::ffi::{c_char, c_int, c_void};

    use super::table::Trampoline;
    use super::LaunchError;

    unsafe extern "C" {
        fn emu_launch(
            tramp: Trampoline,
            grid: *const u32,
            block: *const u32,
            dyn_bytes: usize,
            params: *const *mut c_void,
            err: *mut c_char,
            err_len: usize,
        ) -> c_int;
        pub(super) fn emu_context_switches() -> u64;
        pub(super) fn emu_set_arch(arch: c_int);
        pub(super) fn emu_arch() -> c_int;
    }

    /// Run a checked launch; map the runtime's failure codes to errors.
    ///
    /// # Safety
    ///
    /// As [`super::launch`], with the limits already checked.
    pub(super) unsafe fn run(
        kernel: &str,
        tramp: Trampoline,
        grid: [u32; 3],
        block: [u32; 3],
        dynamic_shared: u32,
        params: &[*const c_void],
    ) -> Result<(), LaunchError> {
        let mut err = [0 as c_char; 1024];
        // SAFETY: grid and block are 3-element arrays, `params` has one
        // pointer per kernel parameter (checked by the caller), `err` is
        // writable for its length and NUL-terminated by the runtime.
        let rc = unsafe {
            emu_launch(
                tramp,
                grid.as_ptr(),
                block.as_ptr(),
                dynamic_shared as usize,
                params.as_ptr() as *const *mut c_void,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        let bytes: Vec<u8> = err
            .iter()
            .map(|&c| c as u8)
            .take_while(|&b| b != 0)
            .collect();
        let detail = String::from_utf8_lossy(&bytes).into_owned();
        let kernel = kernel.to_string();
        match rc {
            0 => Ok(()),
            1 => Err(LaunchError::Deadlock { kernel, detail }),
            2 => Err(LaunchError::Misuse { kernel, detail }),
            _ => Err(LaunchError::Resources { kernel, detail }),
        }
    }
}

#[cfg(not(ggml_cuda_emu))]
mod ffi {
    //! No C++ runtime was built: launches report why.
    use core::ffi::c_void;

    use super::table::Trampoline;
    use super::LaunchError;

    /// Always [`LaunchError::Unavailable`].
    ///
    /// # Safety
    ///
    /// Nothing is run; safe to call with anything.
    pub(super) unsafe fn run(
        _kernel: &str,
        _tramp: Trampoline,
        _grid: [u32; 3],
        _block: [u32; 3],
        _dynamic_shared: u32,
        _params: &[*const c_void],
    ) -> Result<(), LaunchError> {
        Err(LaunchError::Unavailable(
            super::table::UNAVAILABLE
                .unwrap_or("emulator unavailable")
                .into(),
        ))
    }
}
