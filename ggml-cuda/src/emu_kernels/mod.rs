//! Placeholder for emuk's CPU execution of `kernels.cu` (branch `emuk`),
//! with the contract's signatures only: every launch fails, naming the
//! missing piece. Replaced wholesale by emuk's module at the merge.

use std::ffi::c_void;

/// Why a launch did not run.
#[derive(Debug)]
pub enum LaunchError {
    /// No CPU build of the kernel in this emulator.
    UnknownKernel(String),
}

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchError::UnknownKernel(k) => {
                write!(f, "kernel {k}: CPU kernels not merged yet (branch emuk)")
            }
        }
    }
}

impl std::error::Error for LaunchError {}

/// A launch run on the calling thread (not available in this placeholder).
pub fn launch(
    kernel: &str,
    _grid: [u32; 3],
    _block: [u32; 3],
    _dynamic_shared_bytes: u32,
    _params: &[*const c_void],
) -> Result<(), LaunchError> {
    Err(LaunchError::UnknownKernel(kernel.to_string()))
}

/// Kernels available: the backend's names, so loading succeeds and the
/// memory/stream/event paths can be tested before the merge.
pub fn kernel_names() -> &'static [&'static str] {
    crate::kernels::KERNEL_NAMES
}

/// Static shared memory of a kernel (unknown in this placeholder).
pub fn static_shared_bytes(_kernel: &str) -> Option<usize> {
    None
}
