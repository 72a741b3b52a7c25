//! Picking and loading the kernel image of a device, once per process and
//! device (every backend of the device shares the loaded kernels).
//!
//! The candidates, in order, for a device of compute capability `X.Y`
//! under a driver of CUDA version `D` ([`plan`]):
//!
//! 1. the shipped cubin of the same major with the highest minor not above
//!    `Y` ([`crate::shipped`]; sm_86 serves 8.6 and 8.9);
//! 2. a cubin for `sm_XY` compiled by NVRTC at run time, where NVRTC is
//!    found (an architecture with no shipped cubin, or a cubin the driver
//!    refused);
//! 3. the shipped `compute_75` PTX, its `.version` written as the newest
//!    PTX ISA the driver accepts ([`crate::ptx_isa::max_isa_for_driver`],
//!    capped at the ISA NVRTC wrote), then, if the driver refuses that, at
//!    the floor ISA `scripts/ship-kernels` checked it assembles at (8.0:
//!    every CUDA 12 driver);
//! 4. only when the shipped images are stale (another kernel source):
//!    NVRTC's PTX for `compute_75`, at the driver's ISA.
//!
//! A candidate that cannot be made (no NVRTC, no such image) or that the
//! driver refuses is one named try; the next one is tried. The kernels
//! report the image loaded and every try ([`crate::kernels::Kernels`]); a
//! device none loads on gets an error naming every try.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use ggml_core::BackendError;

use crate::driver::{Device, Function, ImageKind, ModuleImage};
use crate::kernels::{Kernel, Kernels, KERNELS_SRC, KERNEL_NAMES};
use crate::ptx_isa::{self, isa_text, Isa};
use crate::shipped::{self, ShippedImage};

/// One way to get a kernel image.
#[derive(Clone, Debug)]
pub enum Candidate {
    /// A shipped cubin.
    ShippedCubin(ShippedImage),
    /// NVRTC's cubin for `sm_XY` (XY).
    NvrtcCubin(u32),
    /// The shipped PTX with its `.version` written as this ISA.
    ShippedPtx(ShippedImage, Isa),
    /// NVRTC's PTX for `compute_XY` (XY), its `.version` lowered to at most
    /// this ISA.
    NvrtcPtx(u32, Option<Isa>),
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Candidate::ShippedCubin(i) => write!(f, "cubin sm_{} (shipped {})", i.arch, i.file),
            Candidate::NvrtcCubin(sm) => write!(f, "cubin sm_{sm} (NVRTC at run time)"),
            Candidate::ShippedPtx(i, isa) => write!(
                f,
                "PTX compute_{} ISA {} (shipped {})",
                i.arch,
                isa_text(*isa),
                i.file
            ),
            Candidate::NvrtcPtx(a, _) => write!(f, "PTX compute_{a} (NVRTC at run time)"),
        }
    }
}

