//! The timeline of decoding on emulated CUDA0 with `--moe-predict on`
//! (`--timeline-out`, CUDA events around every op and copy): layer `l`'s
//! predicted experts are uploaded on the copy stream while layer `l - 1`'s
//! experts compute, after the prediction was computed and before layer
//! `l`'s own expert kernels.
//!
//! What is checked, for every predicted upload `p` of layer `l` in every
//! decoded token ([`check_layer`]):
//! - (a) `p` starts after the prediction (`TOP_K ffn_moe_pred-l`) ends;
//! - (b) `p` ends before layer `l`'s own expert kernels start;
//! - (c) `p` is not held back: it starts before layer `l - 1`'s expert
//!   kernels end, or the copy queue was busy up to it (the span before it
//!   on the copy track ends at most [`BACK_TO_BACK_US`] before it starts:
//!   when the uploads of a layer outlast the previous layer's compute,
//!   the later ones queue behind the earlier ones, but the queue never
//!   idles while an upload waits for the compute stream);
//! - (d) the first predicted upload of a layer overlaps layer `l - 1`'s
//!   expert kernels in at least half of the (token, layer) pairs that
//!   upload anything: the overlap the test is named for.
//!
//! `checker_rejects_*` prove on synthetic span lists that each of these
//! can fail (an upload held back behind the compute with the queue idle
//! before it, one before its prediction, one after its layer's kernels).
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
//! as long as they would next to real kernels and the overlap shows. At
//! that rate a layer's predicted uploads (about 19 ms) outlast its
//! emulated expert compute (about 7 ms with the fused expert mat-vec), so
//! (c)'s second case is what holds for the later uploads of a layer. The
//! test runs with the fused kernels and with `GGML_CUDA_DISABLE_FUSION=1`.

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

/// Layer `l`'s expert kernels: the spans on the compute track naming
/// `ffn_moe_{gate,up,down}-l` (`MUL_MAT_ID ffn_moe_gate-l`, or a fused
/// kernel's `k_mmvq_id_glu ffn_moe_gate-l+ffn_moe_up-l+...`).
fn expert_ops(token: &[Span], l: usize) -> Vec<&Span> {
    let wanted: Vec<String> = ["gate", "up", "down"]
        .iter()
        .map(|r| format!("ffn_moe_{r}-{l}"))
        .collect();
    token
        .iter()
        .filter(|s| {
            s.track == "compute"
                && s.name
                    .split([' ', '+'])
                    .any(|w| wanted.iter().any(|x| x == w))
        })
        .collect()
}

/// The layer of an op named `... NAME-l`.
fn layer_of(name: &str) -> Option<usize> {
    name.rsplit_once('-').and_then(|(_, l)| l.parse().ok())
}

/// How long the copy queue may sit between two spans and still count as
/// busy back to back (the emulator's copy worker takes a few microseconds
/// from one queued copy to the next; a held-back upload leaves it idle
/// for the previous layer's expert compute, milliseconds).
const BACK_TO_BACK_US: f64 = 1000.0;

/// One layer's predicted uploads in one token, and what they are checked
/// against.
struct LayerUploads<'a> {
    /// The layer `l`.
    layer: usize,
    /// The prediction op (`TOP_K ffn_moe_pred-l`).
    prediction: &'a Span,
    /// Layer `l - 1`'s expert kernels.
    prev: Vec<&'a Span>,
    /// Layer `l`'s expert kernels.
    own: Vec<&'a Span>,
    /// The predicted uploads of layer `l`, by start time.
    uploads: Vec<&'a Span>,
}

/// Checks (a)-(c) of the module doc for one layer's uploads; `copies` is
/// every span of the copy track in the token, by start time. Returns
/// whether the layer's first upload overlaps layer `l - 1`'s expert
/// kernels (for (d)), or what is wrong.
fn check_layer(copies: &[&Span], u: &LayerUploads) -> Result<bool, String> {
    let l = u.layer;
    if u.prev.is_empty() || u.own.is_empty() || u.uploads.is_empty() {
        return Err(format!(
            "no expert kernels of layer {} or {l}, or no upload",
            l.wrapping_sub(1)
        ));
    }
    let prev_end = u.prev.iter().map(|s| s.end).fold(f64::MIN, f64::max);
    let own_start = u.own.iter().map(|s| s.start).fold(f64::MAX, f64::min);
    for p in &u.uploads {
        if p.start < u.prediction.end {
            return Err(format!(
                "{} starts at {:.0} us, before {} ends at {:.0} us",
                p.name, p.start, u.prediction.name, u.prediction.end
            ));
        }
        if p.end > own_start {
            return Err(format!(
                "{} ends at {:.0} us, after layer {l}'s expert kernels start at {own_start:.0} us",
                p.name, p.end
            ));
        }
        if p.start >= prev_end {
            // the queue must have been busy up to it
            let i = copies
                .iter()
                .position(|c| std::ptr::eq(*c, *p))
                .ok_or_else(|| format!("{} is not on the copy track", p.name))?;
            let before = i.checked_sub(1).map(|j| copies[j]);
            let idle = before.map_or(f64::INFINITY, |b| p.start - b.end);
            if idle > BACK_TO_BACK_US {
                return Err(format!(
                    "{} starts at {:.0} us, after layer {}'s expert kernels ended at {prev_end:.0} us, \
                     with the copy queue idle for {idle:.0} us before it (held back)",
                    p.name,
                    p.start,
                    l - 1
                ));
            }
        }
    }
    let first = u.uploads[0];
    Ok(u.prev.iter().any(|s| s.overlaps(first)))
}

