//! llama.cpp's spellings through `llama-run`: each command that misparsed
//! or was refused before, and what it does now (exit code, message, the
//! summary in `--stats-out`).

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

fn m() -> String {
    lean_model("tiny-qwen3moe-f32.gguf")
        .to_string_lossy()
        .into_owned()
}

/// Run with `--stats-out` and return the output and the summary.
fn run_stats(args: &[&str]) -> (std::process::Output, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("s.json");
    let mut a: Vec<&str> = args.to_vec();
    let sp = stats.to_string_lossy().into_owned();
    a.extend(["--stats-out", &sp]);
    let o = run(RUN, &a, dir.path());
    ok(&o);
    let s = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    (o, s)
}

#[test]
fn multi_letter_flags_and_negative_values_parse() {
    let model = m();
    let (_, s) = run_stats(&[
        "-m",
        &model,
        "-tb",
        "2",
        "-t",
        "-1",
        "--temp",
        "-1",
        "--repeat-last-n",
        "-1",
        "-ngl",
        "auto",
        "-fa",
        "off",
        "-n",
        "3",
        "-p",
        "hi",
        "-sys",
        "X",
        "-s",
        "-1",
    ]);
    assert_eq!(s["gen_tokens"], 3);
    for fa in ["on", "off", "auto"] {
        let (_, s) = run_stats(&["-m", &model, "-fa", fa, "-n", "2", "-p", "hi"]);
        assert_eq!(s["gen_tokens"], 2, "-fa {fa}");
    }
    let (_, s) = run_stats(&["-m", &model, "-ngl", "all", "--device", "SIM0", "-n", "2"]);
    assert_eq!(s["device"], "SIM0");
}

#[test]
fn unsupported_llama_cpp_flags_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for (args, msg) in [
        (
            vec!["-hf", "org/repo"],
            "-hf: not supported: this tool runs local GGUF files",
        ),
        (vec!["--hf-repo=org/repo"], "--hf-repo: not supported"),
        (vec!["--lora", "a.gguf"], "--lora: not supported"),
        (vec!["-mm", "p.gguf"], "-mm: not supported"),
    ] {
        let o = run(RUN, &args, dir.path());
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(msg), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?}: no help, no generation");
    }
}

