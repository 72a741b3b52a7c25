//! Finding the CUDA libraries the backend loads at run time (NVRTC today),
//! for CUDA 12 or CUDA 13, wherever a CUDA installation usually puts them.
//!
//! cudarc's own loader tries a fixed list of sonames (`libnvrtc.so`,
//! `.so.12`, `.so.11`, ...) through the dynamic linker's search path, which
//! never includes `libnvrtc.so.13`, a toolkit outside that path, or a
//! Python wheel. This module looks for the file itself:
//!
//! 1. each folder of `LD_LIBRARY_PATH`, in order;
//! 2. `$CUDA_PATH/lib64` (and `lib`), then `$CUDA_HOME/lib64` (and `lib`);
//! 3. `/usr/local/cuda/lib64`;
//! 4. the `nvidia/*/lib` folders of Python wheels (`nvidia-cuda-nvrtc-cu12`
//!    installs `nvidia/cuda_nvrtc/lib`, CUDA 13's `nvidia-cuda-nvrtc`
//!    `nvidia/cu13/lib`) under each `site-packages` / `dist-packages` folder
//!    of `PYTHONPATH`, `VIRTUAL_ENV`, `CONDA_PREFIX`, the user's and the
//!    system's Python installations;
//! 5. the system library folders (`/usr/lib/x86_64-linux-gnu`, `/usr/lib64`,
//!    `/usr/lib`, ...).
//!
//! In each folder the newest major version is taken first
//! (`libnvrtc.so.13`, then `.so.12`, then the unversioned `libnvrtc.so`),
//! unless the caller caps the major version (an NVRTC newer than the driver
//! writes PTX the driver cannot load). The first folder with a match wins,
//! so `LD_LIBRARY_PATH` overrides everything, as users expect.
//!
//! [`SearchEnv`] holds every input of the search, so tests can lay out
//! folders like the places above and search them without touching the
//! process environment.

use std::path::{Path, PathBuf};

/// The major CUDA versions whose libraries the backend can use, newest first.
pub const SUPPORTED_MAJORS: [u32; 2] = [13, 12];

/// Where one folder of the search came from (reported with the result).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A folder of `LD_LIBRARY_PATH`.
    LdLibraryPath,
    /// `$CUDA_PATH/lib64` or `$CUDA_PATH/lib`.
    CudaPath,
    /// `$CUDA_HOME/lib64` or `$CUDA_HOME/lib`.
    CudaHome,
    /// `/usr/local/cuda/lib64`.
    UsrLocalCuda,
    /// An `nvidia/*/lib` folder of a Python wheel.
    PythonWheel,
    /// A system library folder.
    System,
}

impl Origin {
    /// How the summary names it.
    pub fn describe(self) -> &'static str {
        match self {
            Origin::LdLibraryPath => "LD_LIBRARY_PATH",
            Origin::CudaPath => "CUDA_PATH",
            Origin::CudaHome => "CUDA_HOME",
            Origin::UsrLocalCuda => "/usr/local/cuda",
            Origin::PythonWheel => "Python wheel",
            Origin::System => "system library folder",
        }
    }
}

/// Everything the search reads: the process environment by default
/// ([`SearchEnv::from_process`]), or folders a test lays out.
#[derive(Clone, Debug, Default)]
pub struct SearchEnv {
    /// `LD_LIBRARY_PATH`, split.
    pub ld_library_path: Vec<PathBuf>,
    /// `CUDA_PATH`.
    pub cuda_path: Option<PathBuf>,
    /// `CUDA_HOME`.
    pub cuda_home: Option<PathBuf>,
    /// The CUDA toolkit's usual home (`/usr/local/cuda`).
    pub usr_local_cuda: Option<PathBuf>,
    /// Folders that may hold Python packages (`site-packages`,
    /// `dist-packages`, or `PYTHONPATH` entries).
    pub python_dirs: Vec<PathBuf>,
    /// System library folders, searched last.
    pub system_dirs: Vec<PathBuf>,
}