impl Candidate {
    /// The image, or why it cannot be had.
    pub fn image(&self) -> Result<ModuleImage, String> {
        match self {
            Candidate::ShippedCubin(i) => Ok(ModuleImage {
                kind: ImageKind::Cubin { sm: i.arch },
                bytes: i.bytes()?,
                origin: format!("shipped {}", i.file),
            }),
            Candidate::ShippedPtx(i, isa) => {
                let text = String::from_utf8(i.bytes()?)
                    .map_err(|_| format!("{} is not UTF-8 text", i.file))?;
                Ok(ModuleImage {
                    kind: ImageKind::Ptx {
                        isa: *isa,
                        target: i.arch,
                    },
                    bytes: ptx_isa::with_version(&text, *isa)?.into_bytes(),
                    origin: format!("shipped {}", i.file),
                })
            }
            Candidate::NvrtcCubin(sm) => {
                let nvrtc = crate::nvrtc::global().map_err(|e| e.to_string())?;
                let options = vec![format!("--gpu-architecture=sm_{sm}")];
                let out = nvrtc
                    .compile(KERNELS_SRC, crate::kernels::KERNELS_FILE_NAME, &options)
                    .map_err(|e| e.to_string())?;
                if let Some(status) = out.error {
                    return Err(format!(
                        "{} cannot compile for sm_{sm} ({status}): {}",
                        nvrtc.describe(),
                        out.log.lines().next().unwrap_or_default()
                    ));
                }
                Ok(ModuleImage {
                    kind: ImageKind::Cubin { sm: *sm },
                    bytes: out.cubin,
                    origin: nvrtc.describe(),
                })
            }
            Candidate::NvrtcPtx(arch, max) => {
                let c = crate::kernels::compiled_for(&format!("compute_{arch}"))
                    .map_err(|e| e.to_string())?;
                let h = ptx_isa::header(&c.ptx)?;
                let isa = max.map_or(h.isa, |m| h.isa.min(m));
                let text = ptx_isa::with_version(&c.ptx, isa)?;
                let origin = crate::nvrtc_description().unwrap_or_else(|_| "NVRTC".into());
                Ok(ModuleImage {
                    kind: ImageKind::Ptx {
                        isa,
                        target: h.target,
                    },
                    bytes: text.into_bytes(),
                    origin,
                })
            }
        }
    }
}

/// The candidates for a device of compute capability `cc` under driver
/// `driver` (see the module docs), and the tries already decided (images
/// that cannot serve it, with the reason).
pub fn plan(cc: (u32, u32), driver: i32) -> (Vec<Candidate>, Vec<String>) {
    let sm = cc.0 * 10 + cc.1;
    let mut cands = Vec::new();
    let mut skipped = Vec::new();
    let stale = shipped::stale();
    let shipped = match (&stale, shipped::manifest()) {
        (None, Ok(m)) => Some(m),
        _ => None,
    };
    if let Some(why) = &stale {
        skipped.push(format!("shipped images: skipped: {why}"));
    }
    if let Some(m) = shipped {
        match m.cubin_for(cc) {
            Some(i) => cands.push(Candidate::ShippedCubin(i.clone())),
            None => {
                let have: Vec<String> = m
                    .images
                    .iter()
                    .filter(|i| i.kind == shipped::ShippedKind::Cubin)
                    .map(|i| format!("sm_{}", i.arch))
                    .collect();
                skipped.push(format!(
                    "shipped cubin: none runs on sm_{sm} (shipped for {})",
                    have.join(", ")
                ));
            }
        }
    }
    cands.push(Candidate::NvrtcCubin(sm));
    let max = ptx_isa::max_isa_for_driver(driver);
    if let Some(p) = shipped.and_then(|m| m.ptx()) {
        let own = p.isa.unwrap_or(shipped::PTX_FLOOR);
        let floor = p.floor.unwrap_or(shipped::PTX_FLOOR);
        let why_not = if p.arch > sm {
            Some(format!("it is for sm_{}, newer than sm_{sm}", p.arch))
        } else {
            match max {
                None => Some(format!(
                    "CUDA driver {} is older than CUDA 11 and accepts no PTX this old table knows",
                    ptx_isa::driver_text(driver)
                )),
                Some(m) if m < floor => Some(format!(
                    "CUDA driver {} accepts PTX ISA up to {}, below the floor {} it was checked at",
                    ptx_isa::driver_text(driver),
                    isa_text(m),
                    isa_text(floor)
                )),
                Some(_) => None,
            }
        };
        match why_not {
            Some(w) => skipped.push(format!("shipped PTX {}: skipped: {w}", p.file)),
            None => {
                let first = max.map_or(own, |m| own.min(m));
                cands.push(Candidate::ShippedPtx(p.clone(), first));
                if first > floor {
                    cands.push(Candidate::ShippedPtx(p.clone(), floor));
                }
            }
        }
    }
    if shipped.is_none() {
        cands.push(Candidate::NvrtcPtx(shipped::PTX_ARCH, max));
    }
    (cands, skipped)
}

