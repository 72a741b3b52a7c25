//! Replay equals live for every policy over 20 seeds of each synthetic
//! router: the live cache (host experts on the sim device, routing forced
//! from `--synth-trace random|zipf|topic` traces) and a replay of the ids it
//! recorded through the same bank and policy count the same hits, misses
//! and evictions, prompt and decode apart. Sizes alternate between a
//! quarter and a half of the experts by seed.

mod common;

use std::sync::Arc;

use common::{or_skip, Fixture};
use llama::moe_cache::cache::layout::model_groups;
use llama::moe_cache::cache::replay::{replay, TraceUbatch};
use llama::moe_cache::trace::forced::ForcedRouting;
use llama::moe_cache::trace::synthetic::{generate, SynthKind, SynthParams};
use llama::moe_cache::{
    CacheSize, LayerCacheStats, MoeCacheParams, PolicyKind, Trace, TraceHeader,
};
use llama::{Context, ContextParams, MoeParams};

const SEEDS: u64 = 20;

#[test]
fn replay_equals_live_for_every_policy_over_20_seeds_of_each_synthetic_router() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-q8_0"));
    let model = fx.model_with_host_experts(Some("SIM0"));
    let g = &model_groups(&model)[0];
    let all = g.n_expert * g.layers.len() as u32;
    let header = TraceHeader::from_model(&model);
    let (n_moe, ne, nu) = (header.layers.len(), header.n_expert, header.n_expert_used);
    // one prompt ubatch of 7 tokens, then 16 decoded tokens
    let mut steps: Vec<Vec<i32>> = vec![fx.tokens[..7].to_vec()];
    steps.extend(fx.gen[..16].iter().map(|&t| vec![t]));
    let n_tokens = steps.iter().map(|s| s.len()).sum::<usize>();
    let mut runs = 0;
    for kind in SynthKind::ALL {
        for seed in 0..SEEDS {
            let p = SynthParams {
                seed,
                ..SynthParams::new(kind)
            };
            let tokens = generate(&p, n_moe, ne, nu, n_tokens);
            let forced = Arc::new(
                ForcedRouting::new(&Trace::from_tokens(header.clone(), &tokens), &model)
                    .expect("forced"),
            );
            let n_slots = if seed % 2 == 0 { all / 4 } else { all / 2 }.max(nu);
            let max_tokens = 32.min(n_slots / g.n_used) as usize;
            for policy in PolicyKind::ALL {
                let params = ContextParams {
                    n_ctx: 256,
                    n_batch: 256,
                    n_ubatch: 7,
                    n_threads: 2,
                    moe: MoeParams {
                        record_expert_ids: true,
                        forced_routing: Some(Arc::clone(&forced)),
                        cache: MoeCacheParams {
                            size: CacheSize::Bytes(g.bank_bytes(n_slots)),
                            policy,
                            max_batch: 32,
                        },
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let mut c = Context::new(Arc::clone(&model), params).expect("context");
                let mut trace = Vec::new();
                for step in &steps {
                    c.decode(step, false).expect("decode");
                    let layers = c
                        .last_expert_ids()
                        .iter()
                        .enumerate()
                        .filter(|(_, ids)| ids.len() / g.n_used as usize <= max_tokens)
                        .map(|(il, ids)| (il as u32, ids.iter().map(|&e| e as u32).collect()))
                        .collect();
                    trace.push(TraceUbatch {
                        n_tokens: step.len() as u32,
                        layers,
                    });
                }
                let live = c.moe_cache_stats().expect("cache").total();
                let mut sim = LayerCacheStats::default();
                for s in replay(
                    &g.layers,
                    g.n_expert,
                    n_slots,
                    policy.build(n_slots as usize),
                    &trace,
                )
                .expect("replay")
                .values()
                {
                    sim.add(s);
                }
                let at = format!("{policy}, {kind} seed {seed}, {n_slots} slots of {all}");
                assert!(live.hits() + live.misses() > 0, "{at}: the cache never ran");
                assert!(live.evictions > 0, "{at}: nothing was evicted");
                assert_eq!(
                    (
                        sim.hits_decode,
                        sim.misses_decode,
                        sim.hits_prompt,
                        sim.misses_prompt,
                        sim.evictions
                    ),
                    (
                        live.hits_decode,
                        live.misses_decode,
                        live.hits_prompt,
                        live.misses_prompt,
                        live.evictions
                    ),
                    "{at}: the replay differs from the live cache"
                );
                runs += 1;
            }
        }
    }
    assert_eq!(runs, 3 * SEEDS as usize * PolicyKind::ALL.len());
}
