//! `kernels.cu` compiled by the real NVRTC, without a GPU or a driver,
//! through the backend's own compile path (`kernels::compiled_for`, which
//! `Kernels::load` takes on a device, with the same options), and again by
//! CUDA 13's NVRTC loaded beside it (`kernels::compile_with`):
//! - for every architecture in [`ARCHS`] (and the backend's fallback
//!   architecture), with no error and no warning other than a deprecation
//!   notice, and a PTX that defines every entry point the backend looks up
//!   ([`Kernel::ALL`]) and no other: under the process's NVRTC (CUDA 12)
//!   and under CUDA 13's, by one check ([`every_arch_compiles`]);
//! - a broken copy of one kernel is a compile error carrying NVRTC's log;
//! - a warning in a source is caught, a deprecation notice is let through;
//! - `ptxas` assembles the `compute_90` PTX for `sm_90`: registers, shared
//!   memory, stack and spills per kernel, and no spills in the matvec
//!   kernels;
//! - `ptxas` assembles the PTX of every architecture in [`ARCHS`] for its
//!   `sm_XY`: no kernel spills on any of them, with CUDA 12 (NVRTC and
//!   `ptxas`) and with CUDA 13 (which also prints its `sm_90` resources per
//!   kernel), by one check ([`ptxas_every_arch`]).
//!
//! Without a system `libnvrtc.so` (or `ptxas` on `PATH`) the tests install
//! PyPI's `nvidia-cuda-nvrtc-cu12` (`nvidia-cuda-nvcc-cu12`) into a cache
//! folder (see `cuda_wheels`); CUDA 13 always comes from `nvidia-cuda-nvrtc`
//! (and `nvidia-cuda-nvcc`, unless a CUDA 13 `ptxas` is on `PATH`). Where
//! that cannot be done (no registry, no pip) they print `skipped: <reason>`
//! and pass, unless `GGML_CUDA_REQUIRE_NVRTC=1` makes that a failure.
//!
//! The per-architecture summary is written straight to stderr, so it shows
//! in `cargo test` output without `--nocapture`; each line names the CUDA
//! version (`NVRTC 12.9 compute_90: ...`, `ptxas 13.0 sm_90: ...`).

mod cuda_wheels;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use ggml_core::BackendError;
use ggml_cuda::kernels::{
    compile, compile_with, compiled_for, nvrtc_version, Compiled, Kernel, FALLBACK_ARCH,
    KERNELS_FILE_NAME, KERNELS_SRC, KERNEL_NAMES,
};
use ggml_cuda::nvrtc::Nvrtc;

/// The architectures every CI run compiles for.
const ARCHS: &[&str] = &[
    "compute_75",
    "compute_80",
    "compute_86",
    "compute_89",
    "compute_90",
    "compute_100",
    "compute_120",
];

/// A line on the process's stderr, not captured by the test harness.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Reports that `test` skips, and why; fails instead under
/// `GGML_CUDA_REQUIRE_NVRTC=1`.
fn skip(test: &str, why: &str) {
    let required = std::env::var("GGML_CUDA_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    assert!(!required, "GGML_CUDA_REQUIRE_NVRTC=1 but: {why}");
    report(&format!("{test}: skipped: {why}"));
}

/// Whether NVRTC can be used; reports where it came from or why not.
fn nvrtc_or_skip(test: &str) -> bool {
    match cuda_wheels::ensure_nvrtc() {
        Ok(from) => {
            let version = match nvrtc_version() {
                Ok((major, minor)) => format!("{major}.{minor}"),
                Err(e) => format!("of unknown version ({e})"),
            };
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| report(&format!("{test}: NVRTC {version} from {from}")));
            true
        }
        Err(why) => {
            skip(test, &why);
            false
        }
    }
}

