//! The MoE features on CUDA0 (the emulated device without a GPU): the
//! prefetch look-ahead, hybrid experts, decode prediction, each within the
//! fixture's bound and, where the feature must not change the numbers,
//! bit for bit equal to the same device with the feature off; and the
//! expert bytes `--cpu-moe` uploads on CUDA0 equal to SIM0's for the same
//! run. Fixtures: qwen3moe (F32 and Q4_K), deepseek2, gpt-oss.

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, same_bits, Fixture};
use llama::device::open_device;
use llama::moe_cache::forced::ForcedRouting;
use llama::moe_cache::hybrid::CpuShare;
use llama::moe_cache::layout::{bytes_for_all, model_groups};
use llama::moe_cache::predict::MoePredict;
use llama::moe_cache::{CacheSize, MoeCacheParams, PolicyKind};
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};

const FIXTURES: [&str; 4] = [
    "tiny-qwen3moe-f32",
    "tiny-qwen3moe-q4_k",
    "tiny-deepseek2-f32",
    "tiny-gptoss-mxfp4",
];

fn use_emulator_without_gpu() {
    if let Some(why) = ggml_cuda::unavailable_reason() {
        println!("no GPU ({why}): CUDA0 is the emulated device");
        ggml_cuda::emulator::fallback(&why);
    }
}

/// The model with experts in host memory (`--cpu-moe`) on `device`, every
/// batch offloaded (`--offload-min-batch 1`).
fn load(fx: &Fixture, device: &str) -> Arc<Model> {
    let params = ModelParams {
        device: open_device(device, 2, 1).expect("device"),
        placement: Placement {
            cpu_moe: true,
            ..Default::default()
        },
        progress: None,
        ..Default::default()
    };
    Arc::new(Model::load(&fx.gguf, params).expect("load"))
}

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 512,
        n_threads: 2,
        ..Default::default()
    }
}

/// Prompt rows, then 4 teacher-forced rows; with the NMSE of each part
/// against the fixture.
fn logits(c: &mut Context, fx: &Fixture) -> (Vec<f32>, f64, f64) {
    let (mut out, forced) = fx.prompt_and_forced(c, 4);
    let prompt = out.len();
    out.extend(forced);
    let p = nmse(&out[..prompt], &fx.logits);
    let f = nmse(&out[prompt..], &fx.genlogits[..out.len() - prompt]);
    (out, p, f)
}

fn within(fx: &Fixture, what: &str, p: f64, f: f64) {
    println!(
        "{} [{what}]: prompt NMSE {p:.2e}, teacher-forced NMSE {f:.2e}",
        fx.name
    );
    assert!(
        p <= fx.bound && f <= fx.bound,
        "{} [{what}]: NMSE {p:.2e} / {f:.2e} > {:.0e}",
        fx.name,
        fx.bound
    );
}

/// What the plain run gives: [`logits`] and the expert bytes uploaded
/// (`h2d_bytes_experts`, `h2d_bytes_full_copy`).
type PlainRun = (Vec<f32>, (u64, u64));

/// The plain `--cpu-moe` run on CUDA0 (every batch offloaded, no prefetch,
/// no cache), which the prefetch test compares with and the upload test
/// counts: run once per fixture for both (whichever test comes first runs
/// it, the other waits for it).
fn cuda0_plain_run(fx: &Fixture) -> Arc<PlainRun> {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};
    type Cell = Arc<OnceLock<Arc<PlainRun>>>;
    static RUNS: Mutex<BTreeMap<String, Cell>> = Mutex::new(BTreeMap::new());
    let cell = RUNS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(fx.name.clone())
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let model = load(fx, "CUDA0");
        let mut c = Context::new(Arc::clone(&model), params()).expect("context");
        let (out, ..) = logits(&mut c, fx);
        let st = c.stats();
        Arc::new((out, (st.h2d_bytes_experts, st.h2d_bytes_full_copy)))
    })
    .clone()
}

#[test]
fn prefetch_on_cuda0_changes_no_logit() {
    use_emulator_without_gpu();
    for name in FIXTURES {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(&fx, "CUDA0");
        let plain = cuda0_plain_run(&fx);
        let base = &plain.0;
        for slots in [1, 3] {
            let mut cp = params();
            cp.prefetch_experts_slots = slots;
            cp.moe_cache.max_batch = 1;
            let mut c = Context::new(Arc::clone(&model), cp).expect("context");
            let (got, p, f) = logits(&mut c, &fx);
            within(&fx, &format!("prefetch {slots} slots"), p, f);
            assert!(same_bits(&got, base), "{name}: prefetch changed the logits");
            // every fixture's experts have CUDA kernels (gpt-oss's MXFP4
            // included), so each one stages experts
            let st = c.prefetch_stats().expect("staging");
            assert!(st.bytes > 0 && st.bytes_used > 0, "{name}: {st:?}");
        }
    }
}

