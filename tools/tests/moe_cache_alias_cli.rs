//! The compute alias through llama-run: a bad `--moe-cache-alias` value is
//! a clear error naming the flag (exit 1, no panic); with the alias on and
//! off on a memory-limited SIM0 the greedy tokens are the CPU's, the run
//! prints the `compute alias:` line, and `--stats-out` has `n_ubatch`,
//! `moe_cache_alias` and `moe_cache_alias_reason`.

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

#[test]
fn a_bad_alias_value_is_an_error_naming_the_flag_and_the_value() {
    let m = f32_model();
    fails_with_exit_1(
        RUN,
        &[
            "-m",
            &m,
            "--device",
            "SIM0",
            "--cpu-moe",
            "-n",
            "2",
            "--moe-cache-alias",
            "maybe",
        ],
        &["--moe-cache-alias", "maybe"],
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
        "-p",
        "The cache lends its memory to the prompt graph while it runs.",
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
fn alias_on_and_off_give_the_cpus_tokens_and_say_which_ubatch_ran() {
    let dir = tempfile::tempdir().unwrap();
    let (cpu, _, _) = greedy(dir.path(), "cpu", &[]);
    // prompt ubatches of 2 tokens bypass a cache that serves 1; the
    // device holds 64 MiB
    let sim = [
        "--device",
        "SIM0",
        "--cpu-moe",
        "-nomb",
        "1",
        "--sim-mem-mib",
        "64",
        "-ub",
        "2",
        "--moe-cache-max-batch",
        "1",
    ];
    for (alias, want) in [("on", true), ("off", false)] {
        let mut v = sim.to_vec();
        v.extend(["--moe-cache-alias", alias]);
        let (toks, s, err) = greedy(dir.path(), alias, &v);
        assert_eq!(toks, cpu, "--moe-cache-alias {alias} changed the tokens");
        assert_eq!(s["moe_cache_alias"].as_bool(), Some(want), "{s}");
        assert_eq!(s["n_ubatch"].as_u64(), Some(2), "{s}");
        let reason = s["moe_cache_alias_reason"].as_str().unwrap_or_default();
        assert!(!reason.is_empty(), "{s}");
        let line = format!("compute alias: {alias}, ubatch 2");
        assert!(err.contains(&line), "no '{line}' in:\n{err}");
        if !want {
            assert!(reason.contains("--moe-cache-alias off"), "{reason}");
        }
    }
}