/// Try `cands` in order on `dev`: the kernels of the first image it
/// loads, their report naming `skipped` and every try; else an error
/// naming them all.
pub fn load_candidates(
    dev: &dyn Device,
    label: &str,
    cands: &[Candidate],
    skipped: Vec<String>,
) -> Result<Kernels, BackendError> {
    let (funcs, image, tries) = first_loading(dev, label, cands, skipped, KERNEL_NAMES)?;
    for (k, f) in Kernel::ALL.into_iter().zip(&funcs) {
        if let Some(bytes) = k.max_dynamic_shared() {
            dev.set_max_dynamic_shared(f, bytes)?;
        }
    }
    let funcs = Kernel::ALL.into_iter().zip(funcs).collect();
    Ok(Kernels::new(funcs, image, tries))
}

/// The kernels `names` of the first of `cands` that `dev` loads, with the
/// image's description and every try.
fn first_loading(
    dev: &dyn Device,
    label: &str,
    cands: &[Candidate],
    skipped: Vec<String>,
    names: &[&'static str],
) -> Result<(Vec<Function>, String, Vec<String>), BackendError> {
    let mut tries = skipped;
    for c in cands {
        let image = match c.image() {
            Ok(i) => i,
            Err(e) => {
                tries.push(format!("{c}: not available: {e}"));
                continue;
            }
        };
        match dev.load_module(&image, names) {
            Ok(funcs) => {
                tries.push(format!("{image}: loaded"));
                return Ok((funcs, image.to_string(), tries));
            }
            Err(e) => tries.push(format!("{image}: refused: {e}")),
        }
    }
    Err(BackendError::Device(format!(
        "no kernel image loads on {label}: tried {}",
        numbered(&tries)
    )))
}

/// The kernels `names` from the image [`plan`] picks for `dev`, loaded
/// anew (not shared: for tools and tests that launch through the driver
/// interface directly).
pub fn load_names(dev: &dyn Device, names: &[&'static str]) -> Result<Vec<Function>, BackendError> {
    let cc = dev.compute_capability()?;
    let driver = dev.driver_version()?;
    let (cands, skipped) = plan(cc, driver);
    first_loading(dev, "the device", &cands, skipped, names).map(|(f, _, _)| f)
}

/// `(1) a; (2) b`.
pub fn numbered(tries: &[String]) -> String {
    tries
        .iter()
        .enumerate()
        .map(|(i, t)| format!("({}) {t}", i + 1))
        .collect::<Vec<_>>()
        .join("; ")
}

type Key = (bool, usize, (u32, u32), i32);

fn cache() -> &'static Mutex<HashMap<Key, Arc<Kernels>>> {
    static C: OnceLock<Mutex<HashMap<Key, Arc<Kernels>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The kernels of device `ordinal` (`dev`), loaded on the first call of
/// the process for that device and shared after (a failure is not kept:
/// the next call tries again). When a fallback was needed the tries go to
/// stderr once.
pub fn load(dev: &dyn Device, ordinal: usize) -> Result<Arc<Kernels>, BackendError> {
    let cc = dev.compute_capability()?;
    let driver = dev.driver_version()?;
    let key = (dev.is_emulated(), ordinal, cc, driver);
    let mut c = cache()
        .lock()
        .map_err(|_| BackendError::Device("kernel cache lock poisoned".into()))?;
    if let Some(k) = c.get(&key) {
        return Ok(Arc::clone(k));
    }
    let label = format!(
        "CUDA{ordinal} (compute capability {}.{}, CUDA driver {})",
        cc.0,
        cc.1,
        ptx_isa::driver_text(driver)
    );
    let (cands, skipped) = plan(cc, driver);
    let k = Arc::new(load_candidates(dev, &label, &cands, skipped)?);
    if k.tries().iter().any(|t| !t.ends_with(": loaded")) {
        eprintln!(
            "ggml-cuda: {label}: kernels from {} after {}",
            k.image(),
            numbered(k.tries())
        );
    }
    c.insert(key, Arc::clone(&k));
    Ok(k)
}
