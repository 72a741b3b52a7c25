//! `llama-quantize`: the F32 fixture converted to Q8_0 / Q4_0 / Q4_K keeps its
//! norms and router, converts every other matrix, and still tracks
//! llama.cpp's F32 logits (bounds from the types' weight error: Q8_0 about
//! 0.7% RMS gives NMSE ~1e-3 here, 4-bit types about 10% give ~0.1; a broken
//! quantizer lands at 1 and above); bad arguments are clear errors.

use std::process::Command;
use std::sync::Arc;

use ggml_core::gguf::GgufFile;
use ggml_core::GgmlType;
use llama::{Context, ContextParams, Model, ModelParams};

/// `models/FILE` of tiny-qwen3moe-f32, in the lean set tracked in tests/data.
fn data(p: &str) -> std::path::PathBuf {
    fixtures::lean_path(&format!("models/{p}"))
}

fn prompt_nmse(file: GgufFile) -> f64 {
    let tokens: Vec<i32> =
        bytemuck::pod_collect_to_vec(&std::fs::read(data("tiny-qwen3moe-f32.tokens")).unwrap());
    let want: Vec<f32> =
        bytemuck::pod_collect_to_vec(&std::fs::read(data("tiny-qwen3moe-f32.logits")).unwrap());
    let model = Arc::new(Model::from_gguf(file, ModelParams::default()).expect("load"));
    let p = ContextParams {
        n_ctx: 128,
        n_batch: 128,
        n_ubatch: 128,
        n_threads: 2,
        ..Default::default()
    };
    let mut ctx = Context::new(model, p).expect("context");
    ctx.decode(&tokens, true).expect("decode");
    let got: Vec<f32> = (0..tokens.len())
        .flat_map(|i| ctx.logits(i).unwrap().to_vec())
        .collect();
    let num: f64 = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
        .sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    num / den
}

#[test]
fn quantized_fixture_converts_matrices_and_stays_close() {
    let dir = tempfile::tempdir().unwrap();
    for (ty, fallback, bound) in [
        ("q8_0", "q8_0", 5e-3),
        ("q4_0", "q4_0", 0.3),
        ("q4_K", "q5_0", 0.3),
    ] {
        let out = dir.path().join(format!("q-{ty}.gguf"));
        // --pure: every matrix to the one type (without it, q4_0 and q4_K
        // are llama.cpp's mixes, tested in quantize_mixes.rs)
        let o = Command::new(env!("CARGO_BIN_EXE_llama-quantize"))
            .arg("--pure")
            .arg(data("tiny-qwen3moe-f32.gguf"))
            .arg(&out)
            .arg(ty)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let f = GgufFile::open(&out).unwrap();
        // n_embd 64: rows do not split into 256-element K-quant blocks, so
        // q4_K falls back to q5_0 as in llama.cpp
        let want = GgmlType::from_name(fallback).unwrap();
        for t in f.tensors() {
            let keep = t.n_dims < 2 || t.name.contains("ffn_gate_inp");
            let expect = if keep { GgmlType::F32 } else { want };
            assert_eq!(t.ty, expect, "{}", t.name);
        }
        let e = prompt_nmse(f);
        println!("{ty}: prompt NMSE vs llama.cpp's F32 logits {e:.2e}");
        assert!(e < bound, "{ty}: NMSE {e:.2e}");
    }
}

#[test]
fn bad_quantize_arguments_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&std::ffi::OsStr]| {
        Command::new(env!("CARGO_BIN_EXE_llama-quantize"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = dir.path().join("x.gguf");
    let o = run(&[
        data("tiny-qwen3moe-f32.gguf").as_os_str(),
        out.as_os_str(),
        "q9_Z".as_ref(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("unknown type 'q9_Z'") && !err.contains("panicked"),
        "{err}"
    );
    let o = run(&[
        data("tiny-qwen3moe-f32.gguf").as_os_str(),
        out.as_os_str(),
        "i32".as_ref(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("not a weight type"),
        "{err}"
    );
    let o = run(&[
        "/nonexistent.gguf".as_ref(),
        out.as_os_str(),
        "q8_0".as_ref(),
    ]);
    assert!(!o.status.success() && !String::from_utf8_lossy(&o.stderr).contains("panicked"));
}
