//! Making NVRTC (and `ptxas`) available to the kernel compile tests on a
//! machine without the CUDA toolkit. Neither needs a GPU or a driver, and
//! PyPI ships both: `nvidia-cuda-nvrtc-cu12` has `libnvrtc.so.12`,
//! `nvidia-cuda-nvcc-cu12` has `ptxas`. When cudarc cannot find a system
//! `libnvrtc.so` (or `ptxas` is not on `PATH`), the wheel is installed with
//! `pip install --target` into a cache folder (the user cache, else the
//! target folder; never system-wide). `libnvrtc.so.12` is then made the
//! process's NVRTC by path (`ggml_cuda::nvrtc::use_library`).
//!
//! CUDA 13 the same way: `nvidia-cuda-nvrtc` has `libnvrtc.so.13`, loaded
//! by path beside the process's NVRTC ([`ensure_nvrtc13`]), and
//! `nvidia-cuda-nvcc` its `ptxas` ([`ensure_ptxas13`]).
//!
//! The install is idempotent and safe for several test processes at once:
//! each installs into its own staging folder and renames it into place;
//! the loser of a race drops its copy and uses the winner's. Once cached,
//! finding a wheel costs a directory lookup.
//!
//! Environment: `GGML_CUDA_WHEEL_CACHE` overrides the cache folder; pip's
//! own variables (`PIP_INDEX_URL`, ...) apply to the install.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use ggml_cuda::libraries::{FoundLibrary, Origin};
use ggml_cuda::nvrtc::Nvrtc;

/// A PyPI wheel that ships one CUDA tool or library.
pub struct Wheel {
    /// The package name.
    pub name: &'static str,
    /// Its version, pinned so every run uses the same compiler.
    pub version: &'static str,
    /// The file wanted, relative to the install folder.
    pub file: &'static str,
    /// What the tests do not use, removed after the install (relative).
    pub unused: &'static [&'static str],
}

/// NVRTC 12.9 (`libnvrtc.so.12` and its builtins).
pub const NVRTC: Wheel = Wheel {
    name: "nvidia-cuda-nvrtc-cu12",
    version: "12.9.86",
    file: "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
    unused: &[
        "nvidia/cuda_nvrtc/lib/libnvrtc.alt.so.12",
        "nvidia/cuda_nvrtc/lib/libnvrtc-builtins.alt.so.12.9",
    ],
};

/// NVRTC 13.0 (`libnvrtc.so.13`, in the CUDA 13 wheels' `nvidia/cu13/lib`).
pub const NVRTC13: Wheel = Wheel {
    name: "nvidia-cuda-nvrtc",
    version: "13.0.88",
    file: "nvidia/cu13/lib/libnvrtc.so.13",
    unused: &[
        "nvidia/cu13/lib/libnvrtc.alt.so.13",
        "nvidia/cu13/lib/libnvrtc-builtins.alt.so.13.0",
    ],
};

/// The PTX assembler of CUDA 12.9 (`ptxas`).
pub const PTXAS: Wheel = Wheel {
    name: "nvidia-cuda-nvcc-cu12",
    version: "12.9.86",
    file: "nvidia/cuda_nvcc/bin/ptxas",
    unused: &["nvidia/cuda_nvcc/nvvm"],
};

/// The PTX assembler of CUDA 13.0 (`ptxas`), the release of [`NVRTC13`].
/// The wheel has no `nvvm`; its other tools are unused (~78 MB).
pub const PTXAS13: Wheel = Wheel {
    name: "nvidia-cuda-nvcc",
    version: "13.0.88",
    file: "nvidia/cu13/bin/ptxas",
    unused: &[
        "nvidia/cu13/bin/nvlink",
        "nvidia/cu13/bin/nvcc",
        "nvidia/cu13/bin/cudafe++",
        "nvidia/cu13/bin/fatbinary",
    ],
};

/// Makes NVRTC loadable, once per process. `Ok` says where it came from;
/// `Err` says why it cannot be had here (the caller skips with it).
pub fn ensure_nvrtc() -> Result<String, String> {
    static ONCE: OnceLock<Result<String, String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        if ggml_cuda::probe_nvrtc().is_ok() {
            return Ok("the system's libnvrtc.so".into());
        }
        let lib = install_into(&NVRTC, &cache_root()?, None)
            .map_err(|e| format!("no libnvrtc.so here, and {e}"))?;
        ggml_cuda::nvrtc::use_library(&lib).map_err(|e| e.to_string())?;
        Ok(format!(
            "{} {} at {}",
            NVRTC.name,
            NVRTC.version,
            lib.display()
        ))
    })
    .clone()
}

/// A `ptxas` to run, once per process: the one on `PATH`, else the wheel's.
/// `Err` says why there is none.
pub fn ensure_ptxas() -> Result<PathBuf, String> {
    static ONCE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        let on_path = Command::new("ptxas")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if on_path {
            return Ok(PathBuf::from("ptxas"));
        }
        install_into(&PTXAS, &cache_root()?, None).map_err(|e| format!("no ptxas on PATH, and {e}"))
    })
    .clone()
}

