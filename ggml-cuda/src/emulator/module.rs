//! The emulated driver's module load (`cuModuleLoadData`): it checks the
//! image it is given as a driver of the pretended version would, for the
//! pretended compute capability, before handing out the kernels (which run
//! as the CPU build of the same source, `emu_kernels`):
//!
//! - a cubin must be an ELF image for `sm_XY` of the device's major
//!   version with a minor not above the device's (sm_86 runs on 8.9, not
//!   on 8.0 or 9.0): else `CUDA_ERROR_NO_BINARY_FOR_GPU`;
//! - PTX must declare an ISA the pretended driver JIT-compiles
//!   ([`crate::ptx_isa::max_isa_for_driver`], or the configured
//!   `GGML_CUDA_EMULATOR_PTX_ISA`): else `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`;
//!   and a `.target` not above the device: else `CUDA_ERROR_NO_BINARY_FOR_GPU`;
//! - every kernel asked for must be in the image (`.text.NAME` in a cubin,
//!   `.entry NAME` in PTX): else `CUDA_ERROR_NOT_FOUND`, and compiled into
//!   the emulator;
//! - the image's own header must match what the loader says it is.
//!
//! Every image accepted is recorded ([`super::loaded_images`]), so tests
//! can tell which image a backend runs "from".

use ggml_core::BackendError;

use crate::driver::{ImageKind, ModuleImage};
use crate::ptx_isa::{self, isa_text};

/// Why the emulated driver refuses `image` on a device of compute
/// capability `cc` under driver `driver` (JIT limit `jit_isa`), or `Ok`.
pub(crate) fn check(
    image: &ModuleImage,
    names: &[&'static str],
    cc: (u32, u32),
    driver: i32,
    jit_isa: Option<ptx_isa::Isa>,
) -> Result<(), BackendError> {
    let refuse = |code: &str, why: String| {
        Err(BackendError::Device(format!(
            "cuModuleLoadData (emulated, CUDA driver {}, compute capability {}.{}): {code}: {why}",
            ptx_isa::driver_text(driver),
            cc.0,
            cc.1
        )))
    };
    let dev_sm = cc.0 * 10 + cc.1;
    let entries: Vec<String> = match image.kind {
        ImageKind::Cubin { sm } => {
            let info = match crate::cubin::parse(&image.bytes) {
                Ok(i) => i,
                Err(e) => return refuse("CUDA_ERROR_INVALID_IMAGE", e),
            };
            if info.sm != sm {
                return refuse(
                    "CUDA_ERROR_INVALID_IMAGE",
                    format!("the image is for sm_{}, not sm_{sm}", info.sm),
                );
            }
            if sm / 10 != cc.0 || sm % 10 > cc.1 {
                return refuse(
                    "CUDA_ERROR_NO_BINARY_FOR_GPU",
                    format!("a cubin for sm_{sm} does not run on sm_{dev_sm}"),
                );
            }
            info.kernels
        }
        ImageKind::Ptx { isa, target } => {
            if image.bytes.contains(&0) {
                return refuse("CUDA_ERROR_INVALID_PTX", "a NUL byte in the PTX".into());
            }
            let text = String::from_utf8_lossy(&image.bytes);
            let h = match ptx_isa::header(&text) {
                Ok(h) => h,
                Err(e) => return refuse("CUDA_ERROR_INVALID_PTX", e),
            };
            if (h.isa, h.target) != (isa, target) {
                return refuse(
                    "CUDA_ERROR_INVALID_PTX",
                    format!(
                        "the PTX declares ISA {} for sm_{}, not ISA {} for sm_{target}",
                        isa_text(h.isa),
                        h.target,
                        isa_text(isa)
                    ),
                );
            }
            match jit_isa {
                Some(max) if h.isa <= max => {}
                max => {
                    return refuse(
                        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
                        format!(
                            "PTX ISA {} is newer than this driver's {}",
                            isa_text(h.isa),
                            max.map_or("(none: older than CUDA 11)".into(), isa_text)
                        ),
                    )
                }
            }
            if h.target > dev_sm {
                return refuse(
                    "CUDA_ERROR_NO_BINARY_FOR_GPU",
                    format!("PTX for sm_{} does not run on sm_{dev_sm}", h.target),
                );
            }
            text.lines()
                .filter_map(|l| {
                    let rest = l.trim_start().strip_prefix(".visible .entry ")?;
                    Some(rest.split('(').next().unwrap_or(rest).trim().to_string())
                })
                .collect()
        }
    };
    let compiled = crate::emu_kernels::kernel_names();
    for &name in names {
        if !entries.iter().any(|e| e == name) {
            return refuse(
                "CUDA_ERROR_NOT_FOUND",
                format!("kernel {name} is not in the image ({})", image.origin),
            );
        }
        if !compiled.contains(&name) {
            return Err(BackendError::Device(format!(
                "kernel {name}: not compiled into the emulator"
            )));
        }
    }
    Ok(())
}
