//! The scheduler asks its backends only for their device and stream parts
//! (`ggml_core::BackendDevice`, `ggml_core::BackendStream`), never for what
//! a backend records about itself (`ggml_core::BackendDiagnostics`, reached
//! through `Backend::diagnostics`): copy labels, counters, timelines, busy
//! time and clocks are the caller's business (`ExecObserver`).
//!
//! The scheduler holds its backends as `Arc<dyn Backend>` (the engine's one
//! handle on a device), so the type system alone would let it call
//! `diagnostics()`; this test closes that door by scanning `ggml-sched/src`
//! (code only: comments are dropped) for any identifier that belongs to the
//! diagnostics part. The names are read from `ggml-core`'s own trait
//! definitions, so a method added there is covered without editing this
//! test. The scanner is tested first on made-up snippets.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("ggml-sched lies inside the workspace")
        .to_path_buf()
}

/// `text` with its `//` and `/* */` comments blanked (string literals are
/// kept: a comment marker inside one is left alone).
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\\' && i + 1 < b.len() {
                out.push_str(&text[i..i + 2]);
                i += 2;
                continue;
            }
            in_str = c != b'"';
            out.push(c as char);
            i += 1;
        } else if c == b'"' {
            in_str = true;
            out.push('"');
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i = (i + 2).min(b.len());
        } else {
            // copy one whole char (identifiers and punctuation are ASCII)
            let ch = text[i..].chars().next().expect("inside the text");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The identifiers of `code` (comments already dropped).
fn identifiers(code: &str) -> BTreeSet<String> {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
        .map(str::to_string)
        .collect()
}

/// The methods `trait_name` declares in `src` (its own, not its
/// supertraits').
fn trait_methods(src: &str, trait_name: &str) -> BTreeSet<String> {
    let code = strip_comments(src);
    let head = format!("pub trait {trait_name}");
    let start = code
        .find(&head)
        .unwrap_or_else(|| panic!("`{head}` not found"));
    let body = &code[start..];
    let open = body.find('{').expect("the trait has a body");
    let mut depth = 0usize;
    let mut end = body.len();
    for (k, c) in body[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = open + k;
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = &body[open..end];
    inner
        .split("fn ")
        .skip(1)
        .filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// What the scheduler must not name: the diagnostics trait, its methods,
/// and what `Backend` adds to the device and stream parts (its
/// `diagnostics` accessor).
fn forbidden() -> BTreeSet<String> {
    let core = workspace().join("ggml-core/src/backend");
    let read =
        |f: &str| std::fs::read_to_string(core.join(f)).expect("ggml-core's backend sources");
    let mut names = trait_methods(&read("diagnostics.rs"), "BackendDiagnostics");
    names.extend(trait_methods(&read("mod.rs"), "Backend"));
    names.insert("BackendDiagnostics".to_string());
    names
}

/// Files under `dir` ending in `.rs`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("a readable directory") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The forbidden names `code` uses.
fn violations(code: &str, forbidden: &BTreeSet<String>) -> Vec<String> {
    identifiers(&strip_comments(code))
        .intersection(forbidden)
        .cloned()
        .collect()
}

#[test]
fn the_scanner_finds_names_in_code_and_not_in_comments() {
    let f: BTreeSet<String> = ["set_label", "diagnostics"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        violations("fn f(b: &dyn Backend) { b.set_label(\"x\"); }", &f),
        ["set_label"]
    );
    assert_eq!(
        violations("let d = be.diagnostics()?; // set_label", &f),
        ["diagnostics"]
    );
    assert!(violations("// be.set_label(x)\n/* be.diagnostics() */ let a = 1;", &f).is_empty());
    assert!(violations(
        "let s = \"// not a comment\"; relabel(x); set_labels();",
        &f
    )
    .is_empty());
    let m = trait_methods(
        "/// doc\npub trait T: U {\n    fn a(&self) -> u8 { 0 }\n    // fn not_me()\n    fn b_2(&self);\n}\nfn c() {}",
        "T",
    );
    assert_eq!(m.into_iter().collect::<Vec<_>>(), ["a", "b_2"]);
}

#[test]
fn the_forbidden_names_are_the_diagnostics_part() {
    let f = forbidden();
    for name in [
        "BackendDiagnostics",
        "diagnostics",
        "set_label",
        "pipeline_counters",
        "device_clock",
        "busy_wall_ns",
        "set_event_timeline",
        "take_event_timeline",
    ] {
        assert!(f.contains(name), "{name} missing from {f:?}");
    }
    // and none of them is a device or stream method
    let core = workspace().join("ggml-core/src/backend");
    let read =
        |f: &str| std::fs::read_to_string(core.join(f)).expect("ggml-core's backend sources");
    let mut allowed = trait_methods(&read("device.rs"), "BackendDevice");
    allowed.extend(trait_methods(&read("stream.rs"), "BackendStream"));
    assert!(allowed.contains("compute") && allowed.contains("alloc_buffer"));
    assert!(f.is_disjoint(&allowed), "{:?}", f.intersection(&allowed));
}

#[test]
fn the_scheduler_uses_only_the_device_and_stream_parts() {
    let f = forbidden();
    let mut files = Vec::new();
    rust_files(&workspace().join("ggml-sched/src"), &mut files);
    assert!(files.len() > 5, "{files:?}");
    let mut bad = Vec::new();
    for p in files {
        let text = std::fs::read_to_string(&p).expect("a readable source file");
        for name in violations(&text, &f) {
            bad.push(format!("{}: {name}", p.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "the scheduler names a backend's diagnostics:\n{}",
        bad.join("\n")
    );
}
