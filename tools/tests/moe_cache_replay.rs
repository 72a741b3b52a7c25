//! llama-moe-cache against the live cache: a trace recorded on
//! `--device SIM0 --cpu-moe -nomb 1 --moe-cache-mib X` replays, at the same
//! size and policy, to exactly the live hit and miss counts; bad input is
//! refused with exit status 1.

use std::process::Command;

fn run_live(dir: &std::path::Path, mib: &str, policy: &str) -> (u64, u64, std::path::PathBuf) {
    let trace = dir.join(format!("t-{mib}-{policy}.bin"));
    let stats = dir.join(format!("s-{mib}-{policy}.json"));
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
    (
        v["moe_cache_hits"].as_u64().expect("hits"),
        v["moe_cache_misses"].as_u64().expect("misses"),
        trace,
    )
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
        for policy in ["lru", "slru", "lrfu", "hlfu"] {
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
