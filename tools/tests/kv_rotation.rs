//! llama.cpp's attention rotation of a quantized KV cache: `llama-run` with
//! a Q4_0 K/V cache and flash attention gives llama.cpp's own logits for
//! that cache, with the rotation on (the default) and with
//! `LLAMA_ATTN_ROT_DISABLE=1` (llama.cpp 0.5.0-dev's logits for both, in
//! `tests/data/models/tiny-qwen3moe-q4_k.kv-q4_0{,-norot}.logits`; the model
//! itself comes from ../shared/fixtures).

use std::process::Command;

mod common;
use std::path::Path;

use common::{model, nmse, or_skip, read_f32};

fn run(gguf: &Path, prompt: &Path, disable: bool) -> Vec<f32> {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("logits.bin");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_llama-run"));
    cmd.arg("-m")
        .arg(gguf)
        .arg("-f")
        .arg(prompt)
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
    let gguf = or_skip!(model("tiny-qwen3moe-q4_k.gguf"));
    let prompt = or_skip!(model("tiny-qwen3moe-q4_k.prompt.txt"));
    let rot = or_skip!(model("tiny-qwen3moe-q4_k.kv-q4_0.logits"));
    let norot = or_skip!(model("tiny-qwen3moe-q4_k.kv-q4_0-norot.logits"));
    for (disable, file) in [(false, &rot), (true, &norot)] {
        let want = read_f32(file);
        let got = run(&gguf, &prompt, disable);
        let file = file.display();
        let e = nmse(&got, &want);
        eprintln!("rotation disabled {disable}: NMSE {e:e} against {file}");
        assert!(e <= 5e-3, "rotation disabled {disable}: NMSE {e:e}");
    }
    // the two references differ by far more than the bound: the rotation
    // is what each run reproduces
    let a = read_f32(&rot);
    let b = read_f32(&norot);
    assert!(nmse(&a, &b) > 1e-2);
}
