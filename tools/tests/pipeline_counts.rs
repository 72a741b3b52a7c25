//! The device pipeline's counts per generated token (`--stats-out` keys
//! `device_syncs_per_token`, `id_reads_per_token`, `launches_per_token`,
//! `graph_replays`), on emulated CUDA0 and on SIM0.
//!
//! The model is a 4-layer synth with the bench file's structure
//! (`scripts/make-bench-models.sh`: qwen3moe, 4 layers, Q4_K, 8 used
//! experts, grouped-query attention at 8:1) at small widths (embedding 256,
//! 32 experts of width 256), so the emulated kernels run in seconds; the
//! counts depend on the layer structure and the split plan, not on widths.
//! Run with `--cpu-moe` and the expert cache on, the CPU's share of the
//! misses fixed (0.5) so every run computes the same thing.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

/// MoE layers of the synth.
const LAYERS: f64 = 4.0;

fn synth(dir: &Path) -> String {
    let out = dir.join("bench-shaped-4l.gguf");
    let o = run(
        RUN,
        &[
            "--synth",
            out.to_str().unwrap(),
            "--layers",
            "4",
            "--experts",
            "32",
            "--used",
            "8",
            "--embd",
            "256",
            "--ff",
            "256",
            "--heads",
            "8",
            "--heads-kv",
            "1",
            "--head-dim",
            "32",
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
        "4",
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

#[test]
fn emulated_cuda0_decode_syncs_once_reads_ids_once_per_layer_and_replays_graphs() {
    let dir = tempfile::tempdir().unwrap();
    let m = synth(dir.path());
    let (o, v) = run_counted(&m, "CUDA0", dir.path(), &[]);
    let syncs = f(&v, "device_syncs_per_token");
    let ids = f(&v, "id_reads_per_token");
    let launches = f(&v, "launches_per_token");
    let replays = f(&v, "graph_replays");
    let splits = f(&v, "splits_per_token");
    println!(
        "emulated CUDA0: {syncs} device syncs, {ids} id reads, {launches} launches ({splits} splits), {replays} graph replays per generated token"
    );
    assert!(syncs <= 1.0, "device_syncs_per_token {syncs}");
    assert_eq!(ids, LAYERS, "id_reads_per_token");
    assert!(
        launches <= 2.0 * splits,
        "launches_per_token {launches} > 2 x {splits} splits"
    );
    assert!(replays > 0.0, "no graph replayed");
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
    let m = synth(dir.path());
    let (_, v) = run_counted(&m, "SIM0", dir.path(), &[]);
    assert!(f(&v, "device_syncs_per_token") <= 1.0, "{v}");
    assert_eq!(f(&v, "id_reads_per_token"), LAYERS, "{v}");
    assert!(f(&v, "launches_per_token") > 0.0, "{v}");
    assert_eq!(f(&v, "graph_replays"), 0.0, "SIM0 replays no graph: {v}");
}
