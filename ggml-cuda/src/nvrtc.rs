//! NVRTC, loaded by path: the run-time compiler of `kernels.cu`, from CUDA
//! 12 or CUDA 13, wherever [`crate::libraries`] finds it.
//!
//! The backend needs eight NVRTC functions whose signatures are the same in
//! CUDA 12 and 13; they are resolved from the library file found, so a
//! toolkit outside the linker's path, a Python wheel, or `libnvrtc.so.13`
//! (which cudarc's fixed list of names never tries) all work. The process
//! uses one NVRTC ([`global`]): the first one found, or the one a caller
//! installs with [`use_library`] before the first compile. Several may be
//! loaded side by side with [`Nvrtc::load`] (different sonames, local
//! symbols), as the discovery test does with 12 and 13.

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ggml_core::BackendError;

use crate::libraries::{find_library, searched, FoundLibrary, Origin, SearchEnv};

type Program = *mut std::ffi::c_void;
type Status = c_int;

type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status;
type CreateFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> Status;
type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> Status;
type TextFn = unsafe extern "C" fn(Program, *mut c_char) -> Status;
type DestroyFn = unsafe extern "C" fn(*mut Program) -> Status;
type ErrorStringFn = unsafe extern "C" fn(Status) -> *const c_char;
type BinaryFn = unsafe extern "C" fn(Program, *mut c_char) -> Status;

/// One loaded NVRTC library.
pub struct Nvrtc {
    found: FoundLibrary,
    version: (i32, i32),
    create: CreateFn,
    compile: CompileFn,
    ptx_size: SizeFn,
    ptx: TextFn,
    log_size: SizeFn,
    log: TextFn,
    destroy: DestroyFn,
    error_string: ErrorStringFn,
    /// `nvrtcGetCUBINSize` / `nvrtcGetCUBIN` (NVRTC 11.1 and later).
    cubin: Option<(SizeFn, BinaryFn)>,
    // Keeps the function pointers above valid; dropped last.
    _lib: libloading::Library,
    // NVRTC's builtins, loaded from NVRTC's own folder (see `load`).
    _builtins: Option<libloading::Library>,
}

/// A compile's outcome: PTX and log, or NVRTC's status and log.
pub struct ProgramOutput {
    /// NVRTC's status name when the compile failed (`None`: it succeeded).
    pub error: Option<String>,
    /// The PTX (empty when the compile failed, or compiled for an `sm_XY`
    /// architecture).
    pub ptx: String,
    /// The cubin, for an `sm_XY` architecture (`--gpu-architecture=sm_90`);
    /// empty otherwise.
    pub cubin: Vec<u8>,
    /// NVRTC's log (warnings, errors).
    pub log: String,
}