#[test]
fn hybrid_experts_on_cuda0_within_the_bound() {
    use_emulator_without_gpu();
    for name in FIXTURES {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(&fx, "CUDA0");
        let g = &model_groups(&model)[0];
        let bytes = g.bank_bytes(g.n_expert * g.layers.len() as u32 / 2);
        for share in [CpuShare::Fixed(0.5), CpuShare::Auto] {
            let mut cp = params();
            cp.n_ubatch = 5;
            cp.moe_cache = MoeCacheParams {
                size: CacheSize::Bytes(bytes),
                policy: PolicyKind::Lru,
                max_batch: 32,
            };
            cp.moe_hybrid = Some(share);
            let mut c = Context::new(Arc::clone(&model), cp).expect("context");
            let (_, p, f) = logits(&mut c, &fx);
            within(&fx, &format!("hybrid {share:?}"), p, f);
            let t = c.moe_cache_stats().expect("a cache").total();
            if share == CpuShare::Fixed(0.5) {
                assert!(t.cpu() > 0, "{name}: the CPU computed no expert: {t:?}");
            }
            c.moe_cache_verify().expect("banks agree with the maps");
        }
    }
}

#[test]
fn moe_predict_on_cuda0_changes_no_logit() {
    use_emulator_without_gpu();
    for name in FIXTURES {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(&fx, "CUDA0");
        let mut outs = Vec::new();
        for on in [MoePredict::Off, MoePredict::Router, MoePredict::History] {
            let mut cp = params();
            cp.moe_cache = MoeCacheParams {
                size: CacheSize::Bytes(bytes_for_all(&model_groups(&model)) / 2),
                ..MoeCacheParams::default()
            };
            cp.moe_predict = on;
            let mut c = Context::new(Arc::clone(&model), cp).expect("context");
            let (got, p, f) = logits(&mut c, &fx);
            within(&fx, &format!("--moe-predict {on}"), p, f);
            c.moe_cache_verify().expect("banks agree with the maps");
            outs.push(got);
        }
        for (o, on) in outs[1..].iter().zip(["router", "history"]) {
            assert!(
                same_bits(&outs[0], o),
                "{name}: the {on} prediction changed the logits"
            );
        }
    }
}

/// Forced routing on CUDA0 (its ids are device inputs there, uploaded
/// before the compute that reads them): the model's own routing, recorded
/// and forced back with the cache and the history prediction on, gives the
/// same logits bit for bit and the same routing.
#[test]
fn forced_own_routing_on_cuda0_changes_no_logit() {
    use_emulator_without_gpu();
    for name in FIXTURES {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(&fx, "CUDA0");
        let run = |forced: Option<ForcedRouting>| {
            let mut cp = params();
            cp.moe_cache = MoeCacheParams {
                size: CacheSize::Bytes(bytes_for_all(&model_groups(&model)) / 2),
                ..MoeCacheParams::default()
            };
            cp.moe_predict = MoePredict::History;
            cp.forced_routing = forced.map(Arc::new);
            let mut c = Context::new(Arc::clone(&model), cp).expect("context");
            c.start_expert_trace();
            let (got, p, f) = logits(&mut c, &fx);
            within(&fx, "forced routing", p, f);
            c.moe_cache_verify().expect("banks agree with the maps");
            (got, c.take_expert_trace().expect("trace"))
        };
        let (want, trace) = run(None);
        let forced = ForcedRouting::new(&trace, &model).expect("forced");
        let (got, again) = run(Some(forced));
        assert!(
            same_bits(&want, &got),
            "{name}: its own routing forced back on CUDA0 changed the logits"
        );
        assert_eq!(again, trace, "{name}: the routing");
    }
}

#[test]
fn cpu_moe_uploads_the_expert_bytes_sim0_uploads() {
    use_emulator_without_gpu();
    for name in FIXTURES {
        let fx = or_skip!(Fixture::load(name), continue);
        let mut seen = Vec::new();
        let model = load(&fx, "SIM0");
        let mut c = Context::new(Arc::clone(&model), params()).expect("context");
        let _ = logits(&mut c, &fx);
        let st = c.stats();
        seen.push((st.h2d_bytes_experts, st.h2d_bytes_full_copy));
        seen.push(cuda0_plain_run(&fx).1);
        println!(
            "{name}: experts uploaded SIM0 {} B, CUDA0 {} B (full copies {} / {} B)",
            seen[0].0, seen[1].0, seen[0].1, seen[1].1
        );
        assert!(seen[0].0 > 0, "{name}: nothing uploaded");
        assert_eq!(
            seen[0], seen[1],
            "{name}: CUDA0 and SIM0 upload differently"
        );
    }
}
