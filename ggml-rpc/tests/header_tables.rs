//! The ordinal tables against the `ggml.h` protocol 7.0.0 was built with:
//! `GGML_H=/path/to/ggml.h`, else llama.cpp's tree in the reference cache
//! (`../shared/tools/llama-cpp-ref.sh`). Skips, saying so, where neither is
//! there.

use std::path::PathBuf;

use ggml_rpc::ordinals::{GLU_NAMES, OP_NAMES, TYPES, UNARY_NAMES};

fn header() -> Result<String, String> {
    let p = match std::env::var_os("GGML_H").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(
            ".cache/llama-cpp-ref/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/include/ggml.h",
        ),
    };
    std::fs::read_to_string(&p)
        .map_err(|e| format!("no ggml.h at {} ({e}); set GGML_H", p.display()))
}

/// The members of `enum NAME { ... };` with `prefix` stripped, numbered as
/// C numbers them (explicit `= N` resets the count), `*_COUNT` dropped.
fn parse_enum(text: &str, name: &str, prefix: &str) -> Vec<(String, i64)> {
    let start = text
        .find(&format!("enum {name} {{"))
        .unwrap_or_else(|| panic!("enum {name} not in ggml.h"));
    let body = &text[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("};").unwrap()];
    let mut out = Vec::new();
    let mut next = 0i64;
    for line in body.lines() {
        let code = line.split("//").next().unwrap_or("");
        for item in code.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (n, v) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), v.trim().parse::<i64>().expect("a number")),
                None => (item, next),
            };
            next = v + 1;
            let n = n
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("{n} lacks {prefix}"));
            if n != "COUNT" {
                out.push((n.to_string(), v));
            }
        }
    }
    out
}

fn by_index(names: &[&str]) -> Vec<(String, i64)> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), i as i64))
        .collect()
}

#[test]
fn tables_match_the_pinned_ggml_h() {
    let h = match header() {
        Ok(h) => h,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    assert_eq!(parse_enum(&h, "ggml_op", "GGML_OP_"), by_index(&OP_NAMES));
    assert_eq!(
        parse_enum(&h, "ggml_unary_op", "GGML_UNARY_OP_"),
        by_index(&UNARY_NAMES)
    );
    assert_eq!(
        parse_enum(&h, "ggml_glu_op", "GGML_GLU_OP_"),
        by_index(&GLU_NAMES)
    );
    let types: Vec<(String, i64)> = TYPES
        .iter()
        .map(|(n, v)| (n.to_string(), i64::from(*v)))
        .collect();
    assert_eq!(parse_enum(&h, "ggml_type", "GGML_TYPE_"), types);
    // the header's own guard of the op count
    assert!(
        h.contains("GGML_OP_COUNT == 101") || !h.contains("GGML_OP_COUNT =="),
        "ggml-rpc.h pins another op count"
    );
}

#[test]
fn the_rpc_header_pins_7_0_0() {
    let rpc = PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(
        ".cache/llama-cpp-ref/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/include/ggml-rpc.h",
    );
    let Ok(r) = std::fs::read_to_string(&rpc) else {
        println!("skipped: no ggml-rpc.h at {}", rpc.display());
        return;
    };
    let v = ggml_rpc::VERSION;
    for (what, n) in [("MAJOR", v.major), ("MINOR", v.minor), ("PATCH", v.patch)] {
        assert!(
            r.contains(&format!("#define RPC_PROTO_{what}_VERSION    {n}")),
            "RPC_PROTO_{what}_VERSION is not {n}"
        );
    }
    assert!(r.contains("GGML_OP_COUNT == 101"));
}
