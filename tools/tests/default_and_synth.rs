//! The embedded default model, --synth, --stats-out and llama-bench output.

mod common;
use common::*;
use llama::MoeParams;

use std::sync::Arc;

use ggml_core::gguf::GgufFile;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");
const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");

fn cached_models(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn default_model_runs_on_a_bare_machine_and_is_cached() {
    let cache = tempfile::tempdir().unwrap();
    let stats = cache.path().join("stats.json");
    let tokens = cache.path().join("tokens.bin");
    let o = run(
        RUN,
        &[
            "-n",
            "16",
            "-s",
            "3",
            "--stats-out",
            stats.to_str().unwrap(),
            "--tokens-out",
            tokens.to_str().unwrap(),
        ],
        cache.path(),
    );
    ok(&o);
    let err = stderr(&o);
    assert!(
        err.contains("generating the embedded default model"),
        "{err}"
    );
    for key in [
        "load time",
        "prompt eval",
        "generation",
        "tokens per second",
    ] {
        assert!(err.contains(key), "summary lacks '{key}':\n{err}");
    }
    let out = stdout(&o);
    assert!(
        out.starts_with("Once upon a time") && out.trim().len() > 20,
        "{out:?}"
    );
    let models: Vec<String> = cached_models(cache.path())
        .into_iter()
        .filter(|f| f.starts_with("default-") && f.ends_with(".gguf"))
        .collect();
    assert_eq!(models.len(), 1, "{:?}", cached_models(cache.path()));
    assert!(!cached_models(cache.path())
        .iter()
        .any(|f| f.contains(".tmp")));

    // text is not one token repeated
    let ids = read_i32(&tokens);
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let n_prompt = s["prompt_tokens"].as_u64().unwrap() as usize;
    let gen: std::collections::HashSet<i32> = ids[n_prompt..].iter().copied().collect();
    assert!(gen.len() >= 4, "generated ids {:?}", &ids[n_prompt..]);

    // second run: the cached file is used as is
    let o = run(RUN, &["-n", "4"], cache.path());
    ok(&o);
    assert!(!stderr(&o).contains("generating"), "{}", stderr(&o));
}

/// With no -m and no --device, the run shows the offload path: SIM0 (no
/// CUDA device here), experts in host memory, and a summary with the expert
/// traffic, the cache's hit rate and the simulated speed next to wall-clock;
/// `--device CPU` is the plain CPU run.
#[test]
fn default_run_shows_the_offload_path() {
    if llama::device::first_cuda_device().is_some() {
        eprintln!("skipped: a CUDA device is present, the default run takes it");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let o = run(RUN, &["-n", "8", "--temp", "0"], cache.path());
    ok(&o);
    let err = stderr(&o);
    for needle in [
        "no -m and no --device: the default model runs on SIM0",
        "placement: ",
        " on SIM0, ",
        "expert h2d    = ",
        "moe cache     = hlfu",
        "decode hit rate",
        "simulated     = prompt",
        "offload       = experts in host memory, SIM0 computes: ",
        "expert cache decode hit rate ",
        "tokens per second simulated (pcie4-x16 clock), ",
        "tokens per second wall-clock",
    ] {
        assert!(err.contains(needle), "default run lacks '{needle}':\n{err}");
    }
    let o = run(
        RUN,
        &["-n", "8", "--temp", "0", "--device", "CPU"],
        cache.path(),
    );
    ok(&o);
    let err = stderr(&o);
    assert!(
        err.contains("expert h2d    = none (no --device: experts are used in host memory)"),
        "{err}"
    );
    for absent in ["no -m and no --device", "offload       =", "simulated"] {
        assert!(
            !err.contains(absent),
            "--device CPU printed '{absent}':\n{err}"
        );
    }
}

#[test]
fn stats_out_has_the_required_keys() {
    let cache = tempfile::tempdir().unwrap();
    let stats = cache.path().join("s.json");
    let o = run(
        RUN,
        &[
            "-m",
            lean_model("tiny-qwen3moe-f32.gguf").to_str().unwrap(),
            "-p",
            "Hi",
            "-n",
            "4",
            "--stats-out",
            stats.to_str().unwrap(),
        ],
        cache.path(),
    );
    ok(&o);
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    for k in [
        "load_s",
        "prompt_tokens",
        "prompt_tps",
        "gen_tokens",
        "gen_tps",
        "h2d_bytes_experts",
        "h2d_bytes_other",
        "h2d_bytes_full_copy",
        "experts_copied",
    ] {
        assert!(s.get(k).is_some_and(|v| v.is_number()), "missing {k}: {s}");
    }
    assert_eq!(s["gen_tokens"], 4);
}

#[test]
fn bench_json_and_markdown() {
    let cache = tempfile::tempdir().unwrap();
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let o = run(
        BENCH,
        &[
            "-m",
            m.to_str().unwrap(),
            "-p",
            "8,16",
            "-n",
            "4",
            "-r",
            "2",
            "-t",
            "1,2",
            "-o",
            "json",
        ],
        cache.path(),
    );
    ok(&o);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON array");
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 6, "2 threads x (pp8, pp16, tg4)");
    for r in arr {
        for k in [
            "model_filename",
            "model_type",
            "model_size",
            "model_n_params",
            "n_threads",
            "n_prompt",
            "n_gen",
            "avg_ts",
            "stddev_ts",
            "samples_ts",
            "backends",
        ] {
            assert!(r.get(k).is_some(), "missing {k}: {r}");
        }
        assert_eq!(r["samples_ts"].as_array().unwrap().len(), 2);
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(arr[0]["n_prompt"], 8);
    assert_eq!(arr[2]["n_gen"], 4);

    let o = run(
        BENCH,
        &["-m", m.to_str().unwrap(), "-p", "16", "-n", "4", "-r", "1"],
        cache.path(),
    );
    ok(&o);
    let out = stdout(&o);
    assert!(out.contains("| model") && out.contains("t/s"), "{out}");
    assert!(
        out.contains("pp16") && out.contains("tg4") && out.contains(" ± "),
        "{out}"
    );
    assert!(out.contains("qwen3moe"), "{out}");
}

#[test]
fn bench_defaults_to_the_embedded_model() {
    let cache = tempfile::tempdir().unwrap();
    let o = run(
        BENCH,
        &["-p", "8", "-n", "2", "-r", "1", "--no-warmup"],
        cache.path(),
    );
    ok(&o);
    assert!(stdout(&o).contains("pp8"), "{}", stdout(&o));
}

#[test]
fn synth_writes_every_qwen3moe_tensor_and_the_model_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.gguf");
    let o = run(
        RUN,
        &[
            "--synth",
            out.to_str().unwrap(),
            "--layers",
            "2",
            "--experts",
            "8",
            "--used",
            "2",
            "--embd",
            "128",
            "--ff",
            "64",
            "--heads",
            "4",
            "--heads-kv",
            "2",
            "--head-dim",
            "32",
            "--type",
            "F32",
        ],
        dir.path(),
    );
    ok(&o);
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(f.get_str("general.architecture").unwrap(), Some("qwen3moe"));
    assert_eq!(f.get_u32("qwen3moe.expert_count").unwrap(), Some(8));
    assert_eq!(f.get_u32("qwen3moe.expert_used_count").unwrap(), Some(2));
    assert_eq!(
        f.get_u32("qwen3moe.expert_feed_forward_length").unwrap(),
        Some(64)
    );
    assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), Some("gpt2"));
    let v = f.get_array("tokenizer.ggml.tokens").unwrap().unwrap().len() as i64;
    let shape = |n: &str| {
        f.tensor(n)
            .unwrap_or_else(|| panic!("missing {n}"))
            .shape()
            .to_vec()
    };
    assert_eq!(shape("token_embd.weight"), [128, v]);
    assert_eq!(shape("output.weight"), [128, v]);
    assert_eq!(shape("output_norm.weight"), [128]);
    for il in 0..2 {
        let t = |s: &str| shape(&format!("blk.{il}.{s}.weight"));
        assert_eq!(t("attn_norm"), [128]);
        assert_eq!(t("attn_q"), [128, 128]);
        assert_eq!(t("attn_k"), [128, 64]);
        assert_eq!(t("attn_v"), [128, 64]);
        assert_eq!(t("attn_output"), [128, 128]);
        assert_eq!(t("attn_q_norm"), [32]);
        assert_eq!(t("attn_k_norm"), [32]);
        assert_eq!(t("ffn_norm"), [128]);
        assert_eq!(t("ffn_gate_inp"), [128, 8]);
        assert_eq!(t("ffn_gate_exps"), [128, 64, 8]);
        assert_eq!(t("ffn_up_exps"), [128, 64, 8]);
        assert_eq!(t("ffn_down_exps"), [64, 128, 8]);
    }
    let o = run(
        RUN,
        &["-m", out.to_str().unwrap(), "-n", "4", "-p", "Hello"],
        dir.path(),
    );
    ok(&o);
}

