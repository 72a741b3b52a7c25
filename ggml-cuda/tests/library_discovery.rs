//! Library discovery for real: NVRTC 12 and NVRTC 13 (from PyPI's
//! `nvidia-cuda-nvrtc-cu12` and `nvidia-cuda-nvrtc` wheels, no GPU needed),
//! each put in a folder laid out like a place the backend searches
//! (`$CUDA_HOME/lib64`, a Python wheel's `nvidia/*/lib`, `LD_LIBRARY_PATH`),
//! found by [`find_library`], loaded side by side, asked its version, and
//! used to compile `kernels.cu`. Prints what each load gave. Where the wheels
//! cannot be installed (no registry, no pip) it prints `skipped: <reason>`.

mod cuda_wheels;

use std::path::{Path, PathBuf};

use ggml_cuda::kernels::{self, KERNELS_SRC, KERNEL_NAMES};
use ggml_cuda::libraries::{find_library, Origin, SearchEnv};
use ggml_cuda::nvrtc::Nvrtc;

/// The folder holding the wheel's library file.
fn lib_dir(wheel: &cuda_wheels::Wheel) -> Result<PathBuf, String> {
    let root = cuda_wheels::cache_root()?;
    let file = cuda_wheels::install_into(wheel, &root, None)?;
    file.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("{} has no folder", file.display()))
}

fn link(target: &Path, at: &Path) {
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::os::unix::fs::symlink(target, at).unwrap();
}

fn compile_with(n: &Nvrtc, arch: &str) {
    let out = kernels::compile_with(n, KERNELS_SRC, arch)
        .unwrap_or_else(|e| panic!("{} for {arch}: {e}", n.describe()));
    for k in KERNEL_NAMES {
        assert!(
            out.ptx.contains(&format!(".entry {k}(")),
            "{} for {arch}: no entry {k}",
            n.describe()
        );
    }
}

#[test]
fn nvrtc_12_and_13_are_found_in_the_usual_places_and_load() {
    let (dir12, dir13) = match (lib_dir(&cuda_wheels::NVRTC), lib_dir(&cuda_wheels::NVRTC13)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            println!("skipped: cannot install the NVRTC wheels: {e}");
            return;
        }
    };
    let t = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("libsearch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&t);
    // a CUDA 13 toolkit under CUDA_HOME, a CUDA 12 wheel in a site-packages
    // folder, and a CUDA 12 library on LD_LIBRARY_PATH
    link(&dir13, &t.join("cuda-13.0/lib64"));
    link(
        &dir12,
        &t.join("venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib"),
    );
    link(&dir12, &t.join("ld"));

    let toolkit = SearchEnv {
        cuda_home: Some(t.join("cuda-13.0")),
        python_dirs: vec![t.join("venv/lib/python3.12/site-packages")],
        ..Default::default()
    };
    let f13 = find_library("nvrtc", &toolkit, None).expect("libnvrtc.so.13 under CUDA_HOME");
    assert_eq!(
        (f13.major, f13.origin),
        (Some(13), Origin::CudaHome),
        "{f13}"
    );
    let wheel = SearchEnv {
        python_dirs: toolkit.python_dirs.clone(),
        ..Default::default()
    };
    let f12 = find_library("nvrtc", &wheel, None).expect("libnvrtc.so.12 in the wheel");
    assert_eq!(
        (f12.major, f12.origin),
        (Some(12), Origin::PythonWheel),
        "{f12}"
    );
    // a CUDA 12 driver caps the major: the toolkit's 13 is passed over
    let capped = find_library("nvrtc", &toolkit, Some(12)).expect("capped at 12");
    assert_eq!(capped.major, Some(12), "{capped}");
    let ld = SearchEnv {
        ld_library_path: vec![t.join("ld")],
        ..toolkit.clone()
    };
    let first = find_library("nvrtc", &ld, None).expect("LD_LIBRARY_PATH first");
    assert_eq!(first.origin, Origin::LdLibraryPath, "{first}");

    let n13 = Nvrtc::load(f13).unwrap();
    let n12 = Nvrtc::load(f12).unwrap();
    println!("loaded {}", n13.describe());
    println!("loaded {}", n12.describe());
    assert_eq!(n13.version().0, 13, "{}", n13.describe());
    assert_eq!(n12.version().0, 12, "{}", n12.describe());
    // both compile the kernels for the fallback and a current architecture
    for n in [&n13, &n12] {
        for arch in [ggml_cuda::kernels::FALLBACK_ARCH, "compute_90"] {
            compile_with(n, arch);
        }
    }
    let _ = std::fs::remove_dir_all(&t);
}
