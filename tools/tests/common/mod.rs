//! Helpers shared by the integration tests: run a tool binary with a
//! private cache directory and read the fixture files, found by
//! `fixtures::fixture_path` (tests/data, then ../shared/fixtures); a test
//! prints the `SkipReason` of an absent one (`or_skip!`) and returns.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

// not every test crate that includes this module skips
#[allow(unused_imports)]
pub use fixtures::or_skip;
use fixtures::{fixture_path, SkipReason};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The fixture model file `models/FILE` (`NAME.gguf`, `NAME.logits`, ...),
/// or why it is absent.
pub fn model(file: &str) -> Result<PathBuf, SkipReason> {
    fixture_path(&format!("models/{file}"))
}

/// `models/FILE` of the lean set tracked in tests/data (tiny-qwen3moe-f32's
/// files); its absence is an incomplete checkout, not a skip.
pub fn lean_model(file: &str) -> PathBuf {
    fixtures::lean_path(&format!("models/{file}"))
}

/// Run `bin` with `args` and a cache directory of its own.
pub fn run(bin: &str, args: &[&str], cache: &Path) -> Output {
    Command::new(bin)
        .args(args)
        .env("GGML_RS_CACHE", cache)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"))
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Assert success, showing stderr otherwise.
pub fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

pub fn read_i32(p: &Path) -> Vec<i32> {
    std::fs::read(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub fn read_f32(p: &Path) -> Vec<f32> {
    std::fs::read(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// mean((a-b)^2) / mean(b^2)
pub fn nmse(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    num / den.max(1e-30)
}

/// The tiny qwen3moe F32 fixture's path, as a string argument.
pub fn f32_model() -> String {
    lean_model("tiny-qwen3moe-f32.gguf")
        .to_string_lossy()
        .into_owned()
}

/// `bin args` exits 1 without a panic, and stderr holds every needle.
pub fn fails_with_exit_1(bin: &str, args: &[&str], needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let o = run(bin, args, dir.path());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{bin} {args:?}:\n{err}");
    assert!(!err.contains("panicked"), "{bin} {args:?}:\n{err}");
    for n in needles {
        assert!(
            err.contains(n),
            "{bin} {args:?}: stderr lacks {n:?}:\n{err}"
        );
    }
}
