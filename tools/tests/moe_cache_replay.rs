//! llama-moe-cache against the live cache: a trace recorded on
//! `--device SIM0 --cpu-moe -nomb 1 --moe-cache-mib X` replays, at the same
//! size and policy, to exactly the live hit and miss counts (also with the
//! history prediction, `--predict`, and its recall); bad input is refused
//! with exit status 1.

use std::process::Command;

fn run_live(dir: &std::path::Path, mib: &str, policy: &str) -> (u64, u64, std::path::PathBuf) {
    let (v, trace) = run_live_with(dir, mib, policy, &[]);
    (
        v["moe_cache_hits"].as_u64().expect("hits"),
        v["moe_cache_misses"].as_u64().expect("misses"),
        trace,
    )
}

/// The live run with `extra` flags: its `--stats-out` and its trace.
fn run_live_with(
    dir: &std::path::Path,
    mib: &str,
    policy: &str,
    extra: &[&str],
) -> (serde_json::Value, std::path::PathBuf) {
    let tag = extra.join("");
    let trace = dir.join(format!("t-{mib}-{policy}{tag}.bin"));
    let stats = dir.join(format!("s-{mib}-{policy}{tag}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_llama-run"))
        .args([
            "--device",
            "SIM0",
            "--cpu-moe",
            "-nomb",
            "1",
            "-n",
            "48",
            "--temp",
            "0",
        ])
        .args(["--moe-cache-mib", mib, "--moe-cache-policy", policy])
        // the replay models the upload cache: every miss inserted, none
        // computed on the CPU by hybrid placement
        .args(["--moe-hybrid", "off"])
        .args(extra)
        .arg("--expert-trace-out")
        .arg(&trace)
        .arg("--stats-out")
        .arg(&stats)
        .output()
        .expect("llama-run runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).expect("stats")).expect("json");
    (v, trace)
}

fn replay(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_llama-moe-cache"))
        .args(args)
        .output()
        .expect("llama-moe-cache runs")
}

#[test]
fn replay_gives_the_live_counts_for_every_policy_and_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    for mib in ["4", "8", "16"] {
        for policy in [
            "lru",
            "slru",
            "lrfu",
            "hlfu",
            "nextuse",
            "nextuse-nopredict",
            "tlfu-lru",
            "tlfu-slru",
            "tlfu-lrfu",
        ] {
            let (hits, misses, trace) = run_live(dir.path(), mib, policy);
            let t = trace.to_str().expect("path");
            let out = replay(&[t, "--mib", mib, "--policies", policy, "--json"]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            let row = &rows.as_array().expect("array")[0];
            assert_eq!(row["policy"], policy);
            for k in ["slots", "mib", "hit_rate", "bytes_per_token"] {
                assert!(row.get(k).is_some(), "key {k} missing: {row}");
            }
            assert_eq!(
                (row["hits"].as_u64(), row["misses"].as_u64()),
                (Some(hits), Some(misses)),
                "{policy} at {mib} MiB"
            );
            // Belady is never beaten
            let opt = &rows.as_array().expect("array")[1];
            assert_eq!(opt["policy"], "belady");
            assert!(opt["hits"].as_u64() >= Some(hits), "{policy} at {mib} MiB");
        }
    }
}

#[test]
fn predict_replays_the_live_history_prediction_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    for mib in ["4", "8"] {
        for policy in ["lru", "hlfu"] {
            let (live, trace) =
                run_live_with(dir.path(), mib, policy, &["--moe-predict", "history"]);
            let t = trace.to_str().expect("path");
            let out = replay(&[t, "--mib", mib, "--policies", policy, "--predict", "--json"]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            let p = &v["predict"][0];
            assert_eq!(p["predictor"], "history");
            assert!(v["sweep"].as_array().is_some_and(|a| !a.is_empty()));
            let at = format!("{policy} at {mib} MiB");
            assert!(live["predicted_layers"].as_u64() > Some(0), "{at}: {live}");
            for (offline, online) in [
                ("predicted_layers", "predicted_layers"),
                ("experts_needed", "predicted_experts_needed"),
                ("experts_predicted", "predicted_experts"),
                ("experts_correct", "predicted_experts_correct"),
                ("hits", "moe_cache_hits"),
                ("misses", "moe_cache_misses"),
            ] {
                assert_eq!(p[offline], live[online], "{at}: {offline} against {online}");
            }
            let r = p["recall"].as_f64().expect("recall");
            assert!((r - live["moe_predict_recall"].as_f64().expect("recall")).abs() < 1e-12);
        }
    }
}

#[test]
fn bad_input_is_refused_with_status_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, _, trace) = run_live(dir.path(), "8", "lru");
    let t = trace.to_str().expect("path");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec![t.into(), "--sizes".into(), "8,0".into()], "0 slots"),
        (
            vec![t.into(), "--sizes".into(), "eight".into()],
            "'eight' is not a number",
        ),
        (vec![t.into(), "--sizes".into(), "2".into()], "fewer slots"),
        (
            vec![t.into(), "--policies".into(), "mru".into()],
            "unknown cache policy 'mru'",
        ),
        (
            vec![
                t.into(),
                "--predict".into(),
                "--predict-decay".into(),
                "1.5".into(),
            ],
            "decay is 1.5: give a value in 0..=1",
        ),
        (
            vec![t.into(), "--predict-min-score".into(), "0.5".into()],
            "--predict",
        ),
    ];
    let empty = dir.path().join("empty.bin");
    std::fs::write(&empty, b"").expect("write");
    let bytes = std::fs::read(&trace).expect("read");
    let cut = dir.path().join("cut.bin");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).expect("write");
    let mut cases = cases;
    cases.push((vec![empty.to_str().expect("p").into()], "byte offset 0"));
    cases.push((vec![cut.to_str().expect("p").into()], "byte offset"));
    for (args, want) in cases {
        let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let out = replay(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{a:?}: {err}");
        assert!(err.contains(want), "{a:?}: {err}");
    }
}

#[test]
fn a_trace_from_another_model_is_refused_with_both_shapes() {
    let dir = tempfile::tempdir().expect("tempdir");
    // recorded on the embedded default model (4 layers, 16 experts, 4 used)
    let (_, _, trace) = run_live(dir.path(), "8", "lru");
    let other = fixtures::lean_path("models/tiny-qwen3moe-f32.gguf");
    let other = other.to_str().expect("path");
    let out = replay(&[trace.to_str().expect("path"), "-m", other]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("4 layers, 16 experts (4 used)"), "{err}");
    assert!(err.contains("2 layers, 8 experts (2 used)"), "{err}");
}