impl Nvrtc {
    /// Load the NVRTC library at `found.path` and resolve its functions.
    pub fn load(found: FoundLibrary) -> Result<Nvrtc, BackendError> {
        let path = found.path.display().to_string();
        // NVRTC opens `libnvrtc-builtins.so.M.m` by name when it compiles,
        // through the linker's search path only; loaded here from NVRTC's
        // own folder first, that later `dlopen` finds it by its soname.
        let builtins = match builtins_beside(&found.path) {
            // SAFETY: as for NVRTC below: its initializers have no
            // preconditions.
            Some(b) => Some(unsafe { libloading::Library::new(&b) }.map_err(|e| {
                BackendError::NoDevice(format!("loading NVRTC's builtins {}: {e}", b.display()))
            })?),
            None => None,
        };
        // SAFETY: loading libnvrtc runs only its own initializers, which
        // have no preconditions.
        let lib = unsafe { libloading::Library::new(&found.path) }
            .map_err(|e| BackendError::NoDevice(format!("loading NVRTC {path}: {e}")))?;
        // SAFETY (every `sym` call): the symbol names and the function
        // types above are NVRTC's documented C API, the same in CUDA 12 and
        // 13; the pointers stay valid while `_lib` is held by the struct.
        unsafe fn sym<T: Copy>(
            lib: &libloading::Library,
            name: &[u8],
            path: &str,
        ) -> Result<T, BackendError> {
            // SAFETY: see the caller.
            unsafe { lib.get::<T>(name) }.map(|s| *s).map_err(|e| {
                BackendError::NoDevice(format!(
                    "NVRTC {path} lacks {}: {e}",
                    String::from_utf8_lossy(name)
                ))
            })
        }
        // SAFETY: see `sym`.
        let (version, create, compile, ptx_size, ptx, log_size, log, destroy, error_string) = unsafe {
            (
                sym::<VersionFn>(&lib, b"nvrtcVersion\0", &path)?,
                sym::<CreateFn>(&lib, b"nvrtcCreateProgram\0", &path)?,
                sym::<CompileFn>(&lib, b"nvrtcCompileProgram\0", &path)?,
                sym::<SizeFn>(&lib, b"nvrtcGetPTXSize\0", &path)?,
                sym::<TextFn>(&lib, b"nvrtcGetPTX\0", &path)?,
                sym::<SizeFn>(&lib, b"nvrtcGetProgramLogSize\0", &path)?,
                sym::<TextFn>(&lib, b"nvrtcGetProgramLog\0", &path)?,
                sym::<DestroyFn>(&lib, b"nvrtcDestroyProgram\0", &path)?,
                sym::<ErrorStringFn>(&lib, b"nvrtcGetErrorString\0", &path)?,
            )
        };
        // SAFETY: see `sym`; optional (an NVRTC without them compiles PTX).
        let cubin = unsafe {
            match (
                sym::<SizeFn>(&lib, b"nvrtcGetCUBINSize\0", &path),
                sym::<BinaryFn>(&lib, b"nvrtcGetCUBIN\0", &path),
            ) {
                (Ok(a), Ok(b)) => Some((a, b)),
                _ => None,
            }
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers for the duration of the call.
        let status = unsafe { version(&mut major, &mut minor) };
        if status != 0 {
            return Err(BackendError::NoDevice(format!(
                "NVRTC {path}: nvrtcVersion failed ({status})"
            )));
        }
        Ok(Nvrtc {
            found,
            version: (major, minor),
            create,
            compile,
            ptx_size,
            ptx,
            log_size,
            log,
            destroy,
            error_string,
            cubin,
            _lib: lib,
            _builtins: builtins,
        })
    }

    /// The library file and where it was found.
    pub fn library(&self) -> &FoundLibrary {
        &self.found
    }

    /// NVRTC's own version `(major, minor)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// One line for summaries: `NVRTC 13.0 (/usr/local/cuda/lib64/libnvrtc.so.13, from /usr/local/cuda)`.
    pub fn describe(&self) -> String {
        format!(
            "NVRTC {}.{} ({})",
            self.version.0, self.version.1, self.found
        )
    }

    fn status_name(&self, status: Status) -> String {
        // SAFETY: nvrtcGetErrorString accepts any status and returns a
        // static NUL-terminated string (or NULL).
        let p = unsafe { (self.error_string)(status) };
        if p.is_null() {
            return format!("NVRTC status {status}");
        }
        // SAFETY: non-null, NUL-terminated, static (NVRTC's documentation).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Compile `src` (named `name` in the log) with `options`.
    pub fn compile(
        &self,
        src: &str,
        name: &str,
        options: &[String],
    ) -> Result<ProgramOutput, BackendError> {
        let nul = |what: &str| BackendError::InvalidInput(format!("{what} contains a NUL byte"));
        let c_src = CString::new(src).map_err(|_| nul("kernel source"))?;
        let c_name = CString::new(name).map_err(|_| nul("kernel file name"))?;
        let c_opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()).map_err(|_| nul("NVRTC option")))
            .collect::<Result<_, _>>()?;
        let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
        let fail = |what: &str, s: Status| {
            BackendError::Device(format!("NVRTC {what} failed: {}", self.status_name(s)))
        };
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: valid out-pointer; NUL-terminated source and name that
        // outlive the program (destroyed below); no headers.
        let s = unsafe {
            (self.create)(
                &mut prog,
                c_src.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if s != 0 {
            return Err(fail("create program", s));
        }
        let want_cubin = options
            .iter()
            .any(|o| o.starts_with("--gpu-architecture=sm_") || o.starts_with("-arch=sm_"));
        let out = self.compile_created(prog, &opt_ptrs, want_cubin);
        // SAFETY: `prog` was created above and is destroyed once, here.
        unsafe { (self.destroy)(&mut prog) };
        out
    }

    fn compile_created(
        &self,
        prog: Program,
        opts: &[*const c_char],
        want_cubin: bool,
    ) -> Result<ProgramOutput, BackendError> {
        let n = c_int::try_from(opts.len())
            .map_err(|_| BackendError::InvalidInput("too many NVRTC options".into()))?;
        // SAFETY: a live program; `opts` holds `n` NUL-terminated strings
        // that outlive the call.
        let status = unsafe { (self.compile)(prog, n, opts.as_ptr()) };
        // SAFETY: a live program; the buffers are sized by NVRTC's own
        // size calls, which include the terminating NUL.
        let log = unsafe { self.text(prog, self.log_size, self.log) }?;
        if status != 0 {
            return Ok(ProgramOutput {
                error: Some(self.status_name(status)),
                ptx: String::new(),
                cubin: Vec::new(),
                log,
            });
        }
        if want_cubin {
            let (size, get) = self.cubin.ok_or_else(|| {
                BackendError::Device(format!(
                    "{} has no nvrtcGetCUBIN (NVRTC 11.1 or later writes cubins)",
                    self.describe()
                ))
            })?;
            // SAFETY: a live, compiled program; `size`/`get` are NVRTC's
            // cubin pair.
            let cubin = unsafe { self.binary(prog, size, get) }?;
            return Ok(ProgramOutput {
                error: None,
                ptx: String::new(),
                cubin,
                log,
            });
        }
        // SAFETY: as above; the program compiled.
        let ptx = unsafe { self.text(prog, self.ptx_size, self.ptx) }?;
        Ok(ProgramOutput {
            error: None,
            ptx,
            cubin: Vec::new(),
            log,
        })
    }

    /// # Safety
    /// `prog` is a live, compiled program of this library, and `size`/`get`
    /// a matching pair of its binary size and content functions.
    unsafe fn binary(
        &self,
        prog: Program,
        size: SizeFn,
        get: BinaryFn,
    ) -> Result<Vec<u8>, BackendError> {
        let mut n = 0usize;
        // SAFETY: the caller's contract; valid out-pointer.
        let s = unsafe { size(prog, &mut n) };
        if s != 0 {
            return Err(BackendError::Device(format!(
                "NVRTC cubin size query failed: {}",
                self.status_name(s)
            )));
        }
        let mut buf = vec![0u8; n.max(1)];
        // SAFETY: `buf` holds the `n` bytes NVRTC said it writes.
        let s = unsafe { get(prog, buf.as_mut_ptr().cast()) };
        if s != 0 {
            return Err(BackendError::Device(format!(
                "NVRTC cubin query failed: {}",
                self.status_name(s)
            )));
        }
        buf.truncate(n);
        Ok(buf)
    }

    /// # Safety
    /// `prog` is a live program of this library, and `size`/`get` are a
    /// matching pair of its size and text functions.
    unsafe fn text(
        &self,
        prog: Program,
        size: SizeFn,
        get: TextFn,
    ) -> Result<String, BackendError> {
        let mut n = 0usize;
        // SAFETY: the caller's contract; valid out-pointer.
        let s = unsafe { size(prog, &mut n) };
        if s != 0 {
            return Err(BackendError::Device(format!(
                "NVRTC size query failed: {}",
                self.status_name(s)
            )));
        }
        let mut buf = vec![0u8; n.max(1)];
        // SAFETY: `buf` holds the `n` bytes NVRTC said it writes.
        let s = unsafe { get(prog, buf.as_mut_ptr().cast()) };
        if s != 0 {
            return Err(BackendError::Device(format!(
                "NVRTC text query failed: {}",
                self.status_name(s)
            )));
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }
}

/// The process's NVRTC: installed by [`use_library`], else found by
/// searching [`SearchEnv::from_process`] (failures are not remembered, so a
/// library installed later is found by the next call).
fn slot() -> &'static Mutex<Option<Arc<Nvrtc>>> {
    static SLOT: Mutex<Option<Arc<Nvrtc>>> = Mutex::new(None);
    &SLOT
}

/// The NVRTC this process compiles with, found and loaded on first use:
/// the newest major version the CUDA driver (where there is one) accepts.
/// Without one: `NoDevice` naming every folder searched.
pub fn global() -> Result<Arc<Nvrtc>, BackendError> {
    let mut s = slot()
        .lock()
        .map_err(|_| BackendError::Device("NVRTC lock poisoned".into()))?;
    if let Some(n) = s.as_ref() {
        return Ok(Arc::clone(n));
    }
    let env = SearchEnv::from_process();
    // an NVRTC newer than the driver writes PTX the driver cannot load
    let found = find_library("nvrtc", &env, crate::driver_major()).ok_or_else(|| {
        BackendError::NoDevice(format!("{} (searched {})", crate::NO_NVRTC, searched(&env)))
    })?;
    let n = Arc::new(Nvrtc::load(found)?);
    *s = Some(Arc::clone(&n));
    Ok(n)
}

/// Make the library at `path` the process's NVRTC (unless one is already
/// in use, which is kept and returned): for tools and tests that install
/// NVRTC themselves.
pub fn use_library(path: &Path) -> Result<Arc<Nvrtc>, BackendError> {
    let mut s = slot()
        .lock()
        .map_err(|_| BackendError::Device("NVRTC lock poisoned".into()))?;
    if let Some(n) = s.as_ref() {
        return Ok(Arc::clone(n));
    }
    let major = major_of(path);
    let n = Arc::new(Nvrtc::load(FoundLibrary {
        path: PathBuf::from(path),
        major,
        origin: Origin::LdLibraryPath,
    })?);
    *s = Some(Arc::clone(&n));
    Ok(n)
}

/// `libnvrtc-builtins.so.*` in NVRTC's folder, for the same major version
/// (not the `.alt` variant).
fn builtins_beside(nvrtc: &Path) -> Option<PathBuf> {
    let dir = nvrtc.parent()?;
    let prefix = match major_of(nvrtc) {
        Some(m) => format!("libnvrtc-builtins.so.{m}."),
        None => "libnvrtc-builtins.so".to_string(),
    };
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect();
    v.sort();
    v.pop()
}

/// The major version in a `lib*.so.N` file name.
fn major_of(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    name.rsplit_once(".so.")?.1.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_from_file_name() {
        assert_eq!(major_of(Path::new("/x/libnvrtc.so.13")), Some(13));
        assert_eq!(major_of(Path::new("libnvrtc.so.12.9")), Some(12));
        assert_eq!(major_of(Path::new("libnvrtc.so")), None);
    }

    #[test]
    fn a_missing_file_is_a_clear_error() {
        let e = Nvrtc::load(FoundLibrary {
            path: PathBuf::from("/nonexistent/libnvrtc.so.13"),
            major: Some(13),
            origin: Origin::CudaHome,
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains("/nonexistent/libnvrtc.so.13"), "{e}");
    }
}
