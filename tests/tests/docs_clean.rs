//! Keeps the API documentation clean: `cargo doc --no-deps --workspace`
//! with `RUSTDOCFLAGS="-D warnings"` (broken or private intra-doc links,
//! bad code-block attributes, and, through `#![warn(missing_docs)]` in every
//! library crate, undocumented public items) must succeed.
//!
//! It documents into its own target directory (`target/docs-clean`), since
//! the outer `cargo test` holds the lock of the usual one; after the first
//! run only the changed crates are documented again.

use std::path::PathBuf;
use std::process::Command;

/// The cargo that runs this test (`CARGO`), else `cargo` from `PATH`.
fn cargo() -> PathBuf {
    std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(Into::into))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("cargo"))
}

#[test]
fn cargo_doc_is_warning_free() {
    let cargo = cargo();
    if Command::new(&cargo).arg("--version").output().is_err() {
        eprintln!(
            "skipped: cannot run `{}` (no cargo to document with)",
            cargo.display()
        );
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lies inside the workspace")
        .to_path_buf();
    let target = root.join("target").join("docs-clean");
    let out = Command::new(&cargo)
        .current_dir(&root)
        .args(["doc", "--no-deps", "--workspace", "--target-dir"])
        .arg(&target)
        .env("RUSTDOCFLAGS", "-D warnings")
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo doc");
    assert!(
        out.status.success(),
        "`RUSTDOCFLAGS=\"-D warnings\" cargo doc --no-deps --workspace` failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
