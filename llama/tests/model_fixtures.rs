//! Every model fixture against llama.cpp's logits: prompt tokens, prompt
//! logits (one batch, ubatches of 7, flash attention), teacher-forced decoding of the
//! reference generation, and greedy generation up to the first low-margin
//! row (see tests/data/README.md for the bounds).

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, Fixture, MODELS};
use llama::{Context, ContextParams, Model, ModelParams};

struct Run {
    prompt_nmse: f64,
    forced_nmse: f64,
    greedy: Vec<i32>,
}

fn run(model: &Arc<Model>, fx: &Fixture, n_ubatch: usize, flash_attn: bool) -> Run {
    let params = ContextParams {
        n_ctx: 512,
        n_batch: 512,
        n_ubatch,
        n_threads: 2,
        flash_attn,
        ..Default::default()
    };
    let n = fx.n_vocab();
    // prompt in one decode, logits of every row
    let mut ctx = Context::new(Arc::clone(model), params.clone()).expect("context");
    ctx.decode(&fx.tokens, true).expect("prompt decode");
    let mut ours = Vec::with_capacity(fx.logits.len());
    for i in 0..fx.tokens.len() {
        ours.extend_from_slice(ctx.logits(i).expect("row"));
    }
    let prompt_nmse = nmse(&ours, &fx.logits);
    // teacher forcing: feed the reference's tokens one at a time
    let mut forced = Vec::with_capacity(fx.genlogits.len());
    for &t in &fx.gen {
        ctx.decode(&[t], false).expect("decode one");
        forced.extend_from_slice(ctx.logits(0).expect("row"));
    }
    let forced_nmse = nmse(&forced, &fx.genlogits);
    // greedy on a fresh context
    let mut ctx = Context::new(Arc::clone(model), params).expect("context");
    ctx.decode(&fx.tokens, false).expect("prompt decode");
    let mut greedy = Vec::new();
    for _ in 0..fx.gen.len() {
        let t = llama::sampling::argmax(ctx.logits(0).expect("row"));
        greedy.push(t);
        ctx.decode(&[t], false).expect("decode one");
    }
    assert_eq!(ours.len(), fx.tokens.len() * n);
    Run {
        prompt_nmse,
        forced_nmse,
        greedy,
    }
}

/// Every configuration: the plain attention path in one batch and in
/// ubatches of 7, then flash attention (llama.cpp with -fa passes these
/// files by the same rules) in both.
const ALL: [(usize, bool); 4] = [(512, false), (7, false), (512, true), (7, true)];

fn check(name: &str) {
    check_configs(name, &ALL);
}

fn check_configs(name: &str, configs: &[(usize, bool)]) {
    check_fixture(&or_skip!(Fixture::load(name)), configs);
}

fn check_fixture(fx: &Fixture, configs: &[(usize, bool)]) {
    let name = fx.name.as_str();
    let model = Arc::new(Model::load(&fx.gguf, ModelParams::default()).expect("load"));
    let toks = model
        .tokenizer
        .tokenize(&fx.prompt, true, false)
        .expect("tokenize");
    assert_eq!(toks, fx.tokens, "{name}: prompt tokens");
    let reliable = fx.reliable_greedy_len();
    for &(ub, fa) in configs {
        let r = run(&model, fx, ub, fa);
        let tag = format!("ubatch {ub}{}", if fa { " -fa" } else { "" });
        println!(
            "{name} {tag}: prompt NMSE {:.2e}, teacher-forced NMSE {:.2e}, greedy checked for {reliable} tokens",
            r.prompt_nmse, r.forced_nmse
        );
        assert!(
            r.prompt_nmse <= fx.bound,
            "{name} {tag}: prompt NMSE {:.3e} > {:.0e}",
            r.prompt_nmse,
            fx.bound
        );
        assert!(
            r.forced_nmse <= fx.bound,
            "{name} {tag}: forced NMSE {:.3e} > {:.0e}",
            r.forced_nmse,
            fx.bound
        );
        assert_eq!(
            &r.greedy[..reliable],
            &fx.gen[..reliable],
            "{name} {tag}: greedy tokens"
        );
    }
}

#[test]
fn tiny_qwen3moe_f32() {
    check(MODELS[0]);
}
#[test]
fn tiny_qwen2moe_f32() {
    check(MODELS[1]);
}
#[test]
fn tiny_mixtral_f16() {
    check(MODELS[2]);
}
#[test]
fn tiny_olmoe_f32() {
    check(MODELS[3]);
}
#[test]
fn tiny_qwen3moe_q8_0() {
    check(MODELS[4]);
}
#[test]
fn tiny_qwen3moe_q4_0() {
    check(MODELS[5]);
}
#[test]
fn tiny_qwen3moe_q4_k() {
    check(MODELS[6]);
}
#[test]
fn tiny_qwen3moe_q6_k() {
    check(MODELS[7]);
}
#[test]
fn small_qwen3moe_spm_f16() {
    check(MODELS[8]);
}
#[test]
fn tiny_deepseek2_f32() {
    check(MODELS[9]);
}
#[test]
fn tiny_deepseek2_q4_k() {
    check_configs(MODELS[10], &ALL[..2]);
}
/// With flash attention this file is compared with llama.cpp's own
/// flash-attention run (`Fixture::load_flash_attn`), not with the default
/// reference (flash attention off): it is the most sensitive file here, and
/// llama.cpp 0.5.0-dev itself lands at teacher-forced NMSE 1.4e-2 against
/// its flash-attention-off logits (prompt 1.0e-3), routing flips on 4 of
/// the 16 rows, so no engine that computes as llama.cpp does can meet 5e-3
/// against those. The bound stays 5e-3.
#[test]
fn tiny_deepseek2_q4_k_flash_attn() {
    check_fixture(&or_skip!(Fixture::load_flash_attn(MODELS[10])), &ALL[2..]);
}
#[test]
fn tiny_gptoss_mxfp4() {
    check(MODELS[11]);
}
