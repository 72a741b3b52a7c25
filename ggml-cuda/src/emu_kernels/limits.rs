//! The launch limits of a real GPU (H100/H200, compute capability 9.0),
//! checked before an emulated launch runs anything, and the per-kernel
//! opt-in for large dynamic shared memory (CUDA's
//! `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use super::error::LaunchError;
use super::table::{self, KernelInfo};

/// Threads per block.
pub const MAX_THREADS_PER_BLOCK: u64 = 1024;
/// Block dimensions x, y, z.
pub const MAX_BLOCK_DIM: [u32; 3] = [1024, 1024, 64];
/// Grid dimensions x, y, z.
pub const MAX_GRID_DIM: [u32; 3] = [(1 << 31) - 1, 65535, 65535];
/// Static shared memory per block (48 KiB).
pub const MAX_STATIC_SHARED: u64 = 48 * 1024;
/// Shared memory per block without an opt-in: static + dynamic (48 KiB).
pub const DEFAULT_SHARED: u64 = 48 * 1024;
/// Shared memory per block with the opt-in: static + dynamic (227 KiB).
pub const MAX_SHARED_OPT_IN: u64 = 227 * 1024;

/// Per-kernel opt-ins (kernel name -> max dynamic shared bytes).
fn opt_ins() -> &'static Mutex<HashMap<&'static str, u64>> {
    static OPT: OnceLock<Mutex<HashMap<&'static str, u64>>> = OnceLock::new();
    OPT.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Allow launches of `kernel` with up to `bytes` of dynamic shared memory
/// (as `cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)`); static +
/// `bytes` must fit [`MAX_SHARED_OPT_IN`]. Without it, static + dynamic must
/// fit [`DEFAULT_SHARED`].
pub fn set_max_dynamic_shared_bytes(kernel: &str, bytes: u32) -> Result<(), LaunchError> {
    let info = table::find(kernel).ok_or_else(|| LaunchError::UnknownKernel(kernel.into()))?;
    let total = info.static_shared + u64::from(bytes);
    if total > MAX_SHARED_OPT_IN {
        return Err(LaunchError::Limit {
            kernel: kernel.into(),
            limit: format!(
                "max dynamic shared memory {bytes} bytes + {} static = {total} bytes exceeds \
                 the opt-in maximum of {MAX_SHARED_OPT_IN} bytes (227 KiB) per block",
                info.static_shared
            ),
        });
    }
    opt_ins()
        .lock()
        .map_err(|_| LaunchError::Resources {
            kernel: kernel.into(),
            detail: "shared-memory opt-in table lock poisoned".into(),
        })?
        .insert(info.name, u64::from(bytes));
    Ok(())
}

/// Check one launch of `info` against the limits; the error names the
/// kernel and the limit.
pub(super) fn check(
    info: &KernelInfo,
    grid: [u32; 3],
    block: [u32; 3],
    dynamic_shared: u32,
) -> Result<(), LaunchError> {
    let fail = |limit: String| {
        Err(LaunchError::Limit {
            kernel: info.name.into(),
            limit,
        })
    };
    const AXES: [char; 3] = ['x', 'y', 'z'];
    let threads: u64 = block.iter().map(|&b| u64::from(b)).product();
    if threads > MAX_THREADS_PER_BLOCK {
        return fail(format!(
            "{threads} threads per block (block {block:?}) exceeds the limit of \
             {MAX_THREADS_PER_BLOCK} threads per block"
        ));
    }
    for i in 0..3 {
        if block[i] == 0 || grid[i] == 0 {
            return fail(format!(
                "grid {grid:?} / block {block:?} has a zero dimension (invalid configuration)"
            ));
        }
        if block[i] > MAX_BLOCK_DIM[i] {
            return fail(format!(
                "block dimension {} = {} exceeds the limit of {}",
                AXES[i], block[i], MAX_BLOCK_DIM[i]
            ));
        }
        if grid[i] > MAX_GRID_DIM[i] {
            return fail(format!(
                "grid dimension {} = {} exceeds the limit of {}",
                AXES[i], grid[i], MAX_GRID_DIM[i]
            ));
        }
    }
    if let Some(m) = info.max_threads {
        if threads > u64::from(m) {
            return fail(format!(
                "{threads} threads per block exceeds the kernel's __launch_bounds__ of {m} \
                 threads per block"
            ));
        }
    }
    if info.static_shared > MAX_STATIC_SHARED {
        return fail(format!(
            "static shared memory of {} bytes exceeds the limit of {MAX_STATIC_SHARED} bytes \
             (48 KiB) per block",
            info.static_shared
        ));
    }
    let dynamic = u64::from(dynamic_shared);
    if dynamic > 0 {
        let opted = opt_ins()
            .lock()
            .map_err(|_| LaunchError::Resources {
                kernel: info.name.into(),
                detail: "shared-memory opt-in table lock poisoned".into(),
            })?
            .get(info.name)
            .copied();
        let allowed = opted.unwrap_or(DEFAULT_SHARED.saturating_sub(info.static_shared));
        if dynamic > allowed {
            let how = match opted {
                Some(_) => "the kernel's opt-in (set_max_dynamic_shared_bytes)".to_string(),
                None => format!(
                    "48 KiB minus {} bytes of static shared memory, without an opt-in \
                     (set_max_dynamic_shared_bytes, up to 227 KiB)",
                    info.static_shared
                ),
            };
            return fail(format!(
                "dynamic shared memory of {dynamic} bytes exceeds the limit of {allowed} bytes \
                 per block ({how})"
            ));
        }
    }
    Ok(())
}
