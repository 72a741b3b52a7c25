//! Making NVRTC loadable for the NVRTC tests on a machine without the CUDA
//! toolkit. NVRTC needs no GPU and no driver, and PyPI's
//! `nvidia-cuda-nvrtc-cu12` wheel ships `libnvrtc.so.12`. When cudarc
//! cannot find a system `libnvrtc.so`, the wheel is installed with `pip
//! install --target` into a cache folder (the user cache, else the target
//! folder; never system-wide) and its `libnvrtc.so.12` is loaded by path:
//! cudarc's later `dlopen("libnvrtc.so.12")` then finds the loaded library
//! by its soname.
//!
//! The install is idempotent and safe for several test processes at once:
//! each installs into its own staging folder and renames it into place;
//! the loser of a race drops its copy and uses the winner's. Once cached,
//! finding NVRTC costs a directory lookup.
//!
//! Environment: `GGML_CUDA_NVRTC_CACHE` overrides the cache folder;
//! pip's own variables (`PIP_INDEX_URL`, ...) apply to the install.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The PyPI package that ships `libnvrtc.so.12`.
pub const WHEEL: &str = "nvidia-cuda-nvrtc-cu12";
/// Its version, pinned so every run compiles with the same NVRTC.
pub const WHEEL_VERSION: &str = "12.9.86";

/// The library inside an installed wheel.
const LIB_IN_WHEEL: &str = "nvidia/cuda_nvrtc/lib/libnvrtc.so.12";

/// Makes NVRTC loadable, once per process. `Ok` says where it came from;
/// `Err` says why it cannot be had here (the caller skips with it).
pub fn ensure_nvrtc() -> Result<String, String> {
    static ONCE: OnceLock<Result<String, String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        if ggml_cuda::probe_nvrtc().is_ok() {
            return Ok("the system's libnvrtc.so".into());
        }
        let root = cache_root()?;
        let lib = install_into(&root, None)?;
        preload(&lib)?;
        ggml_cuda::probe_nvrtc().map_err(|e| {
            format!(
                "{} was loaded but cudarc still cannot find NVRTC: {e}",
                lib.display()
            )
        })?;
        Ok(format!("{WHEEL} {WHEEL_VERSION} at {}", lib.display()))
    })
    .clone()
}

/// The folder the wheel is cached in: `$GGML_CUDA_NVRTC_CACHE`, else
/// `$XDG_CACHE_HOME/ggml-rs` or `~/.cache/ggml-rs`, else the target
/// folder's `tmp/` (the first that can be created).
fn cache_root() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("GGML_CUDA_NVRTC_CACHE") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("GGML_CUDA_NVRTC_CACHE={}: {e}", dir.display()))?;
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
    Err(format!("no cache folder for {WHEEL}: {}", why.join("; ")))
}

/// `libnvrtc.so.12` of the wheel installed under `root`, installing it with
/// pip first if it is not there. `index_url` replaces pip's index.
pub fn install_into(root: &Path, index_url: Option<&str>) -> Result<PathBuf, String> {
    let dest = root.join(format!("{WHEEL}-{WHEEL_VERSION}"));
    let lib = dest.join(LIB_IN_WHEEL);
    if lib.is_file() {
        return Ok(lib);
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let staging = root.join(format!(".staging-{WHEEL}-{}-{nanos}", std::process::id()));
    let result = pip_install(&staging, index_url).and_then(|()| {
        let staged = staging.join(LIB_IN_WHEEL);
        if !staged.is_file() {
            return Err(format!(
                "pip installed {WHEEL}=={WHEEL_VERSION} but {LIB_IN_WHEEL} is not in it"
            ));
        }
        drop_unused_libraries(&staging);
        match std::fs::rename(&staging, &dest) {
            Ok(()) => Ok(()),
            // another process renamed its copy into place first
            Err(_) if lib.is_file() => Ok(()),
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
    result.map(|()| lib)
}

/// Runs `pip install --target staging` with the first pip found.
fn pip_install(staging: &Path, index_url: Option<&str>) -> Result<(), String> {
    let spec = format!("{WHEEL}=={WHEEL_VERSION}");
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
            "no libnvrtc.so here, and `{} install {spec}` failed ({}): {tail}",
            pip.join(" "),
            out.status
        ));
    }
    Err(format!(
        "no pip to install {spec} with ({})",
        tried.join("; ")
    ))
}

/// Removes the wheel's alternative builds (`*.alt.so*`), which are unused
/// and half its size.
fn drop_unused_libraries(staging: &Path) {
    let Some(dir) = staging.join(LIB_IN_WHEEL).parent().map(Path::to_path_buf) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().contains(".alt.so") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Loads `lib` by path for the rest of the process, so that cudarc's
/// `dlopen` by name finds it.
fn preload(lib: &Path) -> Result<(), String> {
    // SAFETY: loading libnvrtc runs only its own initializers, which have
    // no preconditions; it is never unloaded (the handle is leaked), so no
    // symbol cudarc resolves from it can dangle.
    let handle = unsafe { libloading::Library::new(lib) }
        .map_err(|e| format!("loading {}: {e}", lib.display()))?;
    std::mem::forget(handle);
    Ok(())
}
