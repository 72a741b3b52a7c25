//! The compute alias end to end on synthetic models: a `--fit` plan made
//! with the alias, applied and run on a sim device of that size, keeps the
//! measured peak within the device and gives the CPU's tokens; a ubatch
//! whose worst-case graph does not fit in what the cache lends halves
//! (down to 512) at run time, and the results stay the CPU's.

use std::sync::Arc;

use ggml_core::gguf::GgufFile;
use ggml_core::{Backend, GgmlType, SimBackend};
use llama::fit::{plan, FitDevice, FitModel, FitParams};
use llama::moe_cache::{CacheSize, MoeCacheParams};
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams, MoeParams};
use synth::{synthesize, SynthParams};

const MIB: u64 = 1 << 20;

fn synth_file(n_layer: usize, n_expert: usize, n_embd: usize, n_ff_exp: usize) -> Vec<u8> {
    let p = SynthParams {
        n_layer,
        n_expert,
        n_expert_used: 4,
        n_embd,
        n_ff_exp,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 32,
        n_vocab: Some(1024),
        n_merges: 32,
        ty: GgmlType::Q8_0,
        seed: 11,
        ..SynthParams::default_model()
    };
    synthesize(&p, &mut |_| {})
        .expect("synthesize")
        .to_bytes()
        .expect("bytes")
}

/// The model on a SIM0 of `mem` bytes with every expert in host memory
/// (on the CPU alone when `mem` is `None`), and the device's memory
/// account.
fn load(bytes: &[u8], mem: Option<u64>) -> (Arc<Model>, Option<Arc<ggml_core::sim::SimMemory>>) {
    let file = GgufFile::from_bytes(bytes.to_vec()).expect("parse");
    let (devices, account) = match mem {
        Some(m) => {
            let sim = SimBackend::new(0, 2).with_memory_capacity(m as usize);
            let a = Arc::clone(sim.memory_account());
            (vec![Arc::new(sim) as Arc<dyn Backend>], Some(a))
        }
        None => (Vec::new(), None),
    };
    let placement = Placement {
        cpu_moe: mem.is_some(),
        ..Placement::default()
    };
    let model = Model::from_gguf(
        file,
        ModelParams {
            devices,
            placement,
            ..Default::default()
        },
    )
    .expect("load");
    (Arc::new(model), account)
}

fn ctx(model: &Arc<Model>, n_ctx: usize, n_ubatch: usize, cache: CacheSize) -> Context {
    Context::new(
        Arc::clone(model),
        ContextParams {
            n_ctx,
            n_batch: n_ctx,
            n_ubatch,
            n_threads: 2,
            moe: MoeParams {
                cache: MoeCacheParams {
                    size: cache,
                    ..MoeCacheParams::default()
                },
                cache_alias: true,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .expect("context")
}

/// Greedy tokens after a prompt of `n_prompt` tokens.
fn greedy(c: &mut Context, n_prompt: usize, n_gen: usize) -> Vec<i32> {
    let text = "Once upon a time there was a cache that lent its memory. ".repeat(n_prompt / 8 + 4);
    let mut prompt = c.tokenize(&text, true, false).expect("tokenize");
    assert!(prompt.len() >= n_prompt, "{} tokens", prompt.len());
    prompt.truncate(n_prompt);
    c.decode(&prompt, false).expect("prompt");
    let mut out = Vec::new();
    let mut tok = llama::sampling::argmax(c.logits(0).expect("logits"));
    for _ in 0..n_gen {
        out.push(tok);
        c.decode(&[tok], false).expect("decode");
        tok = llama::sampling::argmax(c.logits(0).expect("logits"));
    }
    out
}

fn sim0(free: u64) -> FitDevice {
    FitDevice {
        name: "SIM0".into(),
        free,
    }
}

#[test]
fn a_fit_plan_with_the_alias_runs_within_the_device() {
    let bytes = synth_file(4, 32, 256, 256);
    let file = GgufFile::from_bytes(bytes.clone()).expect("parse");
    let fm = FitModel::from_gguf(&file, GgmlType::F16, GgmlType::F16).expect("fit model");
    let (n_ctx, ub) = (256, 128);
    let p = FitParams {
        n_ctx,
        n_ubatch: ub,
        cpu_moe: true,
        cache_alias: true,
        ..FitParams::default()
    };
    let huge = plan(&fm, &[sim0(1 << 40)], &p).expect("plan");
    let d = &huge.devices[0];
    // room for the dense part, the graphs and a few MiB of experts
    let mem = d.dense + d.kv + d.compute + d.alias.map_or(0, |a| a.1) + 8 * MIB;
    let pl = plan(&fm, &[sim0(mem)], &p).expect("plan");
    let dp = &pl.devices[0];
    let (u, g) = dp
        .alias
        .unwrap_or_else(|| panic!("no alias planned:\n{}", pl.table()));
    assert_eq!(u, ub, "{}", pl.table());
    assert!(g <= dp.cache);
    let (cpu_model, _) = load(&bytes, None);
    let want = greedy(&mut ctx(&cpu_model, n_ctx, ub, CacheSize::Off), 200, 6);
    let (model, account) = load(&bytes, Some(mem));
    let mut c = ctx(&model, n_ctx, ub, CacheSize::Bytes(dp.cache));
    let a = c.moe().alias().cloned().expect("decision");
    assert!(a.on && a.ubatch == ub, "{a:?}\n{}", pl.table());
    let got = greedy(&mut c, 200, 6);
    assert_eq!(got, want, "tokens differ from the CPU's");
    let k = c.moe().alias_counters().expect("lender");
    assert!(k.loans > 0, "{k:?}");
    let peak = account.expect("sim").peak() as u64;
    assert!(peak <= mem, "peak {peak} > {mem}\n{}", pl.table());
}

#[test]
fn a_ubatch_whose_graph_does_not_fit_in_the_cache_halves() {
    let bytes = synth_file(4, 64, 256, 512);
    let (n_ctx, ub) = (2048, 2048);
    let (model, _) = load(&bytes, Some(4096 * MIB));
    // the graphs' needs, from contexts whose caches hold every expert
    let need = |u: usize| {
        let c = ctx(&model, n_ctx, u, CacheSize::Auto);
        let a = c.moe().alias().cloned().expect("decision");
        assert!(a.on && a.ubatch == u, "{a:?}");
        a.graph_bytes
    };
    let (g1024, g512) = (need(1024), need(512));
    assert!(g512 < g1024, "{g512} {g1024}");
    // a cache between the two: -ub 2048 halves twice, to 512
    let budget = (g512 + g1024) / 2;
    let (cpu_model, _) = load(&bytes, None);
    let want = greedy(&mut ctx(&cpu_model, n_ctx, 512, CacheSize::Off), 1050, 4);
    let mut c = ctx(&model, n_ctx, ub, CacheSize::Bytes(budget));
    let a = c.moe().alias().cloned().expect("decision");
    assert!(a.on && a.ubatch == 512, "{a:?}");
    assert!(a.reason.contains("1024 tokens"), "{a:?}");
    assert!(a.line().contains("ubatch 512 (-ub 2048)"), "{}", a.line());
    assert_eq!(c.params().n_ubatch, 512);
    assert_eq!(
        greedy(&mut c, 1050, 4),
        want,
        "shrunk ubatch: tokens differ"
    );
}
