//! The expert cache's flags through the tools: bad values are clear errors
//! naming the flag (exit 1, no panic); `--stats-out` has the cache's keys;
//! `auto` sizes from a sim device's memory; a cache too small for a token's
//! experts falls back and says so; llama-bench sweeps `--moe-cache-mib`.

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");
const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");

#[test]
fn bad_cache_flags_are_errors_naming_the_flag() {
    let m = f32_model();
    let sim = [
        "-m",
        &m,
        "--device",
        "SIM0",
        "--cpu-moe",
        "-nomb",
        "1",
        "-n",
        "2",
    ];
    for bin in [RUN, BENCH] {
        let with = |extra: &[&'static str]| {
            let mut v: Vec<&str> = sim.to_vec();
            if bin == BENCH {
                v.retain(|a| *a != "-n" && *a != "2");
                v.extend(["-p", "0", "-n", "2", "-r", "1"]);
            }
            v.extend_from_slice(extra);
            v
        };
        fails_with_exit_1(
            bin,
            &with(&["--moe-cache-mib", "-3"]),
            &["--moe-cache-mib -3", ">= 0"],
        );
        fails_with_exit_1(
            bin,
            &with(&["--moe-cache-mib", "abc"]),
            &["--moe-cache-mib abc", "not a number"],
        );
        fails_with_exit_1(
            bin,
            &with(&["--moe-cache-policy", "mru"]),
            &[
                "--moe-cache-policy mru",
                "unknown cache policy",
                "lru|slru|lrfu|hlfu",
            ],
        );
        fails_with_exit_1(
            bin,
            &with(&["--sim-mem-mib", "16", "--moe-cache-mib", "64"]),
            &["--moe-cache-mib 64", "does not fit", "SIM0"],
        );
        fails_with_exit_1(bin, &with(&["--sim-mem-mib", "-1"]), &["--sim-mem-mib -1"]);
        fails_with_exit_1(
            bin,
            &with(&["--moe-cache-max-batch", "0"]),
            &["--moe-cache-max-batch"],
        );
    }
    fails_with_exit_1(
        RUN,
        &["-m", &m, "--sim-mem-mib", "8"],
        &["--sim-mem-mib", "SIM0"],
    );
    fails_with_exit_1(
        RUN,
        &["-m", &m, "--device", "SIM0", "--moe-cache-mib", "1,2"],
        // a list gives one size per --device (issue 36): two for one device
        &["--moe-cache-mib 1,2", "2 sizes for 1 device (SIM0)"],
    );
}

fn greedy(
    dir: &std::path::Path,
    tag: &str,
    extra: &[&str],
) -> (Vec<i32>, serde_json::Value, String) {
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
    (read_i32(&toks), s, stderr(&o))
}

#[test]
fn stats_out_has_the_cache_keys_and_auto_sizes_from_sim_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (cpu, _, _) = greedy(dir.path(), "cpu", &[]);
    // every miss uploaded (hybrid experts would compute this tiny model's
    // misses on the CPU: see moe_hybrid_cli.rs)
    let sim = [
        "--device",
        "SIM0",
        "--cpu-moe",
        "-nomb",
        "1",
        "--moe-hybrid",
        "off",
    ];
    let (toks, s, err) = greedy(dir.path(), "auto", &sim);
    assert_eq!(toks, cpu, "the cache changed the tokens");
    for k in [
        "moe_cache_mib",
        "moe_cache_hits",
        "moe_cache_misses",
        "moe_cache_hit_rate",
        "moe_cache_hit_rate_prompt",
        "moe_cache_bytes_uploaded",
        "moe_cache_evictions",
        "moe_cache_id_reads",
        "h2d_bytes_experts",
    ] {
        assert!(s.get(k).is_some(), "--stats-out lacks {k}: {s}");
    }
    let hits = s["moe_cache_hits"].as_u64().unwrap();
    let misses = s["moe_cache_misses"].as_u64().unwrap();
    assert!(hits > 0 && misses > 0, "{s}");
    assert!(s["h2d_bytes_experts"].as_u64() >= s["moe_cache_bytes_uploaded"].as_u64());
    assert!(s["moe_cache_id_reads"].as_u64().unwrap() > 0);
    assert!(err.contains("moe cache g0"), "{err}");
    assert!(err.contains("worst layer"), "{err}");

    // auto on a 12 MiB device: the cache takes what the graph leaves
    let mut v = sim.to_vec();
    v.extend(["--sim-mem-mib", "12"]);
    let (toks, s, _) = greedy(dir.path(), "auto12", &v);
    assert_eq!(toks, cpu);
    let mib = s["moe_cache_mib"].as_f64().unwrap();
    assert!(mib > 0.0 && mib < 12.0, "{s}");

    // too small for one token's experts: selective copy, said once
    let mut v = sim.to_vec();
    v.extend(["--moe-cache-mib", "0.01"]);
    let (toks, s, err) = greedy(dir.path(), "tiny", &v);
    assert_eq!(toks, cpu);
    assert_eq!(s["moe_cache_hits"], 0, "{s}");
    assert!(s["h2d_bytes_experts"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(err.matches("too small").count(), 1, "{err}");

    // 0 = off: no cache keys beyond zeros
    let mut v = sim.to_vec();
    v.extend(["--moe-cache-mib", "0"]);
    let (toks, s, _) = greedy(dir.path(), "off", &v);
    assert_eq!(toks, cpu);
    assert_eq!(s["moe_cache_mib"], 0.0, "{s}");
    assert_eq!(s["moe_cache_id_reads"], 0, "{s}");
}

#[test]
fn bench_sweeps_cache_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        BENCH,
        &[
            "--device",
            "SIM0",
            "--cpu-moe",
            "-nomb",
            "1",
            "--moe-cache-mib",
            "0,8,64",
            "--moe-hybrid",
            "off",
            "-p",
            "0",
            "-n",
            "8",
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
    assert_eq!(rows.len(), 3, "{v}");
    let sizes: Vec<&str> = rows
        .iter()
        .map(|r| r["moe_cache_mib"].as_str().unwrap())
        .collect();
    assert_eq!(sizes, ["0", "8", "64"]);
    assert_eq!(rows[0]["moe_cache_hit_rate"], 0.0);
    let b: Vec<f64> = rows
        .iter()
        .map(|r| r["h2d_bytes_experts_per_token"].as_f64().unwrap())
        .collect();
    assert!(
        b[2] < b[1] && b[1] < b[0],
        "bytes per token should fall with the cache: {b:?}"
    );
    assert!(
        rows[2]["moe_cache_hit_rate"].as_f64().unwrap()
            > rows[1]["moe_cache_hit_rate"].as_f64().unwrap()
    );
}
