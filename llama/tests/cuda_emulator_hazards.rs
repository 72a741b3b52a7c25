//! Planted bugs on the emulated CUDA0: for each kind of wait
//! (`GGML_CUDA_EMULATOR_DROP_WAIT=upload|readback|slot|staging`, set here
//! through `ggml_cuda::emulator::set_thread_config`), 20 seeds of random stream
//! delays with that wait dropped: every run must be caught, by the hazard
//! detector or by logits outside the fixture's bound. The same 20 seeds with
//! no wait dropped must all pass (no hazard, logits within the bound).
//! `slot` is the exception: its wait is implied by the router-id read that
//! precedes every eviction (see `check_redundant`). `staging-selective`
//! drops the `staging` wait in a run where prefetch auto is forced to the
//! selective prefetch: partial stagings reuse slots and are completed by
//! the hook at their split.
//! Always on the emulator (a real GPU has no planted bugs).
//!
//! Each run gives its host thread its own emulator configuration
//! (`emulator::set_thread_config`: seed, planted bug, its own hazard list),
//! so the seeds run on a few threads at once and the four kinds in
//! parallel: most of a run's wall time is the seeded delays and the
//! hand-offs between the host and the stream workers, which overlap.

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, Fixture};
use ggml_cuda::emulator;
use llama::device::open_device;
use llama::moe_cache::layout::model_groups;
use llama::moe_cache::prefetch_auto::Choice;
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
    emulator::set_thread_config(None);
    let mut c = emulator::config();
    c.seed = Some(seed);
    c.hazards = true;
    // `staging-selective` drops the `staging` wait
    c.drop_wait = drop.then(|| kind.trim_end_matches("-selective").to_string());
    emulator::set_thread_config(Some(c));
    // `upload` and `staging` offload every batch (expert uploads on the
    // copy stream); `readback` computes experts on the CPU (activations
    // read back); `slot` runs the expert cache with room for a few experts
    let min_batch = if matches!(kind, "upload" | "staging" | "staging-selective") {
        1
    } else {
        32
    };
    let dev = open_device("CUDA0", 2, min_batch).expect("emulated CUDA0");
    let params = ModelParams {
        device: dev,
        placement: Placement {
            cpu_moe: true,
            ..Default::default()
        },
        progress: None,
        ..Default::default()
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
            let g = &model_groups(&model)[0];
            cp.n_ubatch = 7;
            cp.moe_cache = MoeCacheParams {
                size: CacheSize::Bytes(g.bank_bytes(g.n_used * 3)),
                max_batch: 32,
                ..MoeCacheParams::default()
            };
        }
        "staging-selective" => {
            // auto's 3 slots, the selective prefetch forced: the first MoE
            // layer (no guess) staged whole, the next ones partially and
            // completed at their split, reusing the first layer's slots;
            // 4-token ubatches, so that every ubatch of the prompt reuses
            // the slots (more chances for a dropped wait to show)
            cp.prefetch_experts_slots = -1;
            cp.n_ubatch = 4;
            cp.prefetch_force = Some(Choice::Selective);
            cp.moe_cache = MoeCacheParams {
                size: CacheSize::Off,
                max_batch: 1,
                ..MoeCacheParams::default()
            };
        }
        "staging" => {
            cp.prefetch_experts_slots = 1;
            cp.moe_cache = MoeCacheParams {
                size: CacheSize::Off,
                max_batch: 1,
                ..MoeCacheParams::default()
            };
        }
        _ => {}
    }
    let mut ctx = Context::new(Arc::clone(&model), cp).expect("context");
    let n = fx.n_vocab();
    let hazard = |e: String| {
        let found = emulator::take_hazards();
        Outcome::Hazard(found.first().cloned().unwrap_or(e))
    };
    if let Err(e) = ctx.decode(&fx.tokens, true) {
        return hazard(e.to_string());
    }
    let mut ours = Vec::new();
    for i in 0..fx.tokens.len() {
        ours.extend_from_slice(ctx.logits(i).expect("row"));
    }
    let mut forced = Vec::new();
    for &t in &fx.gen[..3] {
        if let Err(e) = ctx.decode(&[t], false) {
            return hazard(e.to_string());
        }
        forced.extend_from_slice(ctx.logits(0).expect("row"));
    }
    let found = emulator::take_hazards();
    if let Some(h) = found.first() {
        return Outcome::Hazard(h.clone());
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
            "{kind} seed {seed} drop {drop}: dropped {} waits, prefetch {:?}, stats {:?}",
            emulator::dropped_waits(),
            ctx.prefetch_stats(),
            emulator::stats(0)
        );
    }
    Outcome::Logits(
        nmse(&ours, &fx.logits),
        nmse(&forced, &fx.genlogits[..3 * n]),
    )
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

/// `slot`: the emulator shows this wait is implied, in every configuration
/// run here, by a data dependence: before the hook picks a slot to evict it
/// reads the layer's router ids, which the last queued split computes, so
/// the host waits (on the readback stream's event, no longer a device
/// synchronize) for every kernel queued before, among them every kernel
/// that read the slot. Dropping the wait therefore can be neither a hazard
/// nor a change of logits; this checks the wait was dropped on the path
/// run, and that the runs stay hazard-free and within the bound. (`staging`
/// was implied the same way while every split with an id-validating op
/// synchronized the device; now that the id flag is read once per graph it
/// is caught like the others.)
fn check_redundant(kind: &str) {
    emulator::enable();
    let fx = or_skip!(Fixture::load(FIXTURE));
    let t0 = std::time::Instant::now();
    // each seed's run counts the waits it dropped on its own thread
    let dropped: u64 = per_seed(|seed| {
        let outcome = run(&fx, kind, seed, true);
        (outcome, emulator::dropped_waits())
    })
    .into_iter()
    .enumerate()
    .map(|(i, (outcome, n))| {
        match outcome {
            Outcome::Hazard(h) => panic!("{kind} dropped, seed {}: {h}", i + 1),
            Outcome::Logits(p, f) => assert!(
                p <= fx.bound && f <= fx.bound,
                "{kind} dropped, seed {}: NMSE {p:.2e} / {f:.2e} > {:.0e}",
                i + 1,
                fx.bound
            ),
        }
        n
    })
    .sum();
    assert!(
        dropped > 0,
        "{kind}: the configuration never reached the wait"
    );
    println!(
        "DROP_WAIT={kind}: {dropped} waits dropped over {SEEDS} seeds, no hazard, logits within the bound ({:.1} s): the wait is implied by the host's synchronization",
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn dropped_slot_wait_is_implied_by_the_ids_readback() {
    check_redundant("slot");
}

#[test]
fn dropped_staging_wait_is_caught() {
    check_kind("staging");
}

/// The same wait on the selective prefetch's partial stagings (completed
/// by the hook at their split): dropping it is caught; kept, every seed
/// passes.
#[test]
fn dropped_staging_wait_is_caught_with_partial_stagings() {
    check_kind("staging-selective");
}