#[test]
fn kv_cache_types() {
    let model = m();
    for (k, v) in [("f32", "f32"), ("f32", "f16"), ("f16", "f32")] {
        let (_, s) = run_stats(&["-m", &model, "-ctk", k, "-ctv", v, "-n", "2"]);
        assert_eq!(s["gen_tokens"], 2);
    }
    // quantized types on a model whose heads (64) split into blocks of 32;
    // -fa auto turns flash attention on for a quantized V, as llama.cpp
    match common::model("tiny-qwen3moe-q4_k.gguf") {
        Err(why) => println!("skipped: {why}"),
        Ok(q4k) => {
            let q4k = q4k.to_string_lossy().into_owned();
            for args in [
                vec!["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"],
                vec!["-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"],
                vec!["-ctk", "bf16", "-ctv", "bf16", "-fa", "on"],
                vec!["-ctk", "q8_0"],
                vec!["-ctk", "q4_0", "-ctv", "q4_0", "-fa", "auto"],
            ] {
                let mut a = vec!["-m", q4k.as_str(), "-n", "2"];
                a.extend(args.iter().copied());
                let (_, s) = run_stats(&a);
                assert_eq!(s["gen_tokens"], 2, "{args:?}");
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for (args, msg) in [
        (
            vec!["-ctv", "q8_0"],
            "-ctv q8_0: a quantized V cache needs flash attention (-fa on)",
        ),
        (
            vec!["-ctv", "q8_0", "-fa", "off"],
            "needs flash attention (-fa on)",
        ),
        (vec!["-ctk", "q9"], "-ctk q9: unknown KV cache type"),
        (vec!["-ctk", "q9_9"], "unknown KV cache type"),
        (
            // heads of 16 do not split into Q8_0's blocks of 32 (llama.cpp
            // refuses this model's K cache type the same way)
            vec!["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"],
            "K cache type q8_0 with block size 32 does not divide n_embd_head_k = 16",
        ),
    ] {
        let mut a = vec!["-m", model.as_str(), "-n", "1"];
        a.extend(args.iter().copied());
        let o = run(RUN, &a, dir.path());
        assert_eq!(o.status.code(), Some(1), "{a:?}");
        assert!(stderr(&o).contains(msg), "{a:?}: {}", stderr(&o));
    }
}

/// `-tb N` reaches the CPU backend: the prompt's ubatches run on N threads,
/// the one-token decodes on `-t` (the summary reports what the backend ran
/// on); without `-tb` (or with -1) both use `-t`.
#[test]
fn threads_batch_runs_the_prompt_and_threads_the_tokens() {
    let model = m();
    let base = ["-m", model.as_str(), "-n", "3", "-p", "The quick brown fox"];
    for (extra, batch, gen) in [
        (vec!["-t", "1", "-tb", "3"], 3, 1),
        (vec!["-t", "2", "-tb", "1"], 1, 2),
        (vec!["-t", "2"], 2, 2),
        (vec!["-t", "2", "-tb", "-1"], 2, 2),
    ] {
        let mut a: Vec<&str> = base.to_vec();
        a.extend(extra.iter().copied());
        let (_, s) = run_stats(&a);
        assert_eq!(s["gen_tokens"], 3, "{extra:?}");
        assert_eq!(s["n_threads_batch"], batch, "{extra:?}");
        assert_eq!(s["n_threads"], gen, "{extra:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let o = run(RUN, &["-m", &model, "-tb", "0"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("-tb 0: must be -1 or at least 1"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn trailing_eog_in_the_prompt_stops_and_ignore_eos_goes_on() {
    let model = m();
    // `</s>` is the SPM vocabulary's EOS, parsed as the special token
    let (o, s) = run_stats(&["-m", &model, "-p", "hi</s>", "-n", "8", "--temp", "0"]);
    assert_eq!(s["gen_tokens"], 0, "{}", stderr(&o));
    assert_eq!(s["stop"], "eog");
    let (_, s) = run_stats(&[
        "-m",
        &model,
        "-p",
        "hi</s>",
        "-n",
        "8",
        "--temp",
        "0",
        "--ignore-eos",
    ]);
    assert_eq!(s["gen_tokens"], 8);
    assert_eq!(s["stop"], "n_predict");
}

#[test]
fn reverse_prompt_stops_generation() {
    let model = m();
    let base = [
        "-m",
        model.as_str(),
        "-p",
        "hi",
        "--temp",
        "0",
        "--no-display-prompt",
    ];
    // the text of the first two generated tokens (greedy: the same each run)
    let (o, _) = run_stats(&[&base[..], &["-n", "2"]].concat());
    let two = stdout(&o).trim_end_matches('\n').to_string();
    assert!(!two.is_empty());
    let (o2, s2) = run_stats(&[&base[..], &["-n", "12", "-r", &two]].concat());
    assert_eq!(s2["stop"], "reverse_prompt");
    assert_eq!(s2["gen_tokens"], 2);
    assert_eq!(stdout(&o2).trim_end_matches('\n'), two);
}

#[test]
fn penalties_are_accepted_and_checked() {
    let model = m();
    let (_, s) = run_stats(&[
        "-m",
        &model,
        "-n",
        "4",
        "--presence-penalty",
        "0.5",
        "--frequency-penalty",
        "-0.25",
    ]);
    assert_eq!(s["gen_tokens"], 4);
}

#[test]
fn list_devices() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(RUN, &["--list-devices"], dir.path());
    ok(&o);
    let out = stdout(&o);
    assert!(out.contains("CPU") && out.contains("SIM0"), "{out}");
}

#[test]
fn ngl_without_device_uses_the_first_gpu_or_says_cpu() {
    let model = m();
    let (o, s) = run_stats(&["-m", &model, "-ngl", "99", "--cpu-moe", "-n", "2"]);
    match llama::device::first_cuda_device() {
        Some(d) => {
            assert_eq!(s["device"], d.as_str());
            assert!(stderr(&o).contains(&format!("using {d}")), "{}", stderr(&o));
        }
        None => {
            assert_eq!(s["device"], "CPU");
            assert_eq!(
                stderr(&o)
                    .matches("no CUDA device found: the CPU runs everything")
                    .count(),
                1,
                "{}",
                stderr(&o)
            );
        }
    }
}
