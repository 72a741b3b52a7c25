//! llama.cpp's `-tb` (`n_threads_batch`): a prompt ubatch runs on
//! `n_threads_batch` CPU threads, a one-token ubatch on `n_threads`, on one
//! worker pool sized for the larger; the logits stay llama.cpp's.

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, Fixture};
use llama::{Context, ContextParams, Model, ModelParams};

#[test]
fn prompt_batches_use_n_threads_batch_and_tokens_n_threads() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"));
    let model = Arc::new(Model::load(&fx.gguf, ModelParams::default()).expect("model"));
    let params = ContextParams {
        n_ctx: 256,
        n_threads: 1,
        n_threads_batch: Some(3),
        ..Default::default()
    };
    let mut ctx = Context::new(Arc::clone(&model), params).expect("context");
    assert_eq!(ctx.cpu_backend().max_threads(), 3);
    let runs0 = ctx.cpu_backend().pool_stats().runs;
    ctx.decode(&fx.tokens, true).expect("prompt");
    assert_eq!(
        ctx.cpu_backend().n_threads(),
        3,
        "the prompt ran on -tb threads"
    );
    let runs1 = ctx.cpu_backend().pool_stats().runs;
    assert!(runs1 > runs0, "the prompt used the workers");
    let mut ours = Vec::new();
    for i in 0..fx.tokens.len() {
        ours.extend_from_slice(ctx.logits(i).expect("row"));
    }
    let e = nmse(&ours, &fx.logits);
    assert!(e <= fx.bound, "prompt NMSE {e:e}");
    let mut forced = Vec::new();
    for &t in &fx.gen {
        ctx.decode(&[t], false).expect("one token");
        assert_eq!(
            ctx.cpu_backend().n_threads(),
            1,
            "a token runs on -t threads"
        );
        forced.extend_from_slice(ctx.logits(0).expect("row"));
    }
    // one thread runs every op inline: the workers took no job
    assert_eq!(ctx.cpu_backend().pool_stats().runs, runs1);
    let e = nmse(&forced, &fx.genlogits);
    assert!(e <= fx.bound, "forced NMSE {e:e}");

    // without -tb, batches run on -t threads
    let params = ContextParams {
        n_ctx: 256,
        n_threads: 2,
        ..Default::default()
    };
    let mut ctx = Context::new(model, params).expect("context");
    ctx.decode(&fx.tokens, false).expect("prompt");
    assert_eq!(
        (
            ctx.cpu_backend().n_threads(),
            ctx.cpu_backend().max_threads()
        ),
        (2, 2)
    );
}
