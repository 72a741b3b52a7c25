//! Planted bugs on the emulated CUDA0 (and CUDA1 for `peer` and
//! `peer-source`): for each kind of wait
//! (`GGML_CUDA_EMULATOR_DROP_WAIT=upload|readback|slot|staging|peer|peer-source`,
//! set here through `ggml_cuda::emulator::set_thread_config`), 20 seeds of
//! random stream delays with that wait dropped: every run must be caught,
//! by the hazard detector or by logits outside the fixture's bound. The
//! same 20 seeds with no wait dropped must all pass (no hazard, logits
//! within the bound). `slot` is an exception: its wait is implied by the
//! router-id read that precedes every eviction, the cache's and the history
//! predictor's alike (see `check_implied`); the hazard detector, which sees
//! the slots each `mul_mat_id` reads, finds nothing unordered with it
//! dropped. `peer` runs the layers split over two emulated devices: the
//! activations cross device to device, and the peer copy on CUDA1's copy
//! stream must wait for CUDA0's compute. `peer-source` is the other
//! exception: in that configuration CUDA0 runs nothing after the peer copy
//! in a graph, so its waits for the copy are implied by the end of the
//! graph; `tests`' `emulator_peer_source` catches them dropped.
//! `staging-selective` drops the `staging` wait in a run where prefetch
//! auto is forced to the selective prefetch: partial stagings reuse slots
//! and are completed by the hook at their split.
//! Always on the emulator (a real GPU has no planted bugs).
//!
//! Each run gives its host thread its own emulator configuration
//! (`emulator::set_thread_config`: seed, planted bug, its own hazard list),
//! so the seeds run on a few threads at once and the four kinds in
//! parallel: most of a run's wall time is the seeded delays and the
//! hand-offs between the host and the stream workers, which overlap.

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, same_bits, Fixture};
use ggml_cuda::emulator;
use llama::device::{open_device, open_devices, DeviceOptions};
use llama::moe_cache::cache::layout::model_groups;
use llama::moe_cache::predict::MoePredict;
use llama::moe_cache::prefetch::auto::Choice;
use llama::moe_cache::prefetch::{AutoPrefetch, PrefetchSlots};
use llama::moe_cache::{CacheSize, MoeCacheParams};
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};

const SEEDS: u64 = 20;
const FIXTURE: &str = "tiny-qwen3moe-f32";

/// Host threads running the seeds of one kind at once.
const PARALLEL: u64 = 4;