#[test]
fn synthetic_routing_is_not_uniform() {
    // in-process: the default model's layers pick some experts far more
    // often than others (as trained models do)
    let p = synth::SynthParams::default_model();
    let w = synth::synthesize(&p, &mut |_| {}).unwrap();
    let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let model = Arc::new(llama::Model::from_gguf(file, llama::ModelParams::default()).unwrap());
    let params = llama::ContextParams {
        moe: MoeParams {
            record_expert_ids: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut ctx = llama::Context::new(model.clone(), params).unwrap();
    let n_vocab = model.hparams.n_vocab as i32;
    let tokens: Vec<i32> = (0..256).map(|i| (i * 7919 + 13) % n_vocab).collect();
    ctx.decode(&tokens, false).unwrap();
    let ids = ctx.last_expert_ids();
    assert_eq!(ids.len(), p.n_layer);
    let mut skewed = 0;
    for layer in ids {
        let mut count = vec![0usize; p.n_expert];
        for &e in layer {
            count[e as usize] += 1;
        }
        let (min, max) = (*count.iter().min().unwrap(), *count.iter().max().unwrap());
        if max >= 3 * min.max(1) {
            skewed += 1;
        }
    }
    assert!(skewed >= p.n_layer / 2, "routing too uniform: {ids:?}");
}

/// Run the default model greedily with `extra` flags; (tokens, stats).
fn greedy_run(cache: &std::path::Path, tag: &str, extra: &[&str]) -> (Vec<i32>, serde_json::Value) {
    let stats = cache.join(format!("{tag}.json"));
    let tokens = cache.join(format!("{tag}.bin"));
    let mut args = vec![
        "-n",
        "8",
        "--temp",
        "0",
        "--stats-out",
        stats.to_str().unwrap(),
        "--tokens-out",
        tokens.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run(RUN, &args, cache);
    ok(&o);
    let s = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    (read_i32(&tokens), s)
}

#[test]
fn sim_device_reports_expert_traffic_and_matches_the_cpu() {
    let cache = tempfile::tempdir().unwrap();
    let (cpu_tokens, cpu) = greedy_run(cache.path(), "cpu", &["--device", "CPU"]);
    assert_eq!(cpu["h2d_bytes_experts"], 0);
    assert_eq!(cpu["device"], "CPU");

    // no --device: the default run, SIM0 with the experts in host memory and
    // the cache, the same tokens
    let (default_tokens, d) = greedy_run(cache.path(), "default", &[]);
    assert_eq!(
        default_tokens, cpu_tokens,
        "the default run generated other tokens"
    );
    assert_eq!(d["device"], "SIM0", "{d}");
    assert!(d["h2d_bytes_experts"].as_u64().unwrap() > 0, "{d}");
    assert!(d["moe_cache_mib"].as_f64().unwrap() > 0.0, "{d}");
    assert!(d["sim_gen_tps"].as_f64().unwrap() > 0.0, "{d}");
    // the host's own time per generated token, measured on both (wall
    // clock: positive, and well under the generation's time per token)
    for s in [&cpu, &d] {
        let h = s["host_s_per_token"].as_f64().unwrap();
        let per_token = s["gen_s"].as_f64().unwrap() / s["gen_tokens"].as_f64().unwrap();
        assert!(h > 0.0 && h <= per_token, "{s}");
    }

    // experts in host memory, every batch offloaded: only picked experts move
    let (sim_tokens, s) = greedy_run(
        cache.path(),
        "sim",
        &["--device", "SIM0", "--cpu-moe", "-nomb", "1"],
    );
    assert_eq!(sim_tokens, cpu_tokens, "SIM0 generated other tokens");
    let experts = s["h2d_bytes_experts"].as_u64().unwrap();
    let full = s["h2d_bytes_full_copy"].as_u64().unwrap();
    assert!(experts > 0 && experts < full, "{s}");
    assert!(s["experts_copied"].as_u64().unwrap() > 0, "{s}");
    assert!(
        s["h2d_bytes_experts_per_token"].as_f64().unwrap() > 0.0,
        "{s}"
    );

    // --no-expert-copy: whole tensors, same tokens
    let (full_tokens, f) = greedy_run(
        cache.path(),
        "full",
        &[
            "--device",
            "SIM0",
            "--cpu-moe",
            "-nomb",
            "1",
            "--no-expert-copy",
        ],
    );
    assert_eq!(full_tokens, cpu_tokens);
    assert_eq!(f["h2d_bytes_experts"], 0, "{f}");
    assert!(f["h2d_bytes_other"].as_u64().unwrap() >= full, "{f}");

    // everything on the device: nothing to copy per token
    let (dev_tokens, d) = greedy_run(cache.path(), "dev", &["--device", "SIM0", "-ngl", "99"]);
    assert_eq!(dev_tokens, cpu_tokens);
    assert_eq!(d["h2d_bytes_experts"], 0, "{d}");
}

/// `--synth --arch deepseek2|gpt-oss` at small widths: every tensor of the
/// layout, in its shape, and the model loads, runs on SIM0 with the experts
/// in host memory, and generates.
#[test]
fn synth_deepseek2_and_gptoss_write_their_layouts_and_run() {
    let dir = tempfile::tempdir().unwrap();
    for arch in ["deepseek2", "gpt-oss"] {
        let out = dir.path().join(format!("{arch}.gguf"));
        let o = run(
            RUN,
            &[
                "--synth",
                out.to_str().unwrap(),
                "--arch",
                arch,
                "--layers",
                "3",
                "--experts",
                "16",
                "--used",
                "4",
                "--embd",
                "128",
                "--ff",
                "64",
                "--heads",
                "4",
                "--heads-kv",
                "2",
                "--head-dim",
                "32",
                "--type",
                "Q4_K",
            ],
            dir.path(),
        );
        // Q4_K needs rows of 256: --embd 128 is refused, naming the flag
        assert!(!o.status.success(), "{arch}: Q4_K with --embd 128");
        assert!(stderr(&o).contains("--embd"), "{}", stderr(&o));
        let o = run(
            RUN,
            &[
                "--synth",
                out.to_str().unwrap(),
                "--arch",
                arch,
                "--layers",
                "3",
                "--experts",
                "16",
                "--used",
                "4",
                "--embd",
                "256",
                "--ff",
                "256",
                "--heads",
                "4",
                "--heads-kv",
                "2",
                "--head-dim",
                "64",
                "--type",
                "Q4_K",
            ],
            dir.path(),
        );
        ok(&o);
        let f = GgufFile::open(&out).unwrap();
        assert_eq!(f.get_str("general.architecture").unwrap(), Some(arch));
        let t = |n: &str| {
            let t = f.tensor(n).unwrap_or_else(|| panic!("{arch}: missing {n}"));
            (t.shape().to_vec(), t.ty)
        };
        use ggml_core::GgmlType::{F32, Q4K, Q5_0};
        if arch == "deepseek2" {
            // MLA widths from --head-dim 64 in DeepSeek-V3's ratios
            assert_eq!(
                f.get_u32("deepseek2.attention.kv_lora_rank").unwrap(),
                Some(256)
            );
            assert_eq!(
                f.get_u32("deepseek2.attention.q_lora_rank").unwrap(),
                Some(768)
            );
            assert_eq!(
                f.get_u32("deepseek2.rope.dimension_count").unwrap(),
                Some(32)
            );
            assert_eq!(f.get_u32("deepseek2.expert_group_count").unwrap(), Some(8));
            assert_eq!(
                f.get_u32("deepseek2.leading_dense_block_count").unwrap(),
                Some(1)
            );
            assert_eq!(t("blk.0.ffn_gate.weight"), (vec![256, 9 * 256], Q4K));
            assert!(f.tensor("blk.0.ffn_gate_exps.weight").is_none());
            assert_eq!(t("blk.1.attn_q_a.weight"), (vec![256, 768], Q4K));
            assert_eq!(t("blk.1.attn_q_b.weight"), (vec![768, 4 * 96], Q4K));
            assert_eq!(t("blk.1.attn_kv_a_mqa.weight"), (vec![256, 288], Q4K));
            // rows of 64 do not split into Q4_K blocks: llama.cpp's Q5_0
            assert_eq!(t("blk.1.attn_k_b.weight"), (vec![64, 256, 4], Q5_0));
            assert_eq!(t("blk.1.attn_v_b.weight"), (vec![256, 64, 4], Q4K));
            assert_eq!(t("blk.2.exp_probs_b.bias"), (vec![16], F32));
            assert_eq!(t("blk.2.ffn_up_shexp.weight"), (vec![256, 256], Q4K));
            assert_eq!(t("blk.2.ffn_down_exps.weight"), (vec![256, 256, 16], Q4K));
        } else {
            assert_eq!(
                f.get_u32("gpt-oss.attention.sliding_window").unwrap(),
                Some(128)
            );
            assert_eq!(t("blk.0.attn_q.weight"), (vec![256, 256], Q4K));
            assert_eq!(t("blk.0.attn_q.bias"), (vec![256], F32));
            assert_eq!(t("blk.0.attn_sinks.weight"), (vec![4], F32));
            assert_eq!(t("blk.1.post_attention_norm.weight"), (vec![256], F32));
            assert_eq!(t("blk.2.ffn_gate_inp.bias"), (vec![16], F32));
            assert_eq!(t("blk.2.ffn_up_exps.bias"), (vec![256, 16], F32));
            assert_eq!(t("blk.2.ffn_down_exps.bias"), (vec![256, 16], F32));
            assert_eq!(t("blk.2.ffn_gate_exps.weight"), (vec![256, 256, 16], Q4K));
        }
        let o = run(
            RUN,
            &[
                "-m",
                out.to_str().unwrap(),
                "-n",
                "4",
                "-p",
                "Hello",
                "--device",
                "SIM0",
                "--cpu-moe",
            ],
            dir.path(),
        );
        ok(&o);
    }
}
