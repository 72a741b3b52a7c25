//! The host expert cache through the tools: `--stats-out` and the summary
//! gain its `moe_host_cache_*` keys (absent without it); a trace recorded
//! with it replays in llama-moe-cache to exactly the live host tier's hits
//! and misses, Belady at or above every policy; a cache too small for one
//! layer's top-k, and one asked of a run with a device, are clear errors
//! (exit 1, no panic); llama-bench takes its flags and writes its fields.

mod common;
use common::*;

use std::process::Command;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");
const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");
const REPLAY: &str = env!("CARGO_BIN_EXE_llama-moe-cache");

const KEYS: [&str; 13] = [
    "moe_host_cache_policy",
    "moe_host_cache_mib",
    "moe_host_cache_hits",
    "moe_host_cache_misses",
    "moe_host_cache_hit_rate",
    "moe_host_cache_hit_rate_decode",
    "moe_host_cache_disk_reads",
    "moe_host_cache_disk_bytes",
    "moe_host_cache_disk_bytes_per_token",
    "moe_host_cache_disk_read_rate",
    "moe_host_cache_read_p50_ms",
    "moe_host_cache_read_p99_ms",
    "moe_host_cache_direct",
];

/// A CPU-only run of the f32 fixture with `extra` flags: its stderr and
/// `--stats-out`.
fn live(dir: &std::path::Path, tag: &str, extra: &[&str]) -> (String, serde_json::Value) {
    let m = f32_model();
    let stats = dir.join(format!("s-{tag}.json"));
    let mut args = vec![
        "-m",
        &m,
        "-n",
        "24",
        "--temp",
        "0",
        "-p",
        "Once upon a time",
    ];
    args.extend_from_slice(extra);
    let st = stats.to_str().expect("path").to_string();
    args.extend(["--stats-out", &st]);
    let o = run(RUN, &args, dir);
    ok(&o);
    let v = serde_json::from_str(&std::fs::read_to_string(&stats).expect("stats")).expect("json");
    (stderr(&o), v)
}

#[test]
fn stats_out_and_the_summary_have_the_host_cache_keys_only_with_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (err, v) = live(dir.path(), "on", &["--moe-host-cache-mib", "0.5"]);
    for k in KEYS {
        assert!(v.get(k).is_some(), "key {k} missing: {v}");
    }
    let hits = v["moe_host_cache_hits"].as_u64().expect("hits");
    let misses = v["moe_host_cache_misses"].as_u64().expect("misses");
    assert!(misses > 0 && hits + misses > 0, "{v}");
    let rate = v["moe_host_cache_hit_rate"].as_f64().expect("rate");
    assert!((rate - hits as f64 / (hits + misses) as f64).abs() < 1e-9);
    assert!(v["moe_host_cache_disk_bytes"].as_u64() > Some(0));
    assert!(v["moe_host_cache_disk_reads"].as_u64() > Some(0));
    let p50 = v["moe_host_cache_read_p50_ms"].as_f64().expect("p50");
    let p99 = v["moe_host_cache_read_p99_ms"].as_f64().expect("p99");
    assert!(p50 > 0.0 && p99 >= p50, "{v}");
    assert_eq!(v["moe_host_cache_policy"], "hlfu");
    assert!(
        err.contains("host cache    = 0.50 MiB (hlfu), hit rate"),
        "{err}"
    );
    let (err, v) = live(dir.path(), "off", &[]);
    for k in KEYS {
        assert!(v.get(k).is_none(), "key {k} without a host cache: {v}");
    }
    assert!(!err.contains("host cache    ="), "{err}");
}

