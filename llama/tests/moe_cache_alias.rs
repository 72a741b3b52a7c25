//! The compute alias (`--moe-cache-alias`): on every fixture, on a 64 MiB
//! SIM0 with every expert in host memory and the cache `auto`, prompt
//! ubatches larger than the cache's insert limit compute in the cache's
//! banks; the logits are the CPU's bit for bit with the alias on and off,
//! and the device's measured peak never passes its size. A ubatch whose
//! graph does not fit in what the cache lends shrinks (down to 512), and
//! the alias drops out when not even that fits.

mod common;

use std::sync::Arc;

use common::{or_skip, same_bits, Fixture, MODELS};
use ggml_core::sim::SimMemory;
use ggml_core::{Backend, SimBackend};
use llama::moe_cache::{CacheSize, MoeCacheParams};
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams, MoeParams};

const MIB: usize = 1 << 20;
/// Insert limit: the prompt ubatches bypass the cache, decodes use it.
const MAX_BATCH: usize = 1;
/// Prompt ubatch: its graph fits in the banks of every fixture (small-qwen3moe-spm-f16 has 0.4 MiB of experts and a 32000-token vocabulary).
const UB: usize = 2;

/// The fixture's model on a SIM0 of `mem` bytes, every expert in host
/// memory (`--cpu-moe`), and the device's memory account.
fn sim_model(fx: &Fixture, mem: usize) -> (Arc<Model>, Arc<SimMemory>) {
    let sim = SimBackend::new(0, 2)
        .with_memory_capacity(mem)
        .with_offload_min_batch(1);
    let account = Arc::clone(sim.memory_account());
    let params = ModelParams {
        device: Some(Arc::new(sim) as Arc<dyn Backend>),
        placement: Placement {
            cpu_moe: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let model = Model::load(&fx.gguf, params).expect("load");
    (Arc::new(model), account)
}

fn ctx(model: &Arc<Model>, n_ctx: usize, ubatch: usize, alias: bool, size: CacheSize) -> Context {
    let p = ContextParams {
        n_ctx,
        n_batch: n_ctx,
        n_ubatch: ubatch,
        n_threads: 2,
        moe: MoeParams {
            cache: MoeCacheParams {
                size,
                max_batch: MAX_BATCH,
                ..Default::default()
            },
            cache_alias: alias,
            ..Default::default()
        },
        ..Default::default()
    };
    Context::new(Arc::clone(model), p).expect("context")
}

/// Prompt logits (all rows), 4 teacher-forced rows, then a second batch of
/// 7 tokens (a prompt ubatch again: the banks are lent once more after
/// the decodes filled them).
fn logits(c: &mut Context, fx: &Fixture) -> Vec<f32> {
    let (mut out, forced) = fx.prompt_and_forced(c, 4);
    out.extend(forced);
    let more = &fx.gen[4..11];
    c.decode(more, true).expect("batch");
    for i in 0..more.len() {
        out.extend_from_slice(c.logits(i).expect("row"));
    }
    for &t in &fx.gen[11..13] {
        c.decode(&[t], false).expect("decode");
        out.extend_from_slice(c.logits(0).expect("row"));
    }
    out
}

#[test]
fn alias_on_and_off_give_cpu_logits_bit_for_bit_within_the_device() {
    let mem = 64 * MIB;
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let cpu_model = fx.model_with_host_experts(None);
        let cpu = logits(&mut ctx(&cpu_model, 128, UB, false, CacheSize::Off), &fx);
        for alias in [true, false] {
            let (model, account) = sim_model(&fx, mem);
            let mut c = ctx(&model, 128, UB, alias, CacheSize::Auto);
            let report = c
                .moe()
                .alias()
                .cloned()
                .expect("a cache: an alias decision");
            assert_eq!(report.on, alias, "{name}: {report:?}");
            assert_eq!(report.ubatch, UB, "{name}: {report:?}");
            let got = logits(&mut c, &fx);
            assert!(
                same_bits(&got, &cpu),
                "{name} alias {alias}: logits differ from the CPU's"
            );
            let st = c.moe_cache_stats().expect("a cache");
            assert!(
                st.total().hits() + st.total().misses() > 0,
                "{name}: cache never ran"
            );
            assert!(st.ubatches_over_max_batch >= 2, "{name}: {st:?}");
            c.moe_cache_verify().expect("banks agree with the maps");
            match c.moe().alias_counters() {
                Some(k) => {
                    assert!(alias, "{name}: counters without the alias");
                    // the prompt and the 7-token batch borrowed the banks
                    assert!(k.loans >= 2, "{name}: {k:?}");
                    assert!(k.max_lent_bytes > 0, "{name}: {k:?}");
                    assert!(k.refused > 0, "{name}: decodes use the cache: {k:?}");
                }
                None => assert!(!alias, "{name}: the alias lends nothing"),
            }
            assert!(
                account.peak() <= mem,
                "{name} alias {alias}: peak {} B > the device's {mem} B",
                account.peak()
            );
        }
    }
}

#[test]
fn the_alias_gives_the_cache_the_compute_reserve() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"), return);
    let mem = 64 * MIB;
    let mut budget = Vec::new();
    for alias in [true, false] {
        let (model, _) = sim_model(&fx, mem);
        let c = ctx(&model, 128, UB, alias, CacheSize::Auto);
        let st = c.moe_cache_stats().expect("a cache");
        budget.push(st.budget_bytes);
        // the scheduler's own device memory: the cached ubatches' graphs
        // only with the alias
        let own: usize = c
            .compute_buffer_sizes()
            .iter()
            .filter(|(n, _)| n == "SIM0")
            .map(|(_, b)| *b)
            .sum();
        let a = c.moe().alias().cloned().expect("decision");
        if alias {
            assert!(own < a.graph_bytes as usize, "{own} vs {a:?}");
        }
    }
    assert!(
        budget[0] > budget[1],
        "alias on {} B, off {} B",
        budget[0],
        budget[1]
    );
}

/// A cache too small to lend even a 512-token graph: the alias drops out,
/// the compute memory is reserved apart as without it, and the results
/// stay the CPU's. (The ubatch's shrinking is tested on a synthetic model
/// whose experts outweigh a 512-token graph: tests/tests/moe_cache_alias_shrink.rs.)
#[test]
fn the_alias_drops_out_when_not_even_a_512_token_graph_fits() {
    let fx = or_skip!(Fixture::load("small-qwen3moe-spm-f16"), return);
    let mem = 512 * MIB;
    let (model, account) = sim_model(&fx, mem);
    let mut c = ctx(&model, 1024, 1024, true, CacheSize::Auto);
    let a = c.moe().alias().cloned().expect("decision");
    assert!(!a.on, "{a:?}");
    assert_eq!(a.ubatch, 1024, "{a:?}");
    assert!(
        a.reason.contains("512 tokens") && a.reason.contains("reserved apart"),
        "{a:?}"
    );
    assert!(a.graph_bytes > a.lendable_bytes, "{a:?}");
    assert!(c.moe().alias_counters().is_none());
    assert!(a.line().starts_with("compute alias: off"), "{}", a.line());
    let cpu_model = fx.model_with_host_experts(None);
    let cpu = logits(&mut ctx(&cpu_model, 1024, 1024, false, CacheSize::Off), &fx);
    assert!(
        same_bits(&logits(&mut c, &fx), &cpu),
        "logits differ from the CPU's"
    );
    assert!(account.peak() <= mem, "peak {} B", account.peak());
}
