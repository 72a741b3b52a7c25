//! `kernels.cu` compiled by the real NVRTC, without a GPU or a driver,
//! through the backend's own compile path (`kernels::compiled_for`, which
//! `Kernels::load` takes on a device, with the same options):
//! - for every architecture in [`ARCHS`] (and the backend's fallback
//!   architecture), with no error and no warning other than a deprecation
//!   notice, and a PTX that defines every entry point the backend looks up
//!   ([`Kernel::ALL`]) and no other;
//! - a broken copy of one kernel is a compile error carrying NVRTC's log;
//! - a warning in a source is caught, a deprecation notice is let through.
//!
//! Without a system `libnvrtc.so` the tests install PyPI's
//! `nvidia-cuda-nvrtc-cu12` into a cache folder (see `nvrtc_wheel`); where
//! that cannot be done (no registry, no pip) they print `skipped: <reason>`
//! and pass, unless `GGML_CUDA_REQUIRE_NVRTC=1` makes that a failure.
//!
//! The per-architecture summary is written straight to stderr, so it shows
//! in `cargo test` output without `--nocapture`.

mod nvrtc_wheel;

use std::io::Write;

use ggml_core::BackendError;
use ggml_cuda::kernels::{
    compile, compiled_for, Compiled, Kernel, FALLBACK_ARCH, KERNELS_FILE_NAME, KERNELS_SRC,
    KERNEL_NAMES,
};

/// The architectures every CI run compiles for.
const ARCHS: &[&str] = &[
    "compute_75",
    "compute_86",
    "compute_89",
    "compute_90",
    "compute_120",
];

/// A line on the process's stderr, not captured by the test harness.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Whether NVRTC can be used; reports where it came from or why not.
fn nvrtc_or_skip(test: &str) -> bool {
    match nvrtc_wheel::ensure_nvrtc() {
        Ok(from) => {
            report(&format!("{test}: NVRTC from {from}"));
            true
        }
        Err(why) => {
            let required = std::env::var("GGML_CUDA_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
            assert!(!required, "GGML_CUDA_REQUIRE_NVRTC=1 but: {why}");
            report(&format!("{test}: skipped: {why}"));
            false
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

/// Why one architecture's compile is not clean (empty when it is).
fn check_arch(arch: &str) -> Vec<String> {
    let c = match compiled_for(arch) {
        Ok(c) => c,
        Err(e) => {
            report(&format!("NVRTC {arch}: FAILED\n{e}"));
            return vec![format!("{arch}: {e}")];
        }
    };
    let mut problems = Vec::new();
    let warnings = unexpected_warnings(&c);
    if !warnings.is_empty() {
        problems.push(format!(
            "{arch}: {} warning(s):\n{}",
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
        problems.push(format!("{arch}: PTX lacks entry points {missing:?}"));
    }
    if !unlisted.is_empty() {
        problems.push(format!(
            "{arch}: PTX defines entry points the backend does not list: {unlisted:?}"
        ));
    }
    let notices = c.warnings().len() - warnings.len();
    report(&format!(
        "NVRTC {arch}: compiled, PTX {} bytes ({} KiB), {}/{} entry points found{}{}",
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
    ));
    problems
}

#[test]
fn kernels_compile_cleanly_for_every_arch_and_define_every_entry_point() {
    if !nvrtc_or_skip("kernels_compile") {
        return;
    }
    let archs: Vec<&str> = ARCHS.iter().copied().chain([FALLBACK_ARCH]).collect();
    // NVRTC compiles separate programs on separate threads safely.
    let problems: Vec<String> = std::thread::scope(|s| {
        let jobs: Vec<_> = archs
            .iter()
            .map(|&arch| s.spawn(move || check_arch(arch)))
            .collect();
        jobs.into_iter()
            .flat_map(|j| {
                j.join()
                    .unwrap_or_else(|_| vec!["a compile thread panicked".into()])
            })
            .collect()
    });
    report(&format!(
        "NVRTC: {} architectures, entry points {}",
        archs.len(),
        KERNEL_NAMES.join(" ")
    ));
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
    let err = nvrtc_wheel::install_into(&dir, Some("http://127.0.0.1:9/simple"))
        .expect_err("no registry, no install");
    report(&format!("without a registry: {err}"));
    assert!(
        err.contains(nvrtc_wheel::WHEEL) || err.contains("pip"),
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