#[test]
fn replay_gives_the_live_host_tiers_counts_and_belady_is_never_beaten() {
    let dir = tempfile::tempdir().expect("tempdir");
    // the fixture's 2 layers of 8 experts (2 picked per token) in one
    // group: 0.25 MiB is 4 slots (one layer's top-k for a ubatch of 2
    // tokens: prompts are cut to 2-token ubatches), 0.6 MiB 11 (every
    // expert of a layer: the whole prompt in one ubatch), 0.9 MiB every
    // expert of both layers. Replayed as the host tier (`--tier host`):
    // the device tier would skip the layers of a prompt ubatch of more
    // tokens than 11 slots hold at 2 experts each, which the host cache,
    // holding all 8 experts of a layer, serves
    for mib in ["0.25", "0.6", "0.9"] {
        for policy in [
            "lru",
            "slru",
            "lrfu",
            "hlfu",
            "nextuse",
            "nextuse-nopredict",
        ] {
            let tag = format!("{mib}-{policy}");
            let trace = dir.path().join(format!("t-{tag}.bin"));
            let t = trace.to_str().expect("path");
            let (_, v) = live(
                dir.path(),
                &tag,
                &[
                    "--moe-host-cache-mib",
                    mib,
                    "--moe-host-cache-policy",
                    policy,
                    "--expert-trace-out",
                    t,
                ],
            );
            // the host cache serves every ubatch (cut to what it holds)
            let out = Command::new(REPLAY)
                .args([
                    t,
                    "--mib",
                    mib,
                    "--policies",
                    policy,
                    "--max-batch",
                    "100000",
                    "--tier",
                    "host",
                ])
                .arg("--json")
                .output()
                .expect("llama-moe-cache runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            let rows = rows.as_array().expect("array");
            assert_eq!(rows[0]["policy"], policy);
            assert_eq!(
                (rows[0]["hits"].as_u64(), rows[0]["misses"].as_u64()),
                (
                    v["moe_host_cache_hits"].as_u64(),
                    v["moe_host_cache_misses"].as_u64()
                ),
                "{policy} at {mib} MiB: replay against the live host tier"
            );
            assert_eq!(rows[1]["policy"], "belady");
            assert!(
                rows[1]["hits"].as_u64() >= rows[0]["hits"].as_u64(),
                "{policy} at {mib} MiB: Belady beaten"
            );
        }
    }
}

#[test]
fn bad_host_cache_settings_are_clear_errors() {
    let m = f32_model();
    fails_with_exit_1(
        RUN,
        &["-m", &m, "-n", "2", "--moe-host-cache-mib", "0.001"],
        &[
            "--moe-host-cache-mib 0.001:",
            "one layer's top-k needs at least",
        ],
    );
    fails_with_exit_1(
        RUN,
        &["-m", &m, "-n", "2", "--moe-host-cache-mib", "lots"],
        &["--moe-host-cache-mib lots", "not a number"],
    );
    fails_with_exit_1(
        RUN,
        &["-m", &m, "-n", "2", "--moe-host-cache-policy", "mru"],
        &["--moe-host-cache-policy mru", "unknown cache policy"],
    );
    fails_with_exit_1(
        RUN,
        &[
            "-m",
            &m,
            "-n",
            "2",
            "--device",
            "SIM0",
            "--cpu-moe",
            "--moe-host-cache-mib",
            "1",
        ],
        &["--moe-host-cache-mib 1", "CPU-only runs for now"],
    );
    fails_with_exit_1(
        BENCH,
        &[
            "-m",
            &m,
            "-p",
            "0",
            "-n",
            "2",
            "-r",
            "1",
            "--moe-host-cache-mib",
            "0.001",
        ],
        &["one layer's top-k needs at least"],
    );
}

#[test]
fn llama_bench_runs_the_host_cache_and_writes_its_fields() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = f32_model();
    let o = run(
        BENCH,
        &[
            "-m",
            &m,
            "-p",
            "16",
            "-n",
            "4",
            "-r",
            "1",
            "-o",
            "jsonl",
            "--moe-host-cache-mib",
            "0,0.5",
        ],
        dir.path(),
    );
    ok(&o);
    let out = stdout(&o);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("jsonl"))
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    for r in &rows {
        for k in [
            "moe_host_cache_mib",
            "moe_host_cache_hit_rate",
            "moe_host_cache_disk_bytes_per_token",
            "moe_host_cache_disk_read_rate",
            "moe_host_cache_read_p50_us",
            "moe_host_cache_read_p99_us",
        ] {
            assert!(r.get(k).is_some(), "{k} missing: {r}");
        }
        let on = r["moe_host_cache_mib"] == "0.5";
        let bytes = r["moe_host_cache_disk_bytes_per_token"]
            .as_f64()
            .expect("f");
        assert_eq!(on, bytes > 0.0, "{r}");
    }
    // without the flag: no host-cache field, as before
    let o = run(
        BENCH,
        &["-m", &m, "-p", "0", "-n", "2", "-r", "1", "-o", "jsonl"],
        dir.path(),
    );
    ok(&o);
    assert!(!stdout(&o).contains("moe_host_cache"), "{}", stdout(&o));
}
