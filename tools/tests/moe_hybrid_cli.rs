//! Hybrid experts through the tools: bad `--moe-cache-cpu-share` and
//! `--moe-hybrid` values are clear errors naming the flag (exit 1, no
//! panic); `--stats-out` has the exact keys and the tokens stay the CPU's
//! with hybrid on, off, and every miss on the CPU; llama-bench writes the
//! fields per test and takes lists of both flags.

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");
const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");

#[test]
fn bad_cpu_shares_are_errors_naming_the_flag_and_the_value() {
    let m = f32_model();
    for bin in [RUN, BENCH] {
        let mut base = vec!["-m", &m, "--device", "SIM0", "--cpu-moe", "-nomb", "1"];
        if bin == BENCH {
            base.extend(["-p", "0", "-n", "2", "-r", "1"]);
        } else {
            base.extend(["-n", "2"]);
        }
        let with = |extra: &[&'static str]| {
            let mut v = base.clone();
            v.extend_from_slice(extra);
            v
        };
        fails_with_exit_1(
            bin,
            &with(&["--moe-cache-cpu-share", "1.5"]),
            &["--moe-cache-cpu-share", "'1.5'", "outside 0..1"],
        );
        fails_with_exit_1(
            bin,
            &with(&["--moe-cache-cpu-share", "-0.1"]),
            &["--moe-cache-cpu-share", "'-0.1'", "outside 0..1"],
        );
        fails_with_exit_1(
            bin,
            &with(&["--moe-cache-cpu-share", "abc"]),
            &["--moe-cache-cpu-share", "'abc'", "not a number"],
        );
        fails_with_exit_1(
            bin,
            &with(&["--moe-hybrid", "maybe"]),
            &["--moe-hybrid", "'maybe'", "neither on nor off"],
        );
    }
}

fn greedy(dir: &std::path::Path, tag: &str, extra: &[&str]) -> (Vec<i32>, serde_json::Value) {
    let m = f32_model();
    let stats = dir.join(format!("{tag}.json"));
    let toks = dir.join(format!("{tag}.bin"));
    let mut args = vec![
        "-m",
        &m,
        "-n",
        "8",
        "--temp",
        "0",
        "--stats-out",
        stats.to_str().unwrap(),
        "--tokens-out",
        toks.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run(RUN, &args, dir);
    ok(&o);
    let s = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    (read_i32(&toks), s)
}

#[test]
fn stats_out_has_the_hybrid_keys_and_the_tokens_stay_the_cpus() {
    let dir = tempfile::tempdir().unwrap();
    let (cpu, _) = greedy(dir.path(), "cpu", &[]);
    // a cache of 10 experts (48 KiB each): full, and missing, in decode
    let sim = [
        "--device",
        "SIM0",
        "--cpu-moe",
        "-nomb",
        "1",
        "--moe-cache-mib",
        "0.5",
    ];
    let n = |s: &serde_json::Value, k: &str| {
        s.get(k)
            .and_then(|v| v.as_u64())
            .unwrap_or_else(|| panic!("--stats-out lacks {k}: {s}"))
    };
    let mut v = sim.to_vec();
    v.extend(["--moe-cache-cpu-share", "1"]);
    let (toks, s) = greedy(dir.path(), "all-cpu", &v);
    assert_eq!(toks, cpu, "hybrid experts changed the tokens");
    for k in [
        "experts_cpu",
        "experts_device_cached",
        "experts_device_uploaded",
    ] {
        let total = n(&s, k);
        assert_eq!(
            total,
            n(&s, &format!("{k}_prompt")) + n(&s, &format!("{k}_decode")),
            "{k}: {s}"
        );
    }
    assert!(n(&s, "experts_cpu_decode") > 0, "{s}");
    assert_eq!(n(&s, "experts_device_cached"), n(&s, "moe_cache_hits"));
    assert_eq!(n(&s, "experts_device_uploaded"), n(&s, "moe_cache_misses"));

    let mut v = sim.to_vec();
    v.extend(["--moe-hybrid", "off"]);
    let (toks, s) = greedy(dir.path(), "off", &v);
    assert_eq!(toks, cpu);
    assert_eq!(n(&s, "experts_cpu"), 0, "{s}");
    assert!(n(&s, "experts_device_uploaded") > 0, "{s}");

    let (toks, s) = greedy(dir.path(), "auto", &sim);
    assert_eq!(toks, cpu);
    assert!(
        n(&s, "experts_cpu") + n(&s, "experts_device_uploaded") > 0,
        "{s}"
    );
}

#[test]
fn bench_writes_the_hybrid_fields_per_share() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        BENCH,
        &[
            "--device",
            "SIM0",
            "--cpu-moe",
            "-nomb",
            "1",
            // the embedded default model: 10 slots of 384 KiB
            "--moe-cache-mib",
            "4",
            "--moe-cache-cpu-share",
            "0,1",
            "-p",
            "0",
            "-n",
            "4",
            "-r",
            "1",
            "-o",
            "json",
        ],
        dir.path(),
    );
    ok(&o);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    assert_eq!(rows[0]["moe_cache_cpu_share"], "0");
    assert_eq!(rows[0]["experts_cpu"], 0.0, "{v}");
    assert!(rows[1]["experts_cpu_decode"].as_f64().unwrap() > 0.0, "{v}");
    for k in [
        "experts_device_cached",
        "experts_device_uploaded",
        "moe_hybrid",
    ] {
        assert!(rows[1].get(k).is_some(), "{k}: {v}");
    }
}
