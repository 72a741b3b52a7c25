//! Forced routing (`MoeParams::forced_routing`): a trace recorded from
//! the model's own routing, forced back, gives its logits bit for bit (on
//! the CPU and with host experts on the sim device, through the cache); a
//! foreign trace routes every MoE layer by its ids, token i by trace token
//! i, wrapping around; a trace that cannot drive the model is refused.
//! Decode prediction fires under forced routing (the forced ids live on
//! the device, so the look-ahead reaches the next layer's slot map) and
//! changes no logit.

mod common;

use std::sync::Arc;

use common::{or_skip, same_bits, Fixture, MODELS};
use llama::moe_cache::cache::layout::{bytes_for_all, model_groups};
use llama::moe_cache::hybrid::CpuShare;
use llama::moe_cache::predict::MoePredict;
use llama::moe_cache::trace::forced::ForcedRouting;
use llama::moe_cache::trace::synthetic::{generate, SynthKind, SynthParams};
use llama::moe_cache::{CacheSize, MoeCacheParams, PolicyKind, Trace, TraceHeader};
use llama::MoeParams;
use llama::{Context, ContextParams, Model};

fn ctx(model: &Arc<Model>, forced: Option<ForcedRouting>) -> Context {
    let cache = if model.device.is_some() {
        MoeCacheParams {
            size: CacheSize::Auto,
            policy: PolicyKind::Lru,
            max_batch: 32,
        }
    } else {
        MoeCacheParams::default()
    };
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 8,
        n_threads: 2,
        moe: MoeParams {
            cache,
            forced_routing: forced.map(Arc::new),
            ..Default::default()
        },
        ..Default::default()
    };
    Context::new(Arc::clone(model), p).expect("context")
}

/// Prompt logits (every row, in ubatches of 8) then 4 decoded rows, and the
/// routing trace of the run.
fn run(c: &mut Context, fx: &Fixture) -> (Vec<f32>, Trace) {
    c.start_expert_trace();
    let (mut out, forced) = fx.prompt_and_forced(c, 4);
    out.extend(forced);
    (out, c.take_expert_trace().expect("trace"))
}

#[test]
fn the_models_own_routing_forced_back_gives_its_logits_bit_for_bit() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name));
        for device in [None, Some("SIM0")] {
            let model = fx.model_with_host_experts(device);
            let (want, trace) = run(&mut ctx(&model, None), &fx);
            let forced = ForcedRouting::new(&trace, &model).expect("forced");
            let (got, again) = run(&mut ctx(&model, Some(forced)), &fx);
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name} on {device:?}: forced own routing changed the logits"
            );
            assert_eq!(again, trace, "{name} on {device:?}: the routing");
        }
    }
}

#[test]
fn a_foreign_trace_routes_every_layer_wrapping_around() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"));
    for device in [None, Some("SIM0")] {
        let model = fx.model_with_host_experts(device);
        let header = TraceHeader::from_model(&model);
        let (n_moe, ne, nu) = (header.layers.len(), header.n_expert, header.n_expert_used);
        // 5 tokens, fewer than the run's: positions wrap around
        let tokens = generate(&SynthParams::new(SynthKind::Random), n_moe, ne, nu, 5);
        let trace = Trace::from_tokens(header, &tokens);
        let forced = ForcedRouting::new(&trace, &model).expect("forced");
        assert_eq!(forced.n_tokens(), 5);
        let (own, _) = run(&mut ctx(&model, None), &fx);
        let (got, rec) = run(&mut ctx(&model, Some(forced)), &fx);
        assert_ne!(got, own, "forced routing changed nothing");
        assert!(got.iter().all(|v| v.is_finite()));
        // every recorded row is the trace's token at its position
        let mut pos = 0usize;
        for ub in &rec.ubatches {
            let nt = ub.n_tokens as usize;
            for (j, (_, ids)) in ub.layers.iter().enumerate() {
                let rows = ids.len() / nu as usize;
                let first = pos + nt - rows; // the last layer: output rows only
                for r in 0..rows {
                    let want = &tokens[(first + r) % 5][j];
                    assert_eq!(&ids[r * nu as usize..(r + 1) * nu as usize], &want[..]);
                }
            }
            pos += nt;
        }
        assert_eq!(pos, fx.tokens.len() + 4);
    }
}

