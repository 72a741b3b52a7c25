//! K and V caches of different element types (llama.cpp's `-ctk`/`-ctv`):
//! every combination of F16 and F32, on both attention paths, stays within
//! the fixture bound of llama.cpp's logits (made with an F16 cache), prompt
//! and teacher-forced generation.

mod common;

use std::sync::Arc;

use common::{nmse, Fixture};
use ggml_core::GgmlType;
use llama::{Context, ContextParams, Model, ModelParams};

#[test]
fn mixed_k_and_v_cache_types_match_the_reference() {
    let fx = Fixture::load("tiny-qwen3moe-f32");
    let model = Arc::new(Model::load(&fx.gguf, ModelParams::default()).expect("model"));
    for flash_attn in [false, true] {
        for (k, v) in [
            (GgmlType::F16, GgmlType::F32),
            (GgmlType::F32, GgmlType::F16),
            (GgmlType::F32, GgmlType::F32),
        ] {
            let params = ContextParams {
                n_ctx: 256,
                n_batch: 256,
                n_ubatch: 256,
                n_threads: 2,
                kv_type: k,
                kv_type_v: Some(v),
                flash_attn,
                ..Default::default()
            };
            let mut ctx = Context::new(Arc::clone(&model), params).expect("context");
            ctx.decode(&fx.tokens, true).expect("prompt");
            let mut ours = Vec::new();
            for i in 0..fx.tokens.len() {
                ours.extend_from_slice(ctx.logits(i).expect("row"));
            }
            let e = nmse(&ours, &fx.logits);
            assert!(
                e <= fx.bound,
                "k {k} v {v} fa {flash_attn}: prompt NMSE {e:e}"
            );
            let mut forced = Vec::new();
            for &t in &fx.gen {
                ctx.decode(&[t], false).expect("decode one");
                forced.extend_from_slice(ctx.logits(0).expect("row"));
            }
            let e = nmse(&forced, &fx.genlogits);
            assert!(
                e <= fx.bound,
                "k {k} v {v} fa {flash_attn}: forced NMSE {e:e}"
            );
        }
    }
    // the cache refuses what it cannot hold
    let params = ContextParams {
        kv_type_v: Some(GgmlType::Q8_0),
        ..Default::default()
    };
    let e = Context::new(Arc::clone(&model), params)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("not supported"), "{e}");
}