/// `f` of each of `items`, in order, on a few threads (NVRTC and `ptxas`
/// use one core each; more threads than cores only cost memory). A panic
/// in `f` is passed on.
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 4)
        .min(items.len());
    let next = AtomicUsize::new(0);
    let mut out: Vec<Option<R>> = items.iter().map(|_| None).collect();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return done;
                        };
                        done.push((i, f(item)));
                    }
                })
            })
            .collect();
        for w in workers {
            match w.join() {
                Ok(done) => done.into_iter().for_each(|(i, r)| out[i] = Some(r)),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    out.into_iter()
        .map(|r| r.expect("every item mapped"))
        .collect()
}

/// One arch's compile, once (errors as text).
type Slot = Arc<OnceLock<Result<Arc<Compiled>, String>>>;

/// An NVRTC the per-architecture checks compile `kernels.cu` with.
struct Toolchain {
    /// Its version, `12.9`: every summary line names it.
    version: String,
    /// `None`: the process's NVRTC, through the backend's `compiled_for`
    /// (which caches per arch itself).
    nvrtc: Option<Arc<Nvrtc>>,
    /// `nvrtc`'s compiles per arch, once each, shared by the tests.
    cache: Mutex<HashMap<String, Slot>>,
}

impl Toolchain {
    fn new(nvrtc: Option<Arc<Nvrtc>>) -> Toolchain {
        let version = match &nvrtc {
            Some(n) => Ok(n.version()),
            None => nvrtc_version().map_err(|e| e.to_string()),
        };
        Toolchain {
            version: match version {
                Ok((major, minor)) => format!("{major}.{minor}"),
                Err(e) => format!("(unknown version: {e})"),
            },
            nvrtc,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// `kernels.cu` compiled for `arch` with the backend's options.
    fn compiled(&self, arch: &str) -> Result<Arc<Compiled>, String> {
        let Some(nvrtc) = &self.nvrtc else {
            return compiled_for(arch).map_err(|e| e.to_string());
        };
        let slot = Arc::clone(
            self.cache
                .lock()
                .expect("compile cache lock")
                .entry(arch.to_string())
                .or_default(),
        );
        slot.get_or_init(|| {
            compile_with(nvrtc, KERNELS_SRC, arch)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        })
        .clone()
    }
}

/// The process's NVRTC (CUDA 12, see `cuda_wheels::ensure_nvrtc`), or
/// `None` after reporting why the test skips.
fn cuda12_or_skip(test: &str) -> Option<&'static Toolchain> {
    static TC: OnceLock<Toolchain> = OnceLock::new();
    nvrtc_or_skip(test).then(|| TC.get_or_init(|| Toolchain::new(None)))
}

/// CUDA 13's NVRTC loaded beside the process's, or `None` after reporting
/// why the test skips.
fn cuda13_or_skip(test: &str) -> Option<&'static Toolchain> {
    static TC: OnceLock<Toolchain> = OnceLock::new();
    match cuda_wheels::ensure_nvrtc13() {
        Ok(n) => {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| report(&format!("{test}: {}", n.describe())));
            Some(TC.get_or_init(|| Toolchain::new(Some(n))))
        }
        Err(why) => {
            skip(test, &why);
            None
        }
    }
}

/// The warnings of a log other than deprecation notices.
fn unexpected_warnings(c: &Compiled) -> Vec<&str> {
    c.warnings()
        .into_iter()
        .filter(|w| !w.contains("deprecated"))
        .collect()
}

/// One architecture's compile under `tc`: its summary line, and why it is
/// not clean (empty when it is).
fn check_arch(tc: &Toolchain, arch: &str) -> (String, Vec<String>) {
    let v = &tc.version;
    let c = match tc.compiled(arch) {
        Ok(c) => c,
        Err(e) => {
            return (
                format!("NVRTC {v} {arch}: FAILED\n{e}"),
                vec![format!("NVRTC {v} {arch}: {e}")],
            )
        }
    };
    let mut problems = Vec::new();
    let warnings = unexpected_warnings(&c);
    if !warnings.is_empty() {
        problems.push(format!(
            "NVRTC {v} {arch}: {} warning(s):\n{}",
            warnings.len(),
            c.log.trim_end()
        ));
    }
    let entries: Vec<&str> = c.entries().collect();
    let missing: Vec<&str> = KERNEL_NAMES
        .iter()
        .copied()
        .filter(|n| !c.defines_entry(n))
        .collect();
    let unlisted: Vec<&str> = entries
        .iter()
        .copied()
        .filter(|e| !KERNEL_NAMES.contains(e))
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "NVRTC {v} {arch}: PTX lacks entry points {missing:?}"
        ));
    }
    if !unlisted.is_empty() {
        problems.push(format!(
            "NVRTC {v} {arch}: PTX defines entry points the backend does not list: {unlisted:?}"
        ));
    }
    let notices = c.warnings().len() - warnings.len();
    let line = format!(
        "NVRTC {v} {arch}: compiled, PTX {} bytes ({} KiB), {}/{} entry points found{}{}",
        c.ptx.len(),
        c.ptx.len() / 1024,
        KERNEL_NAMES.len() - missing.len(),
        KERNEL_NAMES.len(),
        if notices > 0 {
            format!(", {notices} deprecation notice(s)")
        } else {
            String::new()
        },
        if problems.is_empty() {
            ""
        } else {
            ": NOT CLEAN"
        },
    );
    (line, problems)
}

