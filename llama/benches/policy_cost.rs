//! The expert cache policies' cost against a decode's: per token, the time
//! each policy (driven by the slot bank, as the live cache drives it) takes
//! to serve a decode token's accesses, and the time a CPU decode of a model
//! of the same shape takes per token, measured in the same run.
//!
//! The model is the first argument that is not a flag (or `$POLICY_COST_MODEL`;
//! without either, the `tiny-qwen3moe-q8_0` fixture, whose decode is so
//! small that the ratio says little). The routing is the `topic` synthetic
//! router for the model's shape (`n_moe` layers of `n_expert`, `n_used`
//! used), 2,000 decode tokens, the cache at 1/8, 1/4 and 1/2 of the experts
//! (one group); the decode is 32 tokens after a 16-token prompt on 2
//! threads. Rounds alternate decode and replay three times; the figures are
//! the best round of each (the machine may be loaded by others).
//!
//! `cargo bench -p llama --bench policy_cost -- MODEL.gguf`

use std::sync::Arc;
use std::time::Instant;

use llama::moe_cache::cache::replay::{replay, TraceUbatch};
use llama::moe_cache::trace::synthetic::{generate, SynthKind, SynthParams};
use llama::moe_cache::PolicyKind;
use llama::{Context, ContextParams, Model, ModelParams};

const TOKENS: usize = 2000;
const DECODE: usize = 32;
const ROUNDS: usize = 3;

fn model_path() -> Option<std::path::PathBuf> {
    if let Some(a) = std::env::args().skip(1).find(|a| !a.starts_with('-')) {
        return Some(a.into());
    }
    if let Ok(p) = std::env::var("POLICY_COST_MODEL") {
        return Some(p.into());
    }
    match fixtures::fixture_path("models/tiny-qwen3moe-q8_0.gguf") {
        Ok(p) => Some(p),
        Err(why) => {
            println!("skipped: {why}");
            None
        }
    }
}

/// Seconds per decoded token (after the prompt).
fn decode_secs_per_token(model: &Arc<Model>) -> f64 {
    let params = ContextParams {
        n_ctx: 128,
        n_threads: 2,
        ..Default::default()
    };
    let mut ctx = Context::new(Arc::clone(model), params).expect("context");
    let n_vocab = model.hparams.n_vocab as i32;
    let prompt: Vec<i32> = (0..16).map(|i| (i * 7 + 1) % n_vocab).collect();
    ctx.decode(&prompt, false).expect("prompt");
    let t = Instant::now();
    for i in 0..DECODE as i32 {
        ctx.decode(&[(i * 13 + 5) % n_vocab], false)
            .expect("one token");
    }
    t.elapsed().as_secs_f64() / DECODE as f64
}

/// Seconds per token of replaying `trace` through `kind` at `n_slots`.
fn policy_secs_per_token(
    kind: PolicyKind,
    layers: &[u32],
    n_expert: u32,
    n_slots: u32,
    trace: &[TraceUbatch],
) -> f64 {
    let t = Instant::now();
    let st = replay(
        layers,
        n_expert,
        n_slots,
        kind.build(n_slots as usize),
        trace,
    )
    .expect("replay");
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(st);
    secs / trace.len() as f64
}

fn main() {
    let Some(path) = model_path() else { return };
    let model = Arc::new(Model::load(&path, ModelParams::default()).expect("model"));
    let hp = &model.hparams;
    let (n_layer, n_expert, n_used) = (hp.n_layer, hp.n_expert as u32, hp.n_expert_used as u32);
    assert!(n_expert > 0, "{} is not a MoE model", path.display());
    let n_moe = n_layer - hp.n_layer_dense_lead;
    let layers: Vec<u32> = (hp.n_layer_dense_lead as u32..n_layer as u32).collect();
    let tokens = generate(
        &SynthParams::new(SynthKind::Topic),
        n_moe,
        n_expert,
        n_used,
        TOKENS,
    );
    let trace: Vec<TraceUbatch> = tokens
        .iter()
        .map(|t| TraceUbatch {
            n_tokens: 1,
            layers: layers.iter().copied().zip(t.iter().cloned()).collect(),
        })
        .collect();
    let keys = n_moe as u32 * n_expert;
    let sizes = [keys / 8, keys / 4, keys / 2];
    println!(
        "model {} ({n_moe} MoE layers of {n_expert} experts, {n_used} used); \
         topic routing, {TOKENS} decode tokens; sizes {sizes:?} slots; load {}",
        path.display(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let mut decode = f64::INFINITY;
    let mut best = vec![[f64::INFINITY; 3]; PolicyKind::ALL.len()];
    for _ in 0..ROUNDS {
        decode = decode.min(decode_secs_per_token(&model));
        for (k, row) in PolicyKind::ALL.iter().zip(&mut best) {
            for (s, b) in sizes.iter().zip(row.iter_mut()) {
                *b = b.min(policy_secs_per_token(*k, &layers, n_expert, *s, &trace));
            }
        }
    }
    println!(
        "CPU decode: {:.3} ms per token (best of {ROUNDS} rounds of {DECODE})",
        decode * 1e3
    );
    println!(
        "{:>18} {:>24} {:>24} {:>24}",
        "policy", "1/8: us/token (share)", "1/4: us/token (share)", "1/2: us/token (share)"
    );
    for (k, row) in PolicyKind::ALL.iter().zip(&best) {
        let cells: Vec<String> = row
            .iter()
            .map(|s| format!("{:.1} ({:.3}%)", s * 1e6, 100.0 * s / decode))
            .collect();
        println!(
            "{:>18} {:>24} {:>24} {:>24}",
            k.name(),
            cells[0],
            cells[1],
            cells[2]
        );
    }
}
