//! Planted bugs on the emulated CUDA0: for each kind of wait
//! (`GGML_CUDA_EMULATOR_DROP_WAIT=upload|readback|slot|staging`, set here
//! through `ggml_cuda::emulator::set_config`), 20 seeds of random stream
//! delays with that wait dropped: every run must be caught, by the hazard
//! detector or by logits outside the fixture's bound. The same 20 seeds with
//! no wait dropped must all pass (no hazard, logits within the bound).
//! `slot` is the exception: its wait is implied by the router-id read that
//! precedes every eviction (see `check_redundant`).
//! Always on the emulator (a real GPU has no planted bugs).

mod common;

use std::sync::{Arc, Mutex, MutexGuard};

use common::{nmse, or_skip, Fixture};
use ggml_cuda::emulator;
use llama::device::open_device;
use llama::moe_cache::layout::model_groups;
use llama::moe_cache::{CacheSize, MoeCacheParams};
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};

const SEEDS: u64 = 20;
const FIXTURE: &str = "tiny-qwen3moe-f32";

/// One test at a time: the emulator's configuration is process-wide.
fn lock() -> MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
fn run(fx: &Fixture, kind: &str, seed: u64, drop: bool) -> Outcome {
    let mut c = emulator::config();
    c.seed = Some(seed);
    c.hazards = true;
    c.drop_wait = drop.then(|| kind.to_string());
    emulator::set_config(c);
    let _ = emulator::take_hazards();
    // `upload` and `staging` offload every batch (expert uploads on the
    // copy stream); `readback` computes experts on the CPU (activations
    // read back); `slot` runs the expert cache with room for a few experts
    let min_batch = if matches!(kind, "upload" | "staging") {
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
    let _g = lock();
    emulator::enable();
    let fx = or_skip!(Fixture::load(FIXTURE));
    let t0 = std::time::Instant::now();
    let (mut hazards, mut differ) = (0, 0);
    for seed in 1..=SEEDS {
        match run(&fx, kind, seed, true) {
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
    reset_config();
}

/// Every seed runs hazard-free with logits within the fixture's bound, with
/// `kind`'s wait dropped or kept.
fn assert_seeds_pass(fx: &Fixture, kind: &str, drop: bool) {
    let what = if drop { "dropped" } else { "kept" };
    for seed in 1..=SEEDS {
        match run(fx, kind, seed, drop) {
            Outcome::Hazard(h) => panic!("{kind} {what}, seed {seed}: {h}"),
            Outcome::Logits(p, f) => assert!(
                p <= fx.bound && f <= fx.bound,
                "{kind} {what}, seed {seed}: NMSE {p:.2e} / {f:.2e} > {:.0e}",
                fx.bound
            ),
        }
    }
}

/// Back to no planted bug and no delays.
fn reset_config() {
    let mut c = emulator::config();
    c.drop_wait = None;
    c.seed = None;
    emulator::set_config(c);
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
    let _g = lock();
    emulator::enable();
    let fx = or_skip!(Fixture::load(FIXTURE));
    let t0 = std::time::Instant::now();
    let before = emulator::dropped_waits();
    assert_seeds_pass(&fx, kind, true);
    let dropped = emulator::dropped_waits() - before;
    assert!(
        dropped > 0,
        "{kind}: the configuration never reached the wait"
    );
    println!(
        "DROP_WAIT={kind}: {dropped} waits dropped over {SEEDS} seeds, no hazard, logits within the bound ({:.1} s): the wait is implied by the host's synchronization",
        t0.elapsed().as_secs_f64()
    );
    reset_config();
}

#[test]
fn dropped_slot_wait_is_implied_by_the_ids_readback() {
    check_redundant("slot");
}

#[test]
fn dropped_staging_wait_is_caught() {
    check_kind("staging");
}
