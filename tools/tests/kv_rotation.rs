//! llama.cpp's attention rotation of a quantized KV cache: `llama-run` with
//! a Q4_0 K/V cache and flash attention gives llama.cpp's own logits for
//! that cache, with the rotation on (the default) and with
//! `LLAMA_ATTN_ROT_DISABLE=1` (llama.cpp 0.5.0-dev's logits for both, in
//! `tests/data/models/tiny-qwen3moe-q4_k.kv-q4_0{,-norot}.logits`).

use std::path::PathBuf;
use std::process::Command;

fn models() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/models")
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn nmse(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    num / den
}

fn run(disable: bool) -> Vec<f32> {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("logits.bin");
    let m = models().join("tiny-qwen3moe-q4_k");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_llama-run"));
    cmd.arg("-m")
        .arg(m.with_extension("gguf"))
        .arg("-f")
        .arg(m.with_extension("prompt.txt"))
        .args([
            "--no-escape",
            "-n",
            "0",
            "-ctk",
            "q4_0",
            "-ctv",
            "q4_0",
            "-fa",
            "on",
        ])
        .arg("--logits-out")
        .arg(&out)
        .env_remove("LLAMA_ATTN_ROT_DISABLE");
    if disable {
        cmd.env("LLAMA_ATTN_ROT_DISABLE", "1");
    }
    let o = cmd.output().expect("llama-run runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    f32s(&std::fs::read(&out).expect("logits"))
}

#[test]
fn q4_0_cache_matches_llama_cpp_with_and_without_the_rotation() {
    for (disable, file) in [
        (false, "tiny-qwen3moe-q4_k.kv-q4_0.logits"),
        (true, "tiny-qwen3moe-q4_k.kv-q4_0-norot.logits"),
    ] {
        let want = f32s(&std::fs::read(models().join(file)).expect("reference"));
        let got = run(disable);
        let e = nmse(&got, &want);
        eprintln!("rotation disabled {disable}: NMSE {e:e} against {file}");
        assert!(e <= 5e-3, "rotation disabled {disable}: NMSE {e:e}");
    }
    // the two references differ by far more than the bound: the rotation
    // is what each run reproduces
    let a = f32s(&std::fs::read(models().join("tiny-qwen3moe-q4_k.kv-q4_0.logits")).expect("a"));
    let b =
        f32s(&std::fs::read(models().join("tiny-qwen3moe-q4_k.kv-q4_0-norot.logits")).expect("b"));
    assert!(nmse(&a, &b) > 1e-2);
}
