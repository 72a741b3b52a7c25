//! On a model with 64 experts and 8 used per token, experts in host memory
//! and every batch offloaded to the sim device: with a cache that holds
//! half the experts, a decoded token moves at most 0.6x the bytes of the
//! selective copy without cache, for every policy (hit rates printed).

use std::sync::Arc;

use ggml_core::GgmlType;
use llama::device::open_device;
use llama::moe_cache::cache::layout::model_groups;
use llama::moe_cache::{CacheSize, MoeCacheParams, PolicyKind};
use llama::placement::Placement;
use llama::MoeParams;
use llama::{Context, ContextParams, Model, ModelParams};
use synth::{synthesize, SynthParams};

fn model() -> Arc<Model> {
    let p = SynthParams {
        n_layer: 2,
        n_expert: 64,
        n_expert_used: 8,
        n_embd: 128,
        n_ff_exp: 128,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 32,
        n_merges: 32,
        ty: GgmlType::Q8_0,
        seed: 7,
        ..SynthParams::default_model()
    };
    let w = synthesize(&p, &mut |_| {}).expect("synthesize");
    let file = ggml_core::gguf::GgufFile::from_bytes(w.to_bytes().expect("bytes")).expect("parse");
    let params = ModelParams {
        device: open_device("SIM0", 2, 1).expect("SIM0"),
        placement: Placement {
            cpu_moe: true,
            ..Default::default()
        },
        progress: None,
        ..Default::default()
    };
    Arc::new(Model::from_gguf(file, params).expect("load"))
}

/// Expert bytes per decoded token, the tokens, and the cache's decode hit rate.
fn decode(model: &Arc<Model>, cache: MoeCacheParams, n: usize) -> (f64, Vec<i32>, f64) {
    let cp = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 256,
        n_threads: 2,
        moe: MoeParams {
            cache,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut ctx = Context::new(Arc::clone(model), cp).expect("context");
    let prompt = ctx
        .tokenize("Once upon a time", true, false)
        .expect("tokenize");
    ctx.decode(&prompt, false).expect("prompt");
    let mut tok = llama::sampling::argmax(ctx.logits(0).expect("row"));
    ctx.reset_stats();
    let mut toks = Vec::new();
    for _ in 0..n {
        ctx.decode(&[tok], false).expect("decode");
        toks.push(tok);
        tok = llama::sampling::argmax(ctx.logits(0).expect("row"));
    }
    let st = ctx.stats();
    let rate = ctx
        .moe_cache_stats()
        .map_or(0.0, |c| c.total().hit_rate_decode());
    (st.h2d_bytes_experts as f64 / n as f64, toks, rate)
}

#[test]
fn half_the_experts_cached_cost_at_most_0_6x_the_selective_copy() {
    let model = model();
    let n = 48;
    let (copy, toks, _) = decode(&model, MoeCacheParams::default(), n);
    assert!(copy > 0.0, "the selective copy must have run");
    let g = &model_groups(&model)[0];
    let half = g.bank_bytes(g.n_expert * g.layers.len() as u32 / 2);
    for policy in PolicyKind::ALL {
        let cache = MoeCacheParams {
            size: CacheSize::Bytes(half),
            policy,
            max_batch: 32,
        };
        let (cached, toks_c, rate) = decode(&model, cache, n);
        assert_eq!(toks_c, toks, "{policy}: the cache changed the tokens");
        let ratio = cached / copy;
        println!(
            "64 experts, 8 used, half cached, {policy}: {cached:.0} B/token vs {copy:.0} B/token selective copy ({ratio:.3}x), decode hit rate {:.1}%",
            100.0 * rate
        );
        assert!(ratio <= 0.6, "{policy}: {ratio:.3}x of the selective copy");
    }
}
