//! The device pipeline's counts per generated token (`--stats-out` keys
//! `device_syncs_per_token`, `id_reads_per_token`, `launches_per_token`,
//! `graph_replays`), on emulated CUDA0 and on SIM0.
//!
//! The decode counts are asserted on the 4-layer bench-shaped synth at the
//! bench widths (`scripts/make-bench-models.sh`: qwen3moe, 4 layers,
//! embedding 2048, 128 experts of width 768, 8 used, 32 query and 4
//! key/value heads of 128; Q4_K, about 1.3 GiB, synthesized in the test),
//! `--cpu-moe` with the expert cache on (64 MiB: 24 slots), 24 tokens on
//! emulated CUDA0. The graphs-off comparison and SIM0 run the same
//! structure at small widths (embedding 256, 32 experts of width 256): the
//! counts depend on the layer structure and the split plan, not on widths.
//! The CPU's share of the misses is fixed (0.5) so every run computes the
//! same thing.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

/// MoE layers of the synth.
const LAYERS: f64 = 4.0;

/// Widths of a 4-layer bench-shaped synth: embedding, experts, expert FFN
/// width, query heads, key/value heads, head dimension.
type Widths = [&'static str; 6];
/// `scripts/make-bench-models.sh`'s.
const BENCH: Widths = ["2048", "128", "768", "32", "4", "128"];
/// The same structure, small (grouped-query attention at 8:1).
const SMALL: Widths = ["256", "32", "256", "8", "1", "32"];

fn synth(dir: &Path, w: Widths) -> String {
    let out = dir.join(format!("bench-shaped-4l-{}.gguf", w[0]));
    let [embd, experts, ff, heads, heads_kv, head_dim] = w;
    let o = run(
        RUN,
        &[
            "--synth",
            out.to_str().unwrap(),
            "--layers",
            "4",
            "--experts",
            experts,
            "--used",
            "8",
            "--embd",
            embd,
            "--ff",
            ff,
            "--heads",
            heads,
            "--heads-kv",
            heads_kv,
            "--head-dim",
            head_dim,
            "--type",
            "Q4_K",
        ],
        dir,
    );
    ok(&o);
    out.to_str().unwrap().to_string()
}

/// `llama-run` on `device` (CUDA0 emulated) with the cache on, 24 tokens;
/// the `--stats-out` object.
fn run_counted(
    model: &str,
    device: &str,
    cache_mib: &str,
    dir: &Path,
    env: &[(&str, &str)],
) -> (Output, serde_json::Value) {
    let stats = dir.join(format!("stats-{device}.json"));
    let mut c = Command::new(RUN);
    c.args([
        "-m",
        model,
        "--device",
        device,
        "--cpu-moe",
        "--moe-cache-mib",
        cache_mib,
        "--moe-cache-cpu-share",
        "0.5",
        "-n",
        "24",
        "-p",
        "Hello world",
        "--temp",
        "0",
        "--stats-out",
        stats.to_str().unwrap(),
    ])
    .env("GGML_RS_CACHE", dir)
    .env("GGML_CUDA_EMULATOR", "1")
    .env_remove("GGML_CUDA_EMULATOR_DROP_WAIT")
    .env_remove("GGML_CUDA_DISABLE_GRAPHS")
    .env_remove("RUST_BACKTRACE");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run llama-run");
    ok(&o);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    (o, v)
}

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("--stats-out has no number '{k}': {v}"))
}

/// The three decode counts of a `--stats-out` object, asserted; the
/// launches per token.
fn assert_decode_counts(what: &str, v: &serde_json::Value) -> f64 {
    let syncs = f(v, "device_syncs_per_token");
    let ids = f(v, "id_reads_per_token");
    let launches = f(v, "launches_per_token");
    let replays = f(v, "graph_replays");
    let splits = f(v, "splits_per_token");
    println!(
        "{what}: {syncs} device syncs, {ids} id reads, {launches} launches ({splits} splits) per generated token, {replays} graph replays"
    );
    assert!(syncs <= 1.0, "{what}: device_syncs_per_token {syncs}");
    assert_eq!(ids, LAYERS, "{what}: id_reads_per_token");
    assert!(
        launches <= 2.0 * splits,
        "{what}: launches_per_token {launches} > 2 x {splits} splits"
    );
    assert!(replays > 0.0, "{what}: no graph replayed");
    launches
}

#[test]
fn emulated_cuda0_decode_counts_at_the_bench_widths() {
    let dir = tempfile::tempdir().unwrap();
    let m = synth(dir.path(), BENCH);
    let (o, v) = run_counted(&m, "CUDA0", "64", dir.path(), &[]);
    assert_decode_counts("emulated CUDA0, bench widths", &v);
    assert!(
        stderr(&o).contains("pipeline      = CUDA0"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn emulated_cuda0_decode_syncs_once_reads_ids_once_per_layer_and_replays_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let m = synth(dir.path(), SMALL);
    let (o, v) = run_counted(&m, "CUDA0", "4", dir.path(), &[]);
    let launches = assert_decode_counts("emulated CUDA0, small widths", &v);
    assert!(
        stderr(&o).contains("pipeline      = CUDA0"),
        "{}",
        stderr(&o)
    );

    // the same run launch by launch: the same logits' argmax path (text),
    // and many more launches
    let (o2, v2) = run_counted(
        &m,
        "CUDA0",
        "4",
        dir.path(),
        &[("GGML_CUDA_DISABLE_GRAPHS", "1")],
    );
    assert_eq!(stdout(&o), stdout(&o2), "graphs change what is generated");
    assert_eq!(f(&v2, "graph_replays"), 0.0);
    assert!(f(&v2, "launches_per_token") > 2.0 * launches, "{v2}");
}

#[test]
fn sim0_fills_the_same_keys() {
    let dir = tempfile::tempdir().unwrap();
    let m = synth(dir.path(), SMALL);
    let (_, v) = run_counted(&m, "SIM0", "4", dir.path(), &[]);
    assert!(f(&v, "device_syncs_per_token") <= 1.0, "{v}");
    assert_eq!(f(&v, "id_reads_per_token"), LAYERS, "{v}");
    assert!(f(&v, "launches_per_token") > 0.0, "{v}");
    assert_eq!(f(&v, "graph_replays"), 0.0, "SIM0 replays no graph: {v}");
}
