//! Build information for `llama-bench`'s `build_commit` / `build_number`:
//! the short commit hash and commit count of the git checkout the crate is
//! built from, or `unknown` / `0` when there is no git or no checkout (a
//! packaged crate, a copied tree). Never fails the build.

use std::path::Path;
use std::process::Command;

/// Run `git ARGS` in the crate directory; its trimmed stdout on success.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let number = git(&["rev-list", "--count", "HEAD"])
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    println!("cargo:rustc-env=GGML_RS_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=GGML_RS_BUILD_NUMBER={number}");
    // rebuild when HEAD moves: HEAD itself (branch switch) and the branch's
    // ref file (new commit); only files that exist, since cargo reruns the
    // script on every build for a missing one
    let mut watch = Vec::new();
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        watch.push(head);
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &r]) {
            watch.push(p);
        }
    }
    if let Some(p) = git(&["rev-parse", "--git-path", "packed-refs"]) {
        watch.push(p);
    }
    if watch.is_empty() {
        // git failed (or is absent): still watch the nearest `.git` (a
        // directory's HEAD, or a worktree's `.git` file), so that a later
        // build where git works reruns this script instead of keeping
        // `unknown` for good
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        if let Some(g) = dir.ancestors().map(|a| a.join(".git")).find(|g| g.exists()) {
            let head = g.join("HEAD");
            watch.push(if head.exists() { head } else { g }.display().to_string());
        }
    }
    for w in watch {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(&w);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
}
