//! Hybrid experts on the sim device (`--cpu-moe`, offload min batch 1):
//! every fixture's logits bit for bit equal to the CPU-only run with the
//! misses split between the device and the CPU (fixed shares and the cost
//! model) and with hybrid off; the CPU really computes some of them, the
//! banks stay consistent, and the experts counted add up.

mod common;

use std::sync::Arc;

use common::{or_skip, Fixture, MODELS};
use llama::moe_cache::cache::layout::model_groups;
use llama::moe_cache::hybrid::CpuShare;
use llama::moe_cache::{CacheSize, MoeCacheParams, PolicyKind};
use llama::placement::Placement;
use llama::MoeParams;
use llama::{Context, ContextParams, Model, ModelParams};

fn ctx(model: &Arc<Model>, ubatch: usize, bytes: u64, hybrid: Option<CpuShare>) -> Context {
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: ubatch,
        n_threads: 2,
        moe: MoeParams {
            cache: if bytes == 0 {
                MoeCacheParams::default()
            } else {
                MoeCacheParams {
                    size: CacheSize::Bytes(bytes),
                    policy: PolicyKind::Lru,
                    max_batch: 32,
                }
            },
            hybrid,
            ..Default::default()
        },
        ..Default::default()
    };
    Context::new(Arc::clone(model), p).expect("context")
}

/// Prompt logits (all rows), then 6 teacher-forced single-token rows.
fn logits(c: &mut Context, fx: &Fixture) -> Vec<f32> {
    let (mut out, forced) = fx.prompt_and_forced(c, 6);
    out.extend(forced);
    out
}

#[test]
fn hybrid_experts_give_cpu_logits_bit_for_bit_on_every_fixture() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let cpu = logits(
            &mut ctx(&fx.model_with_host_experts(None), 512, 0, None),
            &fx,
        );
        let model = fx.model_with_host_experts(Some("SIM0"));
        let g = &model_groups(&model)[0];
        // a cache of half the experts: it fills during the prompt
        let bytes = g.bank_bytes(g.n_expert * g.layers.len() as u32 / 2);
        for share in [
            None,
            Some(CpuShare::Fixed(0.5)),
            Some(CpuShare::Fixed(1.0)),
            Some(CpuShare::Auto),
        ] {
            for ub in [5, 512] {
                let mut c = ctx(&model, ub, bytes, share);
                let got = logits(&mut c, &fx);
                let bad = got
                    .iter()
                    .zip(&cpu)
                    .position(|(a, b)| a.to_bits() != b.to_bits());
                assert_eq!(
                    bad, None,
                    "{name} hybrid {share:?} ubatch {ub}: logits differ from the CPU's"
                );
                assert_eq!(got.len(), cpu.len());
                let t = c.moe_cache_stats().expect("a cache").total();
                match share {
                    None => assert_eq!(t.cpu(), 0, "{name}: hybrid off computed on the CPU"),
                    Some(_) => assert!(t.cpu() > 0, "{name} {share:?} ubatch {ub}: {t:?}"),
                }
                c.moe_cache_verify().expect("banks agree with the maps");
            }
        }
    }
}

/// A model on a sim device with the profile `json`, cache of half the
/// experts, `auto`: its expert counters after the prompt and 8 decodes.
fn auto_counts(fx: &Fixture, json: &str) -> llama::moe_cache::LayerCacheStats {
    let prof = ggml_core::SimProfile::from_json(json).expect("profile");
    let dev = common::sim0_with_profile(prof);
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
    let g = &model_groups(&model)[0];
    let bytes = g.bank_bytes(g.n_expert * g.layers.len() as u32 / 2);
    let mut c = ctx(&model, 5, bytes, Some(CpuShare::Auto));
    c.decode(&fx.tokens, false).expect("prompt");
    for &t in &fx.gen[..8] {
        c.decode(&[t], false).expect("decode");
    }
    c.moe_cache_stats().expect("a cache").total()
}

#[test]
fn auto_uploads_over_a_fast_link_and_computes_on_the_cpu_over_fast_host_memory() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-q8_0"));
    // link 100x faster than host memory (and quick kernels): every miss is
    // uploaded
    let fast_link = r#"{"name": "fast-link",
        "device": {"flops": 8.0e13, "mem_bw": 1.0e12, "launch_s": 1.0e-7},
        "link": {"h2d_bw": 1.0e12, "d2h_bw": 1.0e12, "latency_s": 1.0e-7},
        "cpu": {"flops": 1.0e11, "mem_bw": 1.0e10, "op_s": 1.0e-6}}"#;
    let t = auto_counts(&fx, fast_link);
    assert!(t.misses() > 0 && t.cpu() == 0, "fast link: {t:?}");
    // host memory 100x faster than the link: once the cache is full (the
    // prompt fills it: until then every miss is uploaded into a free slot),
    // every miss on the CPU
    let fast_host = r#"{"name": "fast-host",
        "link": {"h2d_bw": 1.0e9, "d2h_bw": 1.0e9, "latency_s": 1.0e-5},
        "cpu": {"flops": 1.0e13, "mem_bw": 1.0e11, "op_s": 1.0e-7}}"#;
    let t = auto_counts(&fx, fast_host);
    assert!(
        t.cpu_decode > 0 && t.misses_decode == 0,
        "fast host memory: {t:?}"
    );
}

#[test]
fn the_cpu_share_runs_while_the_uploads_cross_and_nothing_races() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-q4_k"));
    let model = fx.model_with_host_experts(Some("SIM0"));
    let g = &model_groups(&model)[0];
    let bytes = g.bank_bytes(g.n_expert * g.layers.len() as u32 / 2);
    let mut c = ctx(&model, 5, bytes, Some(CpuShare::Fixed(0.5)));
    let clock = c.sim_clock().expect("a simulated clock");
    clock.set_recording(true);
    c.decode(&fx.tokens, false).expect("prompt");
    for &t in &fx.gen[..6] {
        c.decode(&[t], false).expect("decode");
    }
    let tl = clock.take_timeline();
    tl.check_hazards()
        .expect("no span reads or writes memory another writes at the same time");
    let spans = |f: &dyn Fn(&ggml_core::timeline::Span) -> bool| -> Vec<(u64, u64)> {
        tl.spans
            .iter()
            .filter(|s| f(s))
            .map(|s| (s.start_ns, s.end_ns))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    let cpu = spans(&|s| s.stream == "host" && s.name.contains("_cpu-"));
    // the experts' uploads go under the slot map's label, the map after them
    let map_bytes = 4 * g.n_expert as u64;
    let uploads = spans(&|s| {
        s.stream == "copy0" && s.name.starts_with("moe_cache_map") && s.bytes > map_bytes
    });
    assert!(!cpu.is_empty() && !uploads.is_empty());
    let both = ggml_core::timeline::overlap_ns(&cpu, &uploads);
    assert!(
        both > 0,
        "the CPU's experts never ran while experts were uploaded"
    );
    let t = c.moe_cache_stats().expect("a cache").total();
    assert!(t.cpu() > 0 && t.misses() > 0, "{t:?}");
}