/// NVRTC 13 ([`NVRTC13`]'s wheel), loaded by path beside the process's
/// NVRTC (usually 12), once per process. `Err` says why it cannot be had
/// here (the caller skips with it).
pub fn ensure_nvrtc13() -> Result<Arc<Nvrtc>, String> {
    static ONCE: OnceLock<Result<Arc<Nvrtc>, String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        let path = install_into(&NVRTC13, &cache_root()?, None)
            .map_err(|e| format!("no NVRTC 13: {e}"))?;
        let n = Nvrtc::load(FoundLibrary {
            path,
            major: Some(13),
            origin: Origin::PythonWheel,
        })
        .map_err(|e| e.to_string())?;
        if n.version().0 != 13 {
            return Err(format!("{} is not NVRTC 13", n.describe()));
        }
        Ok(Arc::new(n))
    })
    .clone()
}

/// A CUDA 13 `ptxas`, once per process: the one on `PATH` if it is release
/// 13, else [`PTXAS13`]'s. `Err` says why there is none.
pub fn ensure_ptxas13() -> Result<PathBuf, String> {
    static ONCE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        let on_path = Command::new("ptxas")
            .arg("--version")
            .output()
            .is_ok_and(|o| {
                o.status.success() && String::from_utf8_lossy(&o.stdout).contains("release 13.")
            });
        if on_path {
            return Ok(PathBuf::from("ptxas"));
        }
        install_into(&PTXAS13, &cache_root()?, None)
            .map_err(|e| format!("no CUDA 13 ptxas on PATH, and {e}"))
    })
    .clone()
}

/// The folder the wheel is cached in: `$GGML_CUDA_WHEEL_CACHE`, else
/// `$XDG_CACHE_HOME/ggml-rs` or `~/.cache/ggml-rs`, else the target
/// folder's `tmp/` (the first that can be created).
pub fn cache_root() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("GGML_CUDA_WHEEL_CACHE") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("GGML_CUDA_WHEEL_CACHE={}: {e}", dir.display()))?;
        return Ok(dir);
    }
    let user = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|c| c.join("ggml-rs"));
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let mut why = Vec::new();
    for dir in user.into_iter().chain([target]) {
        match std::fs::create_dir_all(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => why.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!(
        "no cache folder for the CUDA wheels: {}",
        why.join("; ")
    ))
}

/// `wheel.file` of `wheel` installed under `root`, installing it with pip
/// first if it is not there. `index_url` replaces pip's index.
pub fn install_into(
    wheel: &Wheel,
    root: &Path,
    index_url: Option<&str>,
) -> Result<PathBuf, String> {
    let dest = root.join(format!("{}-{}", wheel.name, wheel.version));
    let file = dest.join(wheel.file);
    if file.is_file() {
        return Ok(file);
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let staging = root.join(format!(
        ".staging-{}-{}-{nanos}",
        wheel.name,
        std::process::id()
    ));
    let result = pip_install(wheel, &staging, index_url).and_then(|()| {
        if !staging.join(wheel.file).is_file() {
            return Err(format!(
                "pip installed {}=={} but {} is not in it",
                wheel.name, wheel.version, wheel.file
            ));
        }
        for unused in wheel.unused {
            let path = staging.join(unused);
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
        match std::fs::rename(&staging, &dest) {
            Ok(()) => Ok(()),
            // another process renamed its copy into place first
            Err(_) if file.is_file() => Ok(()),
            Err(e) => Err(format!(
                "moving {} to {}: {e}",
                staging.display(),
                dest.display()
            )),
        }
    });
    if staging.exists() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result.map(|()| file)
}

/// Runs `pip install --target staging` with the first pip found.
fn pip_install(wheel: &Wheel, staging: &Path, index_url: Option<&str>) -> Result<(), String> {
    let spec = format!("{}=={}", wheel.name, wheel.version);
    let mut args: Vec<String> = [
        "install",
        "--no-deps",
        "--only-binary=:all:",
        "--no-input",
        "--disable-pip-version-check",
        "--no-compile",
        "--retries",
        "1",
        "--timeout",
        "30",
        "--quiet",
        "--target",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(staging.display().to_string());
    if let Some(url) = index_url {
        args.push("--index-url".into());
        args.push(url.into());
    }
    args.push(spec.clone());
    let pips: [(&str, &[&str]); 3] = [("python3", &["-m", "pip"]), ("pip3", &[]), ("pip", &[])];
    let mut tried = Vec::new();
    for (prog, pre) in pips {
        let out = match Command::new(prog).args(pre).args(&args).output() {
            Ok(out) => out,
            Err(e) => {
                tried.push(format!("{prog}: {e}"));
                continue;
            }
        };
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        // pip's `ERROR:` lines say why; else its last line
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let errors: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.starts_with("ERROR:"))
            .collect();
        let tail = if errors.is_empty() {
            lines.last().copied().unwrap_or("no output").to_string()
        } else {
            errors.join(" | ")
        };
        if tail.contains("No module named pip") {
            tried.push(format!("{prog} -m pip: no pip module"));
            continue;
        }
        let pip: Vec<&str> = [prog].iter().chain(pre).copied().collect();
        return Err(format!(
            "`{} install {spec}` failed ({}): {tail}",
            pip.join(" "),
            out.status
        ));
    }
    Err(format!(
        "no pip to install {spec} with ({})",
        tried.join("; ")
    ))
}