/// The copy track's spans of one token, by start time.
fn copy_track(token: &[Span]) -> Vec<&Span> {
    token.iter().filter(|s| s.track == "copy0").collect()
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
    for fusion_off in [false, true] {
        decode_and_check(fusion_off);
    }
}

/// One run (the fused expert kernels on, or off) and its checks.
fn decode_and_check(fusion_off: bool) {
    let dir = tempfile::tempdir().unwrap();
    let m = synth(dir.path());
    let trace = dir.path().join("timeline.json");
    let mut cmd = Command::new(RUN);
    cmd.args([
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
    .env_remove("RUST_BACKTRACE");
    if fusion_off {
        cmd.env("GGML_CUDA_DISABLE_FUSION", "1");
    } else {
        cmd.env_remove("GGML_CUDA_DISABLE_FUSION");
    }
    let o = cmd.output().expect("run llama-run");
    ok(&o);
    let (title, spans) = parse(&std::fs::read_to_string(&trace).unwrap());
    assert!(
        title.contains("emulated"),
        "the trace is not labelled emulated: {title}"
    );
    let fusion = if fusion_off { "off" } else { "on" };
    let fused_spans = spans
        .iter()
        .filter(|s| s.name.starts_with("k_mmvq_id_"))
        .count();
    assert_eq!(
        fused_spans == 0,
        fusion_off,
        "fusion {fusion}: {fused_spans} fused expert kernels in the trace"
    );

    // one window per graph, each starting with its input embedding upload;
    // the first is the prompt (no prediction), the others decoded tokens
    let starts: Vec<usize> = (0..spans.len())
        .filter(|&i| spans[i].name == "inp_embd")
        .collect();
    assert!(starts.len() >= 3, "{} graphs in the trace", starts.len());
    let (mut uploads, mut layers, mut first_overlapping) = (0, 0, 0);
    for (k, &a) in starts.iter().enumerate().skip(1) {
        let b = starts.get(k + 1).copied().unwrap_or(spans.len());
        let token = &spans[a..b];
        let copies = copy_track(token);
        for l in 1..4 {
            let preds: Vec<&Span> = copies
                .iter()
                .copied()
                .filter(|s| s.name.starts_with(&format!("predict layer {l} ")))
                .collect();
            if preds.is_empty() {
                continue; // every predicted expert was cached already
            }
            let prediction = token
                .iter()
                .find(|s| s.name == format!("TOP_K ffn_moe_pred-{l}"))
                .unwrap_or_else(|| panic!("token {k}: no ffn_moe_pred-{l} op"));
            uploads += preds.len();
            layers += 1;
            let u = LayerUploads {
                layer: l,
                prediction,
                prev: expert_ops(token, l - 1),
                own: expert_ops(token, l),
                uploads: preds,
            };
            // the fused gate/up kernel's span names its layer's nodes
            assert_eq!(
                u.prev.iter().any(|s| s.name.starts_with("k_mmvq_id_glu ")),
                !fusion_off,
                "fusion {fusion}, token {k}: layer {}'s expert kernels {:?}",
                l - 1,
                u.prev.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
            match check_layer(&copies, &u) {
                Ok(first) => first_overlapping += usize::from(first),
                Err(e) => panic!(
                    "fusion {fusion}, token {k}, layer {l}: {e}\n{}",
                    ascii(token, 100)
                ),
            }
        }
    }
    let last = &spans[*starts.last().unwrap()..];
    println!(
        "emulated CUDA0, --moe-predict on, fusion {fusion}: {uploads} predicted-expert uploads for {layers} layers in {} decoded tokens; the first upload of {first_overlapping} of the {layers} overlaps the previous layer's expert kernels\nlast token:\n{}",
        starts.len() - 1,
        ascii(last, 100)
    );
    assert!(uploads > 0, "no predicted expert was uploaded");
    assert!(
        2 * first_overlapping >= layers,
        "fusion {fusion}: the first predicted upload of {first_overlapping} of {layers} layers overlapped the previous layer's expert kernels (fewer than half)"
    );
}

/// A span on `track` from `start` to `end` (microseconds).
fn span(track: &str, name: &str, start: f64, end: f64) -> Span {
    Span {
        track: track.into(),
        name: name.into(),
        start,
        end,
    }
}

/// A synthetic token's compute track: the prediction of layer 1 at
/// 0..10 us, layer 0's expert kernels (fused gate/up, then down) at
/// 100..5000, layer 1's at 9000..10000.
fn compute_track() -> Vec<Span> {
    vec![
        span("compute", "TOP_K ffn_moe_pred-1", 0.0, 10.0),
        span(
            "compute",
            "k_mmvq_id_glu ffn_moe_gate-0+ffn_moe_up-0",
            100.0,
            3000.0,
        ),
        span("compute", "MUL_MAT_ID ffn_moe_down-0", 3000.0, 5000.0),
        span("compute", "MUL_MAT_ID ffn_moe_gate-1", 9000.0, 10000.0),
    ]
}

/// [`check_layer`] for layer 1 on a synthetic token: `compute` and a copy
/// track of another upload at 20..`cache_end` us, then predicted uploads
/// at `ups`.
fn check_synthetic(compute: &[Span], cache_end: f64, ups: &[(f64, f64)]) -> Result<bool, String> {
    let mut copies = vec![span("copy0", "moe_cache_map-0", 20.0, cache_end)];
    for (i, &(a, b)) in ups.iter().enumerate() {
        copies.push(span("copy0", &format!("predict layer 1 role {i}"), a, b));
    }
    let track: Vec<&Span> = copies.iter().collect();
    let u = LayerUploads {
        layer: 1,
        prediction: &compute[0],
        prev: expert_ops(compute, 0),
        own: expert_ops(compute, 1),
        uploads: track[1..].to_vec(),
    };
    assert_eq!(u.prev.len(), 2, "the fused span names layer 0");
    check_layer(&track, &u)
}

#[test]
fn checker_accepts_uploads_queued_back_to_back_past_the_previous_layer() {
    let c = compute_track();
    // the first overlaps layer 0's kernels, the later ones run past their
    // end (5000), each right after the one before it
    let ups = [(1000.0, 3000.0), (3002.0, 5002.0), (5003.0, 7000.0)];
    assert_eq!(check_synthetic(&c, 1000.0, &ups), Ok(true));
    // a first upload behind a queue busy until after layer 0's kernels:
    // not held back, but not overlapping either (counted against (d))
    assert_eq!(check_synthetic(&c, 5500.0, &[(5501.0, 6000.0)]), Ok(false));
}

#[test]
fn checker_rejects_an_upload_held_back_behind_the_previous_layers_compute() {
    let c = compute_track();
    // the second upload waits for layer 0's kernels (ended at 5000) with
    // the copy queue idle from 2000
    let ups = [(1000.0, 2000.0), (5010.0, 6000.0)];
    let e = check_synthetic(&c, 1000.0, &ups).expect_err("held back");
    assert!(e.contains("held back") && e.contains("role 1"), "{e}");
    // the first one so, after the queue idled from 1000
    let e = check_synthetic(&c, 1000.0, &[(5200.0, 6000.0)]).expect_err("held back");
    assert!(e.contains("idle for 4200 us"), "{e}");
    // the same upload right behind a busy queue passes
    let ups = [(1000.0, 2000.0), (2001.0, 5004.0), (5005.0, 6000.0)];
    assert_eq!(check_synthetic(&c, 1000.0, &ups), Ok(true));
}

#[test]
fn checker_rejects_uploads_out_of_order_with_the_prediction_or_the_layer() {
    let mut c = compute_track();
    // an upload still running when layer 1's kernels start (9000)
    let e = check_synthetic(&c, 1000.0, &[(1000.0, 3000.0), (3001.0, 9500.0)])
        .expect_err("after its layer's kernels start");
    assert!(e.contains("after layer 1's expert kernels start"), "{e}");
    // an upload before its prediction ends
    c[0].end = 1500.0;
    let e = check_synthetic(&c, 1000.0, &[(1000.0, 2000.0)]).expect_err("before");
    assert!(e.contains("before TOP_K ffn_moe_pred-1 ends"), "{e}");
}