impl SearchEnv {
    /// The search inputs of this process: its environment variables and
    /// the usual folders of this machine.
    pub fn from_process() -> SearchEnv {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let split = |k: &str| -> Vec<PathBuf> {
            var(k)
                .map(|v| {
                    std::env::split_paths(&v)
                        .filter(|p| !p.as_os_str().is_empty())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut python_dirs = split("PYTHONPATH");
        let mut prefixes: Vec<PathBuf> = Vec::new();
        for k in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
            if let Some(p) = var(k) {
                prefixes.push(PathBuf::from(p));
            }
        }
        if let Some(home) = var("HOME") {
            let home = PathBuf::from(home);
            prefixes.push(home.join(".local"));
            // pyenv's interpreters (as on the machines this project runs on)
            python_dirs.extend(
                children(&home.join(".pyenv/versions"))
                    .into_iter()
                    .flat_map(|v| python_lib_dirs(&v)),
            );
        }
        prefixes.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
        for p in &prefixes {
            python_dirs.extend(python_lib_dirs(p));
        }
        python_dirs.push(PathBuf::from("/usr/lib/python3/dist-packages"));
        SearchEnv {
            ld_library_path: split("LD_LIBRARY_PATH"),
            cuda_path: var("CUDA_PATH").map(PathBuf::from),
            cuda_home: var("CUDA_HOME").map(PathBuf::from),
            usr_local_cuda: Some(PathBuf::from("/usr/local/cuda")),
            python_dirs,
            system_dirs: [
                "/usr/lib/x86_64-linux-gnu",
                "/usr/lib/aarch64-linux-gnu",
                "/usr/lib64",
                "/usr/lib",
                "/lib64",
                "/lib",
            ]
            .map(PathBuf::from)
            .to_vec(),
        }
    }

    /// The folders to search, in order, each with its origin.
    pub fn folders(&self) -> Vec<(PathBuf, Origin)> {
        let mut v: Vec<(PathBuf, Origin)> = Vec::new();
        v.extend(
            self.ld_library_path
                .iter()
                .map(|p| (p.clone(), Origin::LdLibraryPath)),
        );
        for (root, origin) in [
            (&self.cuda_path, Origin::CudaPath),
            (&self.cuda_home, Origin::CudaHome),
        ] {
            if let Some(r) = root {
                v.push((r.join("lib64"), origin));
                v.push((r.join("lib"), origin));
            }
        }
        if let Some(r) = &self.usr_local_cuda {
            v.push((r.join("lib64"), Origin::UsrLocalCuda));
        }
        for d in &self.python_dirs {
            for pkg in children(&d.join("nvidia")) {
                v.push((pkg.join("lib"), Origin::PythonWheel));
            }
        }
        v.extend(self.system_dirs.iter().map(|p| (p.clone(), Origin::System)));
        let mut seen = std::collections::HashSet::new();
        v.retain(|(p, _)| seen.insert(p.clone()));
        v
    }
}

/// `PREFIX/lib/python3*/{site,dist}-packages` folders that exist.
fn python_lib_dirs(prefix: &Path) -> Vec<PathBuf> {
    children(&prefix.join("lib"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3"))
        })
        .flat_map(|p| [p.join("site-packages"), p.join("dist-packages")])
        .filter(|p| p.is_dir())
        .collect()
}

/// The sub-folders of `dir`, sorted (none if it cannot be read).
fn children(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A library file the search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundLibrary {
    /// The file.
    pub path: PathBuf,
    /// Its major CUDA version, from the file name (`None`: unversioned).
    pub major: Option<u32>,
    /// Where its folder came from.
    pub origin: Origin,
}

impl std::fmt::Display for FoundLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (from {})",
            self.path.display(),
            self.origin.describe()
        )
    }
}

/// The first `lib{stem}.so.{major}` (newest major first, then the
/// unversioned `lib{stem}.so`) in the folders of `env`, in search order.
/// `max_major` skips newer majors (for a driver older than the library).
pub fn find_library(stem: &str, env: &SearchEnv, max_major: Option<u32>) -> Option<FoundLibrary> {
    let majors: Vec<u32> = SUPPORTED_MAJORS
        .iter()
        .copied()
        .filter(|m| max_major.is_none_or(|x| *m <= x))
        .collect();
    for (dir, origin) in env.folders() {
        for &m in &majors {
            let path = dir.join(format!("lib{stem}.so.{m}"));
            if path.is_file() {
                return Some(FoundLibrary {
                    path,
                    major: Some(m),
                    origin,
                });
            }
        }
        let path = dir.join(format!("lib{stem}.so"));
        if path.is_file() {
            return Some(FoundLibrary {
                path,
                major: None,
                origin,
            });
        }
    }
    None
}

/// Every folder searched, as one line for an error message.
pub fn searched(env: &SearchEnv) -> String {
    let v: Vec<String> = env
        .folders()
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    v.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(p, b"").unwrap();
    }

    #[test]
    fn order_and_version_preference() {
        let t = std::env::temp_dir().join(format!("ggml-cuda-libsearch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        let wheel12 = t.join("py/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
        let wheel13 = t.join("py/nvidia/cu13/lib/libnvrtc.so.13");
        let toolkit12 = t.join("cuda/lib64/libnvrtc.so.12");
        let ld = t.join("ld/libnvrtc.so");
        for p in [&wheel12, &wheel13, &toolkit12, &ld] {
            touch(p);
        }
        let mut env = SearchEnv {
            python_dirs: vec![t.join("py")],
            ..Default::default()
        };
        // wheels only: `cu13` sorts before `cuda_nvrtc`, and 13 is preferred
        let f = find_library("nvrtc", &env, None).unwrap();
        assert_eq!(
            (f.path.clone(), f.major, f.origin),
            (wheel13.clone(), Some(13), Origin::PythonWheel)
        );
        // a driver of CUDA 12 caps the major
        let f = find_library("nvrtc", &env, Some(12)).unwrap();
        assert_eq!(f.path, wheel12);
        // CUDA_HOME comes before the wheels
        env.cuda_home = Some(t.join("cuda"));
        let f = find_library("nvrtc", &env, None).unwrap();
        assert_eq!((f.path.clone(), f.origin), (toolkit12, Origin::CudaHome));
        // LD_LIBRARY_PATH comes first of all, unversioned included
        env.ld_library_path = vec![t.join("ld")];
        let f = find_library("nvrtc", &env, None).unwrap();
        assert_eq!((f.path.clone(), f.major), (ld, None));
        assert!(f.to_string().contains("LD_LIBRARY_PATH"), "{f}");
        assert!(find_library("cublas", &env, None).is_none());
        assert!(searched(&env).contains("lib64"));
        let _ = std::fs::remove_dir_all(&t);
    }
}
