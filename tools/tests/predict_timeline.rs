//! The timeline of decoding on emulated CUDA0 with `--moe-predict on`
//! (`--timeline-out`, CUDA events around every op and copy): layer `l`'s
//! predicted experts are uploaded on the copy stream while layer `l - 1`'s
//! experts compute, after the prediction was computed and before layer
//! `l`'s own expert kernels.
//!
//! The model is the 4-layer synth of `pipeline_counts.rs` (the bench file's
//! structure at small widths), `--cpu-moe` with a 4 MiB expert cache and
//! hybrid experts off (with hybrid on, the CPU's share of layer `l - 1`
//! computes between the two, and the upload overlaps that instead).
//! Durations are the emulator's wall-clock on the CPU, not a GPU's; what
//! the test checks is the order and the overlap. Emulated copies of a few
//! kilobytes take microseconds, against milliseconds for an emulated
//! kernel, so an upload could finish in the moment before the compute
//! stream's worker starts the next kernel; the run gives the emulated
//! link a rate (`GGML_CUDA_EMULATOR_H2D_MBPS=50`), so that uploads last
//! as long as they would next to real kernels and the overlap shows.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

/// One span of the trace.
#[derive(Clone, Debug)]
struct Span {
    track: String,
    name: String,
    start: f64,
    end: f64,
}

impl Span {
    fn overlaps(&self, o: &Span) -> bool {
        self.start < o.end && o.start < self.end
    }
}

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

/// The trace's title and its spans, by start time.
fn parse(json: &str) -> (String, Vec<Span>) {
    let v: Value = serde_json::from_str(json).expect("the trace is JSON");
    let title = v["otherData"]["clock"].as_str().unwrap_or("").to_string();
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let mut tracks = std::collections::HashMap::new();
    for e in events {
        if e["ph"] == "M" && e["name"] == "thread_name" {
            let tid = e["tid"].as_i64().expect("tid");
            let name = e["args"]["name"].as_str().expect("name").to_string();
            tracks.insert(tid, name);
        }
    }
    let mut spans: Vec<Span> = events
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            let start = e["ts"].as_f64().expect("ts");
            Span {
                track: tracks
                    .get(&e["tid"].as_i64().expect("tid"))
                    .cloned()
                    .unwrap_or_default(),
                name: e["name"].as_str().expect("name").to_string(),
                start,
                end: start + e["dur"].as_f64().expect("dur"),
            }
        })
        .collect();
    spans.sort_by(|a, b| a.start.total_cmp(&b.start));
    (title, spans)
}

/// Layer `l`'s expert kernels (`MUL_MAT_ID ffn_moe_{gate,up,down}-l`).
fn expert_ops(token: &[Span], l: usize) -> Vec<&Span> {
    token
        .iter()
        .filter(|s| {
            s.track == "compute"
                && ["gate", "up", "down"]
                    .iter()
                    .any(|r| s.name == format!("MUL_MAT_ID ffn_moe_{r}-{l}"))
        })
        .collect()
}

/// The layer of an op named `... NAME-l`.
fn layer_of(name: &str) -> Option<usize> {
    name.rsplit_once('-').and_then(|(_, l)| l.parse().ok())
}

/// A text picture of one token: a column per time step, the compute row
/// showing the layer of the op running (`.` idle), the copy row `P` for a
/// predicted-expert upload and `c` for any other copy.
fn ascii(token: &[Span], cols: usize) -> String {
    let t0 = token.first().map_or(0.0, |s| s.start);
    let t1 = token.iter().map(|s| s.end).fold(t0, f64::max);
    let step = (t1 - t0).max(1.0) / cols as f64;
    let mut compute = vec!['.'; cols];
    let mut copy = vec!['.'; cols];
    for s in token {
        let a = (((s.start - t0) / step) as usize).min(cols - 1);
        let b = (((s.end - t0) / step).ceil() as usize).clamp(a + 1, cols);
        for c in a..b {
            if s.track == "compute" {
                if let Some(l) = layer_of(&s.name) {
                    compute[c] = char::from_digit(l as u32 % 10, 10).unwrap_or('?');
                } else if compute[c] == '.' {
                    compute[c] = '-';
                }
            } else if s.name.starts_with("predict") {
                copy[c] = 'P';
            } else if copy[c] == '.' {
                copy[c] = 'c';
            }
        }
    }
    format!(
        "compute |{}|\ncopy0   |{}|\n(one column = {:.0} us of emulated time; compute: the layer of the op running, - an op of no layer; copy0: P predicted experts, c other uploads)",
        compute.iter().collect::<String>(),
        copy.iter().collect::<String>(),
        step
    )
}