/// Every architecture in [`ARCHS`] and [`FALLBACK_ARCH`] compiles cleanly
/// under `tc` and defines every entry point and no other: the summaries
/// reported, the problems returned.
fn every_arch_compiles(tc: &Toolchain) -> Vec<String> {
    let archs: Vec<&str> = ARCHS.iter().copied().chain([FALLBACK_ARCH]).collect();
    // NVRTC compiles separate programs on separate threads safely.
    let checked = par_map(&archs, |arch| check_arch(tc, arch));
    let mut problems = Vec::new();
    for (line, p) in checked {
        report(&line);
        problems.extend(p);
    }
    report(&format!(
        "NVRTC {}: {} architectures, entry points {}",
        tc.version,
        archs.len(),
        KERNEL_NAMES.join(" ")
    ));
    problems
}

#[test]
fn kernels_compile_cleanly_for_every_arch_and_define_every_entry_point() {
    let Some(tc) = cuda12_or_skip("kernels_compile") else {
        return;
    };
    let problems = every_arch_compiles(tc);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn cuda13_kernels_compile_cleanly_for_every_arch_and_define_every_entry_point() {
    let Some(tc) = cuda13_or_skip("cuda13_kernels_compile") else {
        return;
    };
    assert!(tc.version.starts_with("13."), "{}", tc.version);
    let problems = every_arch_compiles(tc);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `KERNELS_SRC` with an undefined identifier used in `k_argmax`, and the
/// 1-based line it is on.
fn broken_copy() -> (String, usize) {
    let sig = format!("extern \"C\" __global__ void {}(", Kernel::Argmax.name());
    let at = KERNELS_SRC.find(&sig).expect("k_argmax is defined");
    let body = at + KERNELS_SRC[at..].find('{').expect("k_argmax has a body") + 1;
    let src = format!(
        "{}\n    int broken = no_such_value_in_this_test;\n{}",
        &KERNELS_SRC[..body],
        &KERNELS_SRC[body..]
    );
    let line = KERNELS_SRC[..body].lines().count() + 1;
    (src, line)
}

#[test]
fn a_broken_kernel_is_a_compile_error_with_nvrtcs_log() {
    if !nvrtc_or_skip("broken_kernel") {
        return;
    }
    let (src, line) = broken_copy();
    let err = compile(&src, "compute_90").expect_err("the broken source must not compile");
    let BackendError::Device(msg) = &err else {
        panic!("expected a Device error, got {err:?}");
    };
    report(&format!("broken k_argmax, as reported: {msg}"));
    assert!(msg.contains("NVRTC compile for compute_90 failed"), "{msg}");
    assert!(msg.contains("NVRTC_ERROR_COMPILATION"), "{msg}");
    let at = format!("{KERNELS_FILE_NAME}({line}): error");
    assert!(msg.contains(&at), "no `{at}` in: {msg}");
    assert!(
        msg.contains("identifier \"no_such_value_in_this_test\" is undefined"),
        "{msg}"
    );
}

#[test]
fn warnings_are_caught_and_deprecation_notices_let_through() {
    if !nvrtc_or_skip("warnings") {
        return;
    }
    let src = "extern \"C\" __global__ void k_w(float* d) { int unused = 3; d[0] = 1.0f; }\n";
    let c = compile(src, "compute_90").expect("a warning is not an error");
    report(&format!("warning log: {}", c.log.trim_end()));
    let w = unexpected_warnings(&c);
    assert_eq!(w.len(), 1, "{}", c.log);
    assert!(
        w[0].contains(&format!("{KERNELS_FILE_NAME}(1): warning")),
        "{}",
        w[0]
    );
    assert!(w[0].contains("\"unused\""), "{}", w[0]);
    assert!(c.defines_entry("k_w"), "{}", c.ptx);

    let clean = "extern \"C\" __global__ void k_c(float* d) { d[0] = 1.0f; }\n";
    let old = compile(clean, "compute_61").expect("compute_61 still compiles");
    report(&format!("compute_61 log: {}", old.log.trim_end()));
    assert!(!old.warnings().is_empty(), "expected a deprecation notice");
    assert!(unexpected_warnings(&old).is_empty(), "{}", old.log);
    let new = compile(clean, "compute_90").expect("compiles");
    assert!(new.warnings().is_empty(), "{}", new.log);
}

#[test]
fn bad_architecture_is_a_clear_error() {
    if !nvrtc_or_skip("bad_arch") {
        return;
    }
    let err = compile("extern \"C\" __global__ void k(){}\n", "compute_1")
        .expect_err("no such architecture");
    let msg = err.to_string();
    assert!(msg.contains("NVRTC compile for compute_1 failed"), "{msg}");
    let err = compile("", "compute_90\0").expect_err("NUL in an option");
    assert!(matches!(err, BackendError::InvalidInput(_)), "{err:?}");
    let err = compile("a\0b", "compute_90").expect_err("NUL in the source");
    assert!(matches!(err, BackendError::InvalidInput(_)), "{err:?}");
}

#[test]
fn without_a_registry_the_install_says_why() {
    let dir = std::env::temp_dir().join(format!("ggml-cuda-no-registry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    // nothing listens on port 9 (discard) of the loopback: refused at once
    let err =
        cuda_wheels::install_into(&cuda_wheels::NVRTC, &dir, Some("http://127.0.0.1:9/simple"))
            .expect_err("no registry, no install");
    report(&format!("without a registry: {err}"));
    assert!(
        err.contains(cuda_wheels::NVRTC.name) || err.contains("pip"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("read temp dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "staging left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `ptxas -v` says one function uses.
#[derive(Clone, Copy, Debug, Default)]
struct Resources {
    registers: u32,
    smem: u32,
    stack: u32,
    spill_stores: u32,
    spill_loads: u32,
    /// Whether both spill counts were read (a "no spills" is not just an
    /// unread line).
    spills_read: bool,
}

/// The number just before `unit` in `line` (`"24 registers"`).
fn number_before(line: &str, unit: &str) -> Option<u32> {
    let at = line.find(unit)?;
    line[..at]
        .split([' ', ','])
        .rfind(|t| !t.is_empty())?
        .parse()
        .ok()
}

/// Per-function resources from `ptxas -v` output:
/// `Function properties for NAME` / `N bytes stack frame, N bytes spill
/// stores, N bytes spill loads` / `Used N registers, ..., N bytes smem`.
fn parse_ptxas_info(text: &str) -> HashMap<String, Resources> {
    let mut out: HashMap<String, Resources> = HashMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let quoted = line.split('\'').nth(1);
        if line.contains("Compiling entry function") {
            current = quoted.map(str::to_string);
        } else if let Some(name) = line.split("Function properties for ").nth(1) {
            current = Some(name.trim().to_string());
        }
        let Some(name) = current.clone() else {
            continue;
        };
        let r = out.entry(name).or_default();
        if line.contains("bytes stack frame") {
            r.stack = number_before(line, "bytes stack frame").unwrap_or(0);
            let stores = number_before(line, "bytes spill stores");
            let loads = number_before(line, "bytes spill loads");
            r.spill_stores = stores.unwrap_or(0);
            r.spill_loads = loads.unwrap_or(0);
            r.spills_read = stores.is_some() && loads.is_some();
        }
        if line.contains("Used ") && line.contains("registers") {
            r.registers = number_before(line, "registers").unwrap_or(0);
            r.smem = number_before(line, "bytes smem").unwrap_or(0);
        }
    }
    out
}

#[test]
fn ptxas_parser_reads_ptxas_info_lines() {
    // lines in the form ptxas 12.9 -v writes them
    let text = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_a' for 'sm_90'
ptxas info    : Function properties for k_a
    56 bytes stack frame, 88 bytes spill stores, 96 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 2048 bytes smem, 56 bytes cumulative stack size
ptxas info    : Compiling entry function 'k_b' for 'sm_90'
ptxas info    : Function properties for k_b
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 18 registers, used 0 barriers
ptxas info    : Compiling entry function 'k_c' for 'sm_90'
ptxas info    : Function properties for k_c
    8 bytes stack frame
ptxas info    : Used 20 registers, used 0 barriers
ptxas info    : Compile time = 6.699 ms
";
    let r = parse_ptxas_info(text);
    let a = r["k_a"];
    assert_eq!(
        (a.registers, a.smem, a.stack, a.spill_stores, a.spill_loads),
        (24, 2048, 56, 88, 96)
    );
    let b = r["k_b"];
    assert_eq!(
        (b.registers, b.smem, b.stack, b.spill_stores, b.spill_loads),
        (18, 0, 0, 0, 0)
    );
    assert!(a.spills_read && b.spills_read, "{a:?} {b:?}");
    // a properties line without spill counts: "no spills" is not read
    let c = r["k_c"];
    assert_eq!(
        (c.registers, c.stack, c.spills_read),
        (20, 8, false),
        "{c:?}"
    );
}

/// The kernels that must not spill: the matrix-vector products that
/// decode runs.
const NO_SPILL: &[Kernel] = &[
    Kernel::MulMatVec,
    Kernel::MulMatIdVec,
    Kernel::Mmvq,
    Kernel::MmvqId,
];

/// `ptxas -arch=sm_90 -v` (plus `extra`) on `ptx`: its info output.
fn ptxas_info(ptxas: &std::path::Path, ptx: &str, tag: &str, extra: &[&str]) -> String {
    ptxas_info_for(ptxas, "sm_90", ptx, tag, extra)
}

/// `ptxas -arch=SM -v` (plus `extra`) on `ptx`: its info output.
fn ptxas_info_for(
    ptxas: &std::path::Path,
    sm: &str,
    ptx: &str,
    tag: &str,
    extra: &[&str],
) -> String {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let file = dir.join(format!(
        "ggml-cuda-kernels-{}-{tag}-{sm}.ptx",
        std::process::id()
    ));
    let cubin = file.with_extension("cubin");
    std::fs::write(&file, ptx).expect("write the PTX");
    let out = Command::new(ptxas)
        .arg(format!("-arch={sm}"))
        .arg("-v")
        .args(extra)
        .arg("-o")
        .arg(&cubin)
        .arg(&file)
        .output();
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&cubin);
    let out = out.unwrap_or_else(|e| panic!("running {}: {e}", ptxas.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "ptxas {extra:?} failed ({}):\n{text}",
        out.status
    );
    text
}

/// `ptxas`'s release (`12.9`) from its `--version`, or what it said.
fn ptxas_release(ptxas: &Path) -> String {
    let out = match Command::new(ptxas).arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => return format!("(no version: {e})"),
    };
    out.split("release ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .map_or_else(
            || format!("(unknown release: {})", out.trim()),
            str::to_string,
        )
}

/// One kernel's line of the resource summary.
fn resource_line(ptxas: &str, sm: &str, name: &str, r: &Resources) -> String {
    format!(
        "ptxas {ptxas} {sm} {name}: {} registers, {} B smem, {} B stack, spills {} B stores / {} B loads",
        r.registers, r.smem, r.stack, r.spill_stores, r.spill_loads
    )
}

#[test]
fn ptxas_sm_90_resources_per_kernel_and_no_spills_in_matvec() {
    if !nvrtc_or_skip("ptxas") {
        return;
    }
    let ptxas = match cuda_wheels::ensure_ptxas() {
        Ok(p) => p,
        Err(why) => return skip("ptxas", &why),
    };
    let release = ptxas_release(&ptxas);
    report(&format!("ptxas: {} (release {release})", ptxas.display()));
    let c = compiled_for("compute_90").expect("compute_90 compiles");
    // the same PTX squeezed to 32 registers (the int8 MMA needs at least 25), where
    // the matvec kernels do spill: shows the spill check reads real output
    let (text, squeezed) = std::thread::scope(|s| {
        let squeezed = s.spawn(|| ptxas_info(&ptxas, &c.ptx, "squeezed", &["--maxrregcount=32"]));
        let text = ptxas_info(&ptxas, &c.ptx, "plain", &[]);
        (text, squeezed.join().expect("ptxas thread"))
    });
    for w in text.lines().filter(|l| l.contains("warning")) {
        report(&format!("ptxas {release} sm_90: {w}"));
    }
    let res = parse_ptxas_info(&text);
    let tight = parse_ptxas_info(&squeezed);
    let spills = |r: &Resources| r.spill_stores > 0 || r.spill_loads > 0;
    let mut problems = Vec::new();
    for k in Kernel::ALL {
        let Some(r) = res.get(k.name()) else {
            problems.push(format!("ptxas reported nothing for {}", k.name()));
            continue;
        };
        report(&resource_line(&release, "sm_90", k.name(), r));
        if NO_SPILL.contains(&k) && spills(r) {
            problems.push(format!("{} spills: {r:?}", k.name()));
        }
    }
    assert!(problems.is_empty(), "{}\n{text}", problems.join("\n"));
    for k in NO_SPILL {
        let r = tight.get(k.name()).copied().unwrap_or_default();
        assert!(
            spills(&r),
            "{} under --maxrregcount=32 should spill, read {r:?}:\n{squeezed}",
            k.name()
        );
    }
}

/// What [`ptxas_every_arch`] found.
struct EveryArch {
    /// `ptxas`'s release (`13.0`).
    release: String,
    /// Per `sm_XY`, the resources of each kernel.
    resources: Vec<(String, HashMap<String, Resources>)>,
    /// Why it is not clean (empty when it is).
    problems: Vec<String>,
}

/// `ptxas` assembles the PTX `tc` compiles for each architecture in
/// [`ARCHS`] for its `sm_XY`, and no kernel spills: a summary per
/// architecture reported; the problems and resources returned.
fn ptxas_every_arch(tc: &Toolchain, ptxas: &Path) -> EveryArch {
    let release = ptxas_release(ptxas);
    report(&format!(
        "ptxas {release}: {} on NVRTC {}'s PTX",
        ptxas.display(),
        tc.version
    ));
    let tag = format!("arch-nvrtc{}", tc.version);
    let per_arch = par_map(ARCHS, |arch| {
        let sm = arch.replace("compute_", "sm_");
        let c = match tc.compiled(arch) {
            Ok(c) => c,
            Err(e) => {
                let problem = format!("NVRTC {} {arch}: {e}", tc.version);
                return (sm, HashMap::new(), vec![problem], String::new());
            }
        };
        let text = ptxas_info_for(ptxas, &sm, &c.ptx, &tag, &[]);
        let res = parse_ptxas_info(&text);
        let mut problems = Vec::new();
        let mut worst = (0u32, "");
        for k in Kernel::ALL {
            match res.get(k.name()) {
                None => problems.push(format!(
                    "ptxas {release} {sm}: reported nothing for {}",
                    k.name()
                )),
                Some(r) => {
                    if !r.spills_read {
                        problems.push(format!(
                            "ptxas {release} {sm}: no spill counts read for {}",
                            k.name()
                        ));
                    }
                    if r.spill_stores > 0 || r.spill_loads > 0 {
                        problems.push(format!("ptxas {release} {sm}: {} spills: {r:?}", k.name()));
                    }
                    if r.registers > worst.0 {
                        worst = (r.registers, k.name());
                    }
                }
            }
        }
        let mut line = format!(
            "ptxas {release} {sm}: {} kernels, no spills checked, most registers {} ({})",
            res.len(),
            worst.0,
            worst.1
        );
        for w in text.lines().filter(|l| l.contains("warning")) {
            line.push_str(&format!("\nptxas {release} {sm}: {w}"));
        }
        (sm, res, problems, line)
    });
    let mut problems = Vec::new();
    let mut resources = Vec::new();
    for (sm, res, p, line) in per_arch {
        if !line.is_empty() {
            report(&line);
        }
        problems.extend(p);
        resources.push((sm, res));
    }
    EveryArch {
        release,
        resources,
        problems,
    }
}

#[test]
fn ptxas_every_arch_no_kernel_spills() {
    let Some(tc) = cuda12_or_skip("ptxas_every_arch") else {
        return;
    };
    let ptxas = match cuda_wheels::ensure_ptxas() {
        Ok(p) => p,
        Err(why) => return skip("ptxas_every_arch", &why),
    };
    let found = ptxas_every_arch(tc, &ptxas);
    assert!(found.problems.is_empty(), "{}", found.problems.join("\n"));
}

#[test]
fn cuda13_ptxas_every_arch_no_kernel_spills_and_sm_90_resources() {
    let Some(tc) = cuda13_or_skip("cuda13_ptxas_every_arch") else {
        return;
    };
    let ptxas = match cuda_wheels::ensure_ptxas13() {
        Ok(p) => p,
        Err(why) => return skip("cuda13_ptxas_every_arch", &why),
    };
    let EveryArch {
        release,
        resources,
        problems,
    } = ptxas_every_arch(tc, &ptxas);
    assert!(release.starts_with("13."), "ptxas release {release}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let (sm, res) = resources
        .iter()
        .find(|(sm, _)| sm == "sm_90")
        .expect("sm_90 is in ARCHS");
    for k in Kernel::ALL {
        let r = res.get(k.name()).expect("checked above");
        report(&resource_line(&release, sm, k.name(), r));
    }
}
