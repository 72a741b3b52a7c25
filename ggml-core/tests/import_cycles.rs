//! ggml-core's layering: no import circle between its modules (with
//! `quants/` and without it), at the granularity of top-level modules and
//! of files, as `scripts/import-cycles` finds them. The checker itself is tested first
//! on small made-up crates, one per kind of path it must follow (groups,
//! `super::`, re-exports in lib.rs, comments and strings that are no code).
//!
//! Skipped, saying so, where `python3` cannot be run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("ggml-core lies inside the workspace")
        .to_path_buf()
}

fn have_python() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: cannot run `python3` (scripts/import-cycles needs it)");
    }
    ok
}

/// Run the checker on `src` with `args`; (exit code, stdout).
fn check(src: &Path, args: &[&str]) -> (i32, String) {
    let script = workspace().join("scripts").join("import-cycles");
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new("python3")
        .arg(&script)
        .args(args)
        .arg(src)
        .output()
        .expect("python3 runs");
    let out = String::from_utf8_lossy(&stdout).into_owned();
    let code = status.code().expect("the checker exits, not killed");
    assert!(
        code == 0 || code == 1,
        "the checker failed (exit {code}):\n{out}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    (code, out)
}

/// A made-up crate `name` with `files` (path, text) in a fresh directory.
fn fixture(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ggml-core-import-cycles-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("a file in a directory")).expect("mkdir");
        std::fs::write(&p, text).expect("write fixture");
    }
    dir
}

#[test]
fn ggml_core_has_no_import_circle_outside_quants() {
    if !have_python() {
        return;
    }
    let src = workspace().join("ggml-core").join("src");
    let src = src.to_str().expect("a UTF-8 path");
    let (code, out) = check(Path::new(src), &["--exclude", "quants"]);
    assert_eq!(code, 0, "import circles in ggml-core:\n{out}");
    assert!(out.contains("top-level modules: no import circle"), "{out}");
    assert!(out.contains("files: no import circle"), "{out}");
}

/// `quants/` too: the block files (layouts and scalar references) are
/// imported by the SIMD levels and the tables, never the reverse.
#[test]
fn ggml_core_has_no_import_circle_quants_included() {
    if !have_python() {
        return;
    }
    let src = workspace().join("ggml-core").join("src");
    let src = src.to_str().expect("a UTF-8 path");
    let (code, out) = check(Path::new(src), &[]);
    assert_eq!(code, 0, "import circles in ggml-core:\n{out}");
    assert!(out.contains("files: no import circle"), "{out}");
}

#[test]
fn a_reexport_in_lib_rs_counts_for_the_module_it_comes_from() {
    if !have_python() {
        return;
    }
    let dir = fixture(
        "reexport",
        &[
            ("lib.rs", "pub mod a;\npub mod b;\npub use b::Beta;\n"),
            (
                "a.rs",
                "pub fn alpha() -> crate::Beta {\n    crate::Beta\n}\n",
            ),
            (
                "b.rs",
                "pub struct Beta;\npub fn beta() {\n    crate::a::alpha();\n}\n",
            ),
        ],
    );
    let (code, out) = check(&dir, &["--level", "top"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("circle of 2: a, b"), "{out}");
    assert!(out.contains("a.rs:1: crate::Beta"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn use_groups_are_followed_into_nested_braces() {
    if !have_python() {
        return;
    }
    let dir = fixture(
        "groups",
        &[
            ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
            (
                "a.rs",
                "use crate::{c::Gamma, b::{Beta, self as bee}};\npub const A: u8 = 0;\n",
            ),
            (
                "b.rs",
                "pub struct Beta;\npub fn f() -> u8 {\n    crate::a::A\n}\n",
            ),
            ("c.rs", "pub struct Gamma;\n"),
        ],
    );
    let (code, out) = check(&dir, &["--level", "top"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("circle of 2: a, b"), "{out}");
    assert!(out.contains("use crate::b::Beta"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn super_paths_resolve_from_the_file_and_inline_modules() {
    if !have_python() {
        return;
    }
    let dir = fixture(
        "super",
        &[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            ("a/mod.rs", "mod inner;\npub struct A;\n"),
            ("a/inner.rs", "use super::super::b::B;\n"),
            (
                "b.rs",
                "pub struct B;\npub fn f() -> crate::a::A {\n    crate::a::A\n}\n\
                 #[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
            ),
        ],
    );
    // top level: a -> b (through a/inner.rs) and b -> a
    let (code, out) = check(&dir, &["--level", "top"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("circle of 2: a, b"), "{out}");
    assert!(
        out.contains("a/inner.rs:1: use super::super::b::B"),
        "{out}"
    );
    // files: a/inner.rs -> b.rs -> a/mod.rs, and `mod inner;` is no import
    let (code, out) = check(&dir, &["--level", "file"]);
    assert_eq!(code, 0, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn comments_and_strings_are_not_code_and_excluded_modules_drop_out() {
    if !have_python() {
        return;
    }
    let dir = fixture(
        "comments",
        &[
            ("lib.rs", "pub mod a;\npub mod b;\npub mod q;\n"),
            (
                "a.rs",
                "// use crate::b::B;\n/* crate::b::B /* nested */ */\n\
                 pub const S: &str = \"crate::b::B\";\npub struct A;\n\
                 pub fn q() -> crate::q::Q {\n    crate::q::Q\n}\n",
            ),
            ("b.rs", "use crate::a::A;\npub struct B;\n"),
            (
                "q.rs",
                "pub struct Q;\npub fn a() -> crate::a::A {\n    crate::a::A\n}\n",
            ),
        ],
    );
    let (code, out) = check(&dir, &[]);
    assert_eq!(code, 1, "a <-> q is a circle:\n{out}");
    assert!(out.contains("circle of 2: a, q"), "{out}");
    assert!(!out.contains("circle of 2: a, b"), "{out}");
    let (code, out) = check(&dir, &["--exclude", "q"]);
    assert_eq!(code, 0, "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