#[test]
fn emulated_cuda0_uploads_predicted_experts_while_the_previous_layer_computes() {
    let dir = tempfile::tempdir().unwrap();
    let m = synth(dir.path());
    let trace = dir.path().join("timeline.json");
    let o = Command::new(RUN)
        .args([
            "-m",
            &m,
            "--device",
            "CUDA0",
            "--cpu-moe",
            "--moe-cache-mib",
            "4",
            "--moe-hybrid",
            "off",
            "--moe-predict",
            "on",
            "-n",
            "3",
            "-p",
            "Hello world",
            "--temp",
            "0",
            "--timeline-out",
            trace.to_str().unwrap(),
        ])
        .env("GGML_RS_CACHE", dir.path())
        .env("GGML_CUDA_EMULATOR", "1")
        .env("GGML_CUDA_EMULATOR_H2D_MBPS", "50")
        .env_remove("GGML_CUDA_EMULATOR_DROP_WAIT")
        .env_remove("GGML_CUDA_EMULATOR_SEED")
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run llama-run");
    ok(&o);
    let (title, spans) = parse(&std::fs::read_to_string(&trace).unwrap());
    assert!(
        title.contains("emulated"),
        "the trace is not labelled emulated: {title}"
    );

    // one window per graph, each starting with its input embedding upload;
    // the first is the prompt (no prediction), the others decoded tokens
    let starts: Vec<usize> = (0..spans.len())
        .filter(|&i| spans[i].name == "inp_embd")
        .collect();
    assert!(starts.len() >= 3, "{} graphs in the trace", starts.len());
    let (mut uploads, mut overlapping) = (0, 0);
    for (k, &a) in starts.iter().enumerate().skip(1) {
        let b = starts.get(k + 1).copied().unwrap_or(spans.len());
        let token = &spans[a..b];
        for l in 1..4 {
            let preds: Vec<&Span> = token
                .iter()
                .filter(|s| {
                    s.track == "copy0" && s.name.starts_with(&format!("predict layer {l} "))
                })
                .collect();
            if preds.is_empty() {
                continue; // every predicted expert was cached already
            }
            let predicted = token
                .iter()
                .find(|s| s.name == format!("TOP_K ffn_moe_pred-{l}"))
                .unwrap_or_else(|| panic!("token {k}: no ffn_moe_pred-{l} op"));
            let prev = expert_ops(token, l - 1);
            let own = expert_ops(token, l);
            assert!(
                !prev.is_empty() && !own.is_empty(),
                "token {k}: no expert kernels of layer {} or {l}",
                l - 1
            );
            let prev_end = prev.iter().map(|s| s.end).fold(f64::MIN, f64::max);
            let own_start = own.iter().map(|s| s.start).fold(f64::MAX, f64::min);
            for p in &preds {
                uploads += 1;
                // after the prediction, and before the layer that uses it
                assert!(
                    p.start >= predicted.end,
                    "token {k}: {} starts before {} ends",
                    p.name,
                    predicted.name
                );
                assert!(
                    p.end <= own_start,
                    "token {k}: {} ends after layer {l}'s expert kernels start",
                    p.name
                );
                // not held back behind the previous layer's expert compute
                assert!(
                    p.start < prev_end,
                    "token {k}: {} starts after layer {}'s expert kernels ended",
                    p.name,
                    l - 1
                );
                if prev.iter().any(|s| s.overlaps(p)) {
                    overlapping += 1;
                }
            }
        }
    }
    let last = &spans[*starts.last().unwrap()..];
    println!(
        "emulated CUDA0, --moe-predict on: {uploads} predicted-expert uploads in {} decoded tokens, {overlapping} overlapping the previous layer's expert kernels\nlast token:\n{}",
        starts.len() - 1,
        ascii(last, 100)
    );
    assert!(uploads > 0, "no predicted expert was uploaded");
    assert!(
        2 * overlapping >= uploads,
        "{overlapping} of {uploads} predicted-expert uploads overlapped the previous layer's expert kernels (fewer than half)"
    );
}
