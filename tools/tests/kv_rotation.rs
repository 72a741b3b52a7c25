//! llama.cpp's attention rotation of a quantized KV cache: `llama-run` with
//! a Q4_0 K/V cache and flash attention gives llama.cpp's own logits for
//! that cache, with the rotation on (the default) and with
//! `LLAMA_ATTN_ROT_DISABLE=1` (llama.cpp 0.5.0-dev's logits for both, in
//! `tests/data/models/tiny-qwen3moe-q4_k.kv-q4_0{,-norot}.logits`).

use std::process::Command;

mod common;
use common::{model, nmse, read_f32};

fn run(disable: bool) -> Vec<f32> {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("logits.bin");
    let m = model("tiny-qwen3moe-q4_k.gguf");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_llama-run"));
    cmd.arg("-m")
        .arg(&m)
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
    read_f32(&out)
}

#[test]
fn q4_0_cache_matches_llama_cpp_with_and_without_the_rotation() {
    for (disable, file) in [
        (false, "tiny-qwen3moe-q4_k.kv-q4_0.logits"),
        (true, "tiny-qwen3moe-q4_k.kv-q4_0-norot.logits"),
    ] {
        let want = read_f32(&model(file));
        let got = run(disable);
        let e = nmse(&got, &want);
        eprintln!("rotation disabled {disable}: NMSE {e:e} against {file}");
        assert!(e <= 5e-3, "rotation disabled {disable}: NMSE {e:e}");
    }
    // the two references differ by far more than the bound: the rotation
    // is what each run reproduces
    let a = read_f32(&model("tiny-qwen3moe-q4_k.kv-q4_0.logits"));
    let b = read_f32(&model("tiny-qwen3moe-q4_k.kv-q4_0-norot.logits"));
    assert!(nmse(&a, &b) > 1e-2);
}