#[test]
fn a_trace_that_cannot_drive_the_model_is_refused() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"));
    let model = fx.model_with_host_experts(None);
    let mut h = TraceHeader::from_model(&model);
    h.n_expert_used += 1;
    let t = Trace::from_tokens(h.clone(), &[]);
    let e = ForcedRouting::new(&t, &model).unwrap_err();
    assert!(e.contains("picks 3 experts per token, the model 2"), "{e}");
    h.n_expert_used -= 1;
    h.n_expert *= 2;
    let e = ForcedRouting::new(&Trace::from_tokens(h.clone(), &[]), &model).unwrap_err();
    assert!(
        e.contains("16 experts per layer, more than the model's 8"),
        "{e}"
    );
    h.n_expert /= 2;
    let e = ForcedRouting::new(&Trace::from_tokens(h, &[]), &model).unwrap_err();
    assert!(e.contains("no token"), "{e}");
}

#[test]
fn prediction_fires_under_forced_routing_and_changes_no_logit() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = fx.model_with_host_experts(Some("SIM0"));
        let header = TraceHeader::from_model(&model);
        if header.layers.is_empty() {
            continue;
        }
        let (n_moe, ne, nu) = (header.layers.len(), header.n_expert, header.n_expert_used);
        let tokens = generate(&SynthParams::new(SynthKind::Topic), n_moe, ne, nu, 64);
        let trace = Trace::from_tokens(header, &tokens);
        let half = bytes_for_all(&model_groups(&model)) / 2;
        let mut want: Option<Vec<f32>> = None;
        // hybrid experts: the CPU path reads the ids' twin in host memory
        let runs = [
            (MoePredict::Off, None),
            (MoePredict::Router, None),
            (MoePredict::History, None),
            (MoePredict::Off, Some(CpuShare::Fixed(0.5))),
            (MoePredict::History, Some(CpuShare::Fixed(0.5))),
        ];
        for (on, hybrid) in runs {
            let forced = ForcedRouting::new(&trace, &model).expect("forced");
            let p = ContextParams {
                n_ctx: 256,
                n_batch: 256,
                n_ubatch: 8,
                n_threads: 2,
                moe: MoeParams {
                    cache: MoeCacheParams {
                        size: CacheSize::Bytes(half),
                        policy: PolicyKind::Lru,
                        max_batch: 32,
                    },
                    predict: on,
                    hybrid,
                    forced_routing: Some(Arc::new(forced)),
                    ..Default::default()
                },
                ..Default::default()
            };
            let mut c = Context::new(Arc::clone(&model), p).expect("context");
            let (got, _) = run(&mut c, &fx);
            c.moe_cache_verify().expect("banks agree with the maps");
            if hybrid.is_some() {
                let cpu = c.moe_cache_stats().expect("cache").total().cpu();
                assert!(cpu > 0, "{name}: no expert on the CPU with hybrid 0.5");
            }
            match &want {
                None => want = Some(got),
                Some(w) => assert!(
                    same_bits(&got, w),
                    "{name}: --moe-predict {on}, hybrid {hybrid:?}: the logits changed under forced routing"
                ),
            }
            let Some(st) = c.predict_stats() else {
                assert_eq!(on, MoePredict::Off, "{name}: no prediction state");
                continue;
            };
            // the router's guess is built by the common MoE block only, and
            // needs a cached layer before the guessed one
            let router_guesses =
                n_moe >= 2 && !name.contains("deepseek2") && !name.contains("gptoss");
            if on == MoePredict::History || router_guesses {
                assert!(
                    st.layers > 0,
                    "{name}: {on} predicted nothing under forced routing"
                );
                assert!(st.experts_correct <= st.experts_needed.min(st.experts_predicted));
            }
        }
    }
}
