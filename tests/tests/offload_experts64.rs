//! On a model with 64 experts and 2 used per token, with the experts in
//! host memory and every batch offloaded to the sim device, the expert copy
//! policy moves at least 8x fewer bytes per decoded token than full copies
//! (ideally 32x: 2 of 64 experts per layer and tensor).

use std::sync::Arc;

use ggml_core::GgmlType;
use llama::device::open_device;
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};
use synth::{synthesize, SynthParams};

#[test]
fn selective_copy_is_at_least_8x_below_full_copy_per_token() {
    let p = SynthParams {
        n_layer: 2,
        n_expert: 64,
        n_expert_used: 2,
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
    let dev = open_device("SIM0", 2, 1).expect("SIM0");
    let params = ModelParams {
        device: dev,
        placement: Placement {
            cpu_moe: true,
            ..Default::default()
        },
        progress: None,
        ..Default::default()
    };
    let model = Arc::new(Model::from_gguf(file, params).expect("load"));
    let cp = ContextParams {
        n_ctx: 128,
        n_batch: 128,
        n_ubatch: 128,
        n_threads: 2,
        ..Default::default()
    };
    let mut ctx = Context::new(Arc::clone(&model), cp).expect("context");
    let prompt = ctx
        .tokenize("Once upon a time", true, false)
        .expect("tokenize");
    ctx.decode(&prompt, false).expect("prompt");
    let mut tok = llama::sampling::argmax(ctx.logits(0).expect("row"));
    let n_tokens = 6;
    ctx.reset_stats();
    for _ in 0..n_tokens {
        ctx.decode(&[tok], false).expect("decode");
        tok = llama::sampling::argmax(ctx.logits(0).expect("row"));
    }
    let st = ctx.stats();
    let per_token = st.h2d_bytes_experts as f64 / n_tokens as f64;
    let full_per_token = st.h2d_bytes_full_copy as f64 / n_tokens as f64;
    let ratio = full_per_token / per_token;
    println!(
        "64 experts, 2 used: {per_token:.0} B/token copied vs {full_per_token:.0} B/token full copy ({ratio:.1}x); experts {} of {}",
        st.experts_copied, st.experts_full_copy
    );
    assert!(st.h2d_bytes_experts > 0, "the policy must have run");
    assert!(ratio >= 8.0, "only {ratio:.1}x below full copies");
    // one token selects 2 experts per layer: 3 tensors x 2 layers x 2 experts
    assert_eq!(st.experts_copied, (n_tokens * 3 * 2 * 2) as u64);
}