/// `f(seed)` for every seed, on [`PARALLEL`] threads; the outcomes in
/// seed order.
fn per_seed<T: Send>(f: impl Fn(u64) -> T + Sync) -> Vec<T> {
    let mut out: Vec<(u64, T)> = std::thread::scope(|sc| {
        let f = &f;
        let hs: Vec<_> = (0..PARALLEL)
            .map(|k| {
                sc.spawn(move || {
                    (1..=SEEDS)
                        .filter(|s| s % PARALLEL == k)
                        .map(|s| (s, f(s)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().expect("a seed's thread panicked"))
            .collect()
    });
    out.sort_by_key(|(s, _)| *s);
    out.into_iter().map(|(_, t)| t).collect()
}

/// What one run gave.
#[derive(Debug)]
enum Outcome {
    /// The hazard detector fired (its message).
    Hazard(String),
    /// Logits NMSE (prompt rows, then 3 teacher-forced rows).
    Logits(f64, f64),
}

/// The configuration that exercises the wait `kind` drops.
/// Runs on the calling thread with its own emulator configuration (this
/// seed, this planted bug), which stays set for the thread's next run.
fn run(fx: &Fixture, kind: &str, seed: u64, drop: bool) -> Outcome {
    run_full(fx, kind, seed, drop).outcome
}

/// What one run gave, with its logits and what the prediction uploaded.
struct Run {
    outcome: Outcome,
    /// Prompt rows, then the teacher-forced rows (empty after a hazard).
    logits: Vec<f32>,
    /// Bytes the decode prediction uploaded early.
    predicted_bytes: u64,
    /// Waits the planted bug dropped in this run.
    dropped: u64,
}

/// [`run`], keeping the logits.
fn run_full(fx: &Fixture, kind: &str, seed: u64, drop: bool) -> Run {
    emulator::set_thread_config(None);
    let mut c = emulator::config();
    c.seed = Some(seed);
    c.hazards = true;
    // `staging-selective` drops the `staging` wait
    c.drop_wait = drop.then(|| kind.trim_end_matches("-selective").to_string());
    if kind.starts_with("peer") {
        c.devices = c.devices.max(2);
        c.peer = true;
    }
    emulator::set_thread_config(Some(c));
    // `upload` and `staging` offload every batch (expert uploads on the
    // copy stream); `readback` computes experts on the CPU (activations
    // read back); `slot` runs the expert cache with room for a few experts
    let min_batch = if matches!(kind, "upload" | "staging" | "staging-selective") {
        1
    } else {
        32
    };
    let params = if kind.starts_with("peer") {
        // the layers split over CUDA0 and CUDA1 (one each), experts on the
        // devices: the hidden state crosses by a peer copy
        let names = vec!["CUDA0".to_string(), "CUDA1".to_string()];
        let opts = DeviceOptions {
            n_threads: 2,
            offload_min_batch: min_batch,
            ..Default::default()
        };
        ModelParams {
            devices: open_devices(&names, &opts).expect("emulated CUDA0,CUDA1"),
            placement: Placement {
                devices: names,
                tensor_split: vec![1.0, 3.0],
                ..Default::default()
            },
            progress: None,
            ..Default::default()
        }
    } else {
        let dev = open_device("CUDA0", 2, min_batch).expect("emulated CUDA0");
        ModelParams {
            device: dev,
            placement: Placement {
                cpu_moe: true,
                ..Default::default()
            },
            progress: None,
            ..Default::default()
        }
    };
    let model = Arc::new(Model::load(&fx.gguf, params).expect("load"));
    let mut cp = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 512,
        n_threads: 2,
        ..Default::default()
    };
    match kind {
        "slot" => {
            // a cache of three tokens' experts shared by every layer: each
            // eviction may take a slot another layer's kernels read; the
            // history predictor uploads its guesses into evicted slots with
            // no id read of its own
            let g = &model_groups(&model)[0];
            cp.n_ubatch = 7;
            cp.moe.cache = MoeCacheParams {
                size: CacheSize::Bytes(g.bank_bytes(g.n_used * 3)),
                max_batch: 32,
                ..MoeCacheParams::default()
            };
            cp.moe.predict = MoePredict::History;
        }
        "staging-selective" => {
            // auto's 3 slots, the selective prefetch forced: the first MoE
            // layer (no guess) staged whole, the next ones partially and
            // completed at their split, reusing the first layer's slots;
            // 4-token ubatches, so that every ubatch of the prompt reuses
            // the slots (more chances for a dropped wait to show)
            cp.moe.prefetch = PrefetchSlots::Auto(AutoPrefetch {
                force: Some(Choice::Selective),
                ..AutoPrefetch::default()
            });
            cp.n_ubatch = 4;
            cp.moe.cache = MoeCacheParams {
                size: CacheSize::Off,
                max_batch: 1,
                ..MoeCacheParams::default()
            };
        }
        "staging" => {
            cp.moe.prefetch = PrefetchSlots::fixed(1);
            cp.moe.cache = MoeCacheParams {
                size: CacheSize::Off,
                max_batch: 1,
                ..MoeCacheParams::default()
            };
        }
        _ => {}
    }
    let mut ctx = Context::new(Arc::clone(&model), cp).expect("context");
    let n = fx.n_vocab();
    // the history predictor guesses only after a few tokens of routing
    let n_forced = if kind == "slot" { 8 } else { 3 };
    let hazard = |e: String| {
        let found = emulator::take_hazards();
        Run {
            outcome: Outcome::Hazard(found.first().cloned().unwrap_or(e)),
            logits: Vec::new(),
            predicted_bytes: 0,
            dropped: emulator::dropped_waits(),
        }
    };
    if let Err(e) = ctx.decode(&fx.tokens, true) {
        return hazard(e.to_string());
    }
    let mut ours = Vec::new();
    for i in 0..fx.tokens.len() {
        ours.extend_from_slice(ctx.logits(i).expect("row"));
    }
    let mut forced = Vec::new();
    for &t in &fx.gen[..n_forced] {
        if let Err(e) = ctx.decode(&[t], false) {
            return hazard(e.to_string());
        }
        forced.extend_from_slice(ctx.logits(0).expect("row"));
    }
    let found = emulator::take_hazards();
    if let Some(h) = found.first() {
        return hazard(h.clone());
    }
    if kind.starts_with("peer") {
        // the configuration did cross device to device, never through host
        let st = ctx.stats();
        assert!(
            st.d2d_bytes > 0 && st.d2d_bytes_via_host == 0,
            "seed {seed}: {st:?}"
        );
    }
    if kind == "staging-selective" {
        let p = ctx.prefetch_stats().expect("staging");
        assert!(
            p.auto_selective > 0 && p.auto_whole > 0,
            "seed {seed}: the selective prefetch was not exercised: {p:?}"
        );
    }
    if std::env::var("EMURT_DEBUG").is_ok() {
        eprintln!(
            "{kind} seed {seed} drop {drop}: dropped {} waits, predict {:?}, prefetch {:?}, stats {:?}",
            emulator::dropped_waits(),
            ctx.predict_stats(),
            ctx.prefetch_stats(),
            emulator::stats(0)
        );
    }
    let outcome = Outcome::Logits(
        nmse(&ours, &fx.logits),
        nmse(&forced, &fx.genlogits[..n_forced * n]),
    );
    ours.extend_from_slice(&forced);
    Run {
        outcome,
        logits: ours,
        predicted_bytes: ctx.predict_stats().map_or(0, |p| p.bytes),
        dropped: emulator::dropped_waits(),
    }
}

fn check_kind(kind: &str) {
    emulator::enable();
    let fx = or_skip!(Fixture::load(FIXTURE));
    let t0 = std::time::Instant::now();
    let (mut hazards, mut differ) = (0, 0);
    let outcomes = per_seed(|seed| run(&fx, kind, seed, true));
    for (seed, outcome) in (1..=SEEDS).zip(outcomes) {
        match outcome {
            Outcome::Hazard(h) => {
                if hazards == 0 {
                    println!("{kind}, seed {seed}: {h}");
                }
                hazards += 1;
            }
            Outcome::Logits(p, f) => {
                assert!(
                    p > fx.bound || f > fx.bound,
                    "{kind} dropped, seed {seed}: not caught (NMSE {p:.2e} / {f:.2e})"
                );
                differ += 1;
            }
        }
    }
    println!(
        "DROP_WAIT={kind}: {SEEDS} seeds caught ({hazards} by the hazard detector, {differ} by the logits) in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let t0 = std::time::Instant::now();
    assert_seeds_pass(&fx, kind, false);
    println!(
        "no wait dropped ({kind}'s configuration): {SEEDS} seeds pass in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// Every seed runs hazard-free with logits within the fixture's bound, with
/// `kind`'s wait dropped or kept.
fn assert_seeds_pass(fx: &Fixture, kind: &str, drop: bool) {
    let what = if drop { "dropped" } else { "kept" };
    let outcomes = per_seed(|seed| run(fx, kind, seed, drop));
    for (seed, outcome) in (1..=SEEDS).zip(outcomes) {
        match outcome {
            Outcome::Hazard(h) => panic!("{kind} {what}, seed {seed}: {h}"),
            Outcome::Logits(p, f) => assert!(
                p <= fx.bound && f <= fx.bound,
                "{kind} {what}, seed {seed}: NMSE {p:.2e} / {f:.2e} > {:.0e}",
                fx.bound
            ),
        }
    }
}

#[test]
fn dropped_upload_wait_is_caught() {
    check_kind("upload");
}

#[test]
fn dropped_readback_wait_is_caught() {
    check_kind("readback");
}

/// `slot`: the emulator shows this wait is implied, in every path that
/// evicts a slot, by a data dependence. The cache evicts only after reading
/// the layer's router ids, which the last queued split computes; the
/// history predictor uploads its guesses for the next split during the
/// same split's copies, right after that read. The host has waited (on the
/// readback stream's event, not a device synchronize) for every kernel
/// queued before, among them every kernel that read the slot, and the
/// kernels of the split about to compute read only its own layer's slots,
/// which neither evicts. So dropping the wait can be neither a hazard nor
/// a change of logits. The hazard detector sees the slots each
/// `mul_mat_id` reads (checked when the kernel runs; `emulator_pipeline`'s
/// `an_upload_into_a_slot_mul_mat_id_reads_needs_a_wait` shows it catches
/// an unordered upload into one), so its silence here means nothing ran
/// unordered. Checked for every seed: the wait was dropped (for `slot`,
/// both paths ran: the predictor uploaded), no hazard, logits within the
/// bound and bit for bit those of the same seed with the wait kept.
fn check_implied(kind: &str) {
    emulator::enable();
    let fx = or_skip!(Fixture::load(FIXTURE));
    let t0 = std::time::Instant::now();
    let runs = per_seed(|seed| {
        (
            run_full(&fx, kind, seed, true),
            run_full(&fx, kind, seed, false),
        )
    });
    let mut dropped = 0;
    for (seed, (d, k)) in (1..=SEEDS).zip(runs) {
        for (r, what) in [(&d, "dropped"), (&k, "kept")] {
            match &r.outcome {
                Outcome::Hazard(h) => panic!("{kind} {what}, seed {seed}: {h}"),
                Outcome::Logits(p, f) => assert!(
                    *p <= fx.bound && *f <= fx.bound,
                    "{kind} {what}, seed {seed}: NMSE {p:.2e} / {f:.2e} > {:.0e}",
                    fx.bound
                ),
            }
            if kind == "slot" {
                assert!(
                    r.predicted_bytes > 0,
                    "{kind} {what}, seed {seed}: the history predictor uploaded nothing"
                );
            }
        }
        assert!(d.dropped > 0, "{kind}, seed {seed}: no wait was dropped");
        assert_eq!(k.dropped, 0, "{kind} kept, seed {seed}: a wait was dropped");
        assert!(
            same_bits(&d.logits, &k.logits),
            "{kind}, seed {seed}: dropping the wait changed the logits"
        );
        dropped += d.dropped;
    }
    println!(
        "DROP_WAIT={kind}: {dropped} waits dropped over {SEEDS} seeds, no hazard, logits bit-identical to the kept runs ({:.1} s): the wait is implied",
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn dropped_slot_wait_is_implied_by_the_ids_readback() {
    check_implied("slot");
}

#[test]
fn dropped_staging_wait_is_caught() {
    check_kind("staging");
}

#[test]
fn dropped_peer_wait_is_caught() {
    check_kind("peer");
}

/// `peer-source`: the source device's waits for the peer copies (its
/// compute and upload streams) are implied here by the end of the graph.
/// The plan is CPU (embeddings), CUDA0 (layer 0), CUDA1 (layer 1 and the
/// output): after the split whose copies read CUDA0's memory, CUDA0 runs
/// nothing more in the graph, and the host synchronizes every backend at
/// the end of each graph before the next one queues anything on CUDA0. The
/// waits are dropped (one per graph) with no hazard and the logits of the
/// kept runs bit for bit; `tests`' `emulator_peer_source` catches the
/// dropped waits where the source device does overwrite the copy's source
/// later in the same graph (by its compute, and by its upload stream).
#[test]
fn dropped_peer_source_wait_is_implied_by_the_end_of_the_graph() {
    check_implied("peer-source");
}

/// The same wait on the selective prefetch's partial stagings (completed
/// by the hook at their split): dropping it is caught; kept, every seed
/// passes.
#[test]
fn dropped_staging_wait_is_caught_with_partial_stagings() {
    check_kind("staging-selective");
}
