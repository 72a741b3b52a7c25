//! The device cache of host experts on the sim device: the CPU's logits bit
//! for bit on every fixture, policy and size; exact accounting against a
//! reference LRU (bank reads of too-large ubatches included); one ids read
//! per cached layer per ubatch; the banks hold exactly the experts the maps
//! name.

mod common;

use std::sync::Arc;

use common::{or_skip, Fixture, MODELS};
use llama::moe_cache::cache::layout::{bytes_for_all, model_groups};
use llama::moe_cache::{CacheSize, MoeCacheParams, PolicyKind};
use llama::placement::Placement;
use llama::MoeParams;
use llama::{Context, ContextParams, Model, ModelParams};

fn ctx(model: &Arc<Model>, ubatch: usize, cache: MoeCacheParams) -> Context {
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: ubatch,
        n_threads: 2,
        moe: MoeParams {
            cache,
            ..Default::default()
        },
        ..Default::default()
    };
    Context::new(Arc::clone(model), p).expect("context")
}

fn cache(policy: PolicyKind, bytes: u64) -> MoeCacheParams {
    MoeCacheParams {
        size: CacheSize::Bytes(bytes),
        policy,
        max_batch: 32,
    }
}

/// Prompt logits (all rows) then 4 teacher-forced rows.
fn logits(c: &mut Context, fx: &Fixture) -> Vec<f32> {
    let (mut out, forced) = fx.prompt_and_forced(c, 4);
    out.extend(forced);
    // a batch after the cache filled: too large for small caches, which
    // then serve what they hold from the bank
    let more = &fx.gen[4..11];
    c.decode(more, true).expect("batch");
    for i in 0..more.len() {
        out.extend_from_slice(c.logits(i).expect("row"));
    }
    out
}

/// Budgets from the smallest that caches anything (slots = experts used
/// per token) over half the experts to all of them.
fn budgets(model: &Model) -> Vec<u64> {
    let groups = model_groups(model);
    assert_eq!(groups.len(), 1, "one group expected");
    let g = &groups[0];
    let all = g.n_expert * g.layers.len() as u32;
    vec![
        g.bank_bytes(g.n_used),
        g.bank_bytes(all / 2),
        bytes_for_all(&groups),
    ]
}

#[test]
fn cached_experts_give_cpu_logits_bit_for_bit() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let cpu = logits(
            &mut ctx(
                &fx.model_with_host_experts(None),
                512,
                MoeCacheParams::default(),
            ),
            &fx,
        );
        let model = fx.model_with_host_experts(Some("SIM0"));
        for bytes in budgets(&model) {
            for policy in PolicyKind::ALL {
                for ub in [7, 512] {
                    let mut c = ctx(&model, ub, cache(policy, bytes));
                    let got = logits(&mut c, &fx);
                    let same = got
                        .iter()
                        .zip(&cpu)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{name} {policy} {bytes} B ubatch {ub}: logits differ from CPU"
                    );
                    let st = c.moe_cache_stats().expect("a cache");
                    let t = st.total();
                    assert!(t.hits() + t.misses() > 0, "{name}: the cache never ran");
                    c.moe_cache_verify().expect("banks agree with the maps");
                }
            }
        }
    }
}

/// The reference LRU: the order in which the cache documents its accesses
/// (layers ascending, each layer's distinct experts ascending: hits, then
/// misses evicting the least recent key that the layer does not need).
struct RefLru {
    cap: usize,
    order: Vec<(u32, u32)>,
}

impl RefLru {
    /// How many of `ids`' distinct experts of `layer` are resident (no touch).
    fn resident(&self, layer: u32, ids: &[i32]) -> u64 {
        let mut need: Vec<u32> = ids.iter().map(|&e| e as u32).collect();
        need.sort_unstable();
        need.dedup();
        need.iter()
            .filter(|&&e| self.order.contains(&(layer, e)))
            .count() as u64
    }

    /// `(hits, misses, evictions)` of one layer's access.
    fn access(&mut self, layer: u32, ids: &[i32]) -> (u64, u64, u64) {
        let mut need: Vec<u32> = ids.iter().map(|&e| e as u32).collect();
        need.sort_unstable();
        need.dedup();
        let (mut h, mut m, mut ev) = (0, 0, 0);
        let mut missing = Vec::new();
        for &e in &need {
            match self.order.iter().position(|&k| k == (layer, e)) {
                Some(i) => {
                    let k = self.order.remove(i);
                    self.order.push(k);
                    h += 1;
                }
                None => missing.push(e),
            }
        }
        for e in missing {
            if self.order.len() == self.cap {
                let i = self
                    .order
                    .iter()
                    .position(|&(l, x)| !(l == layer && need.contains(&x)))
                    .expect("an unpinned victim");
                self.order.remove(i);
                ev += 1;
            }
            self.order.push((layer, e));
            m += 1;
        }
        (h, m, ev)
    }
}

#[test]
fn accounting_matches_a_reference_lru_from_the_router_ids() {
    for name in [
        "tiny-qwen3moe-f32",
        "tiny-qwen3moe-q4_k",
        "tiny-qwen2moe-f32",
    ] {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = fx.model_with_host_experts(Some("SIM0"));
        let groups = model_groups(&model);
        let g = &groups[0];
        let all = g.n_expert * g.layers.len() as u32;
        for n_slots in [g.n_used, all / 2, all] {
            let bytes = g.bank_bytes(n_slots);
            let p = ContextParams {
                n_ctx: 256,
                n_batch: 256,
                n_ubatch: 7,
                n_threads: 2,
                moe: MoeParams {
                    record_expert_ids: true,
                    cache: cache(PolicyKind::Lru, bytes),
                    ..Default::default()
                },
                ..Default::default()
            };
            let mut c = Context::new(Arc::clone(&model), p).expect("context");
            let max_tokens = 32.min(n_slots / g.n_used) as usize;
            let mut reference = RefLru {
                cap: n_slots as usize,
                order: Vec::new(),
            };
            let mut steps: Vec<Vec<i32>> = fx.tokens.chunks(7).map(|c| c.to_vec()).collect();
            steps.extend(fx.gen[..8].iter().map(|&t| vec![t]));
            // a ubatch too large for small caches after they filled: read
            // from the bank what it holds
            steps.push(fx.gen[8..15].to_vec());
            steps.extend(fx.gen[15..16].iter().map(|&t| vec![t]));
            let mut seen = std::collections::BTreeSet::new();
            let mut zero_steps = 0;
            for (i, step) in steps.iter().enumerate() {
                let before = c.moe_cache_stats().expect("cache").total();
                let tb = c.stats();
                c.decode(step, false).expect("decode");
                let after = c.moe_cache_stats().expect("cache").total();
                let ta = c.stats();
                let d = after.since(&before);
                let (mut h, mut m, mut ev) = (0, 0, 0);
                let mut all_seen = true;
                let (mut n_served, mut n_bypassed) = (0u64, 0u64);
                let (mut bypass_reads, mut bypass_host) = (0u64, 0u64);
                for (il, ids) in c.last_expert_ids().iter().enumerate() {
                    // a layer's tokens: the last layer computes only the output rows
                    if ids.len() / g.n_used as usize > max_tokens {
                        n_bypassed += 1;
                        // read from the bank what it holds, the rest from host
                        let mut need: Vec<i32> = ids.clone();
                        need.sort_unstable();
                        need.dedup();
                        let r = reference.resident(il as u32, ids);
                        bypass_reads += r;
                        bypass_host += need.len() as u64 - r;
                        continue;
                    }
                    n_served += 1;
                    {
                        let r = reference.access(il as u32, ids);
                        h += r.0;
                        m += r.1;
                        ev += r.2;
                        for &e in ids {
                            all_seen &= !seen.insert((il, e));
                        }
                    }
                }
                let what = format!("{name} {n_slots} slots step {i} ({} tokens)", step.len());
                let served = n_bypassed == 0;
                assert_eq!(
                    d.id_reads, n_served,
                    "{what}: one ids read per served layer"
                );
                assert_eq!(d.bypassed, n_bypassed, "{what}: bypassed layers");
                assert_eq!(
                    (d.hits(), d.misses(), d.evictions),
                    (h, m, ev),
                    "{what}: hits, misses, evictions"
                );
                assert_eq!(
                    d.bytes_uploaded,
                    m * g.slot_bytes(),
                    "{what}: bytes uploaded"
                );
                assert_eq!(
                    d.bypass_reads, bypass_reads,
                    "{what}: bank reads of bypassed layers"
                );
                assert_eq!(
                    d.bytes_from_bank,
                    (h + bypass_reads) * g.slot_bytes(),
                    "{what}: bytes from the bank"
                );
                assert_eq!(
                    ta.h2d_bytes_experts - tb.h2d_bytes_experts,
                    d.bytes_uploaded + bypass_host * g.slot_bytes(),
                    "{what}: expert bytes that crossed: uploads, and the bypassed layers' experts not in the bank"
                );
                if n_slots == all && served && all_seen {
                    assert_eq!(
                        d.bytes_uploaded, 0,
                        "{what}: a cache of every expert re-uploads"
                    );
                    zero_steps += 1;
                }
                c.moe_cache_verify().expect("banks agree with the maps");
            }
            let t = c.moe_cache_stats().expect("cache").total();
            assert!(t.hits() + t.misses() > 0, "{name}: the cache never ran");
            if n_slots == all / 2 && max_tokens < 7 {
                assert!(
                    t.bypass_reads > 0,
                    "{name} {n_slots} slots: no bank reads when bypassed"
                );
            }
            if n_slots == all {
                assert!(t.hits_decode > 0, "{name}: a full cache never hit");
                assert!(
                    zero_steps > 0,
                    "{name}: no step after the first pass over its experts"
                );
            }
        }
    }
}

#[test]
fn poisoned_ids_are_an_error_in_the_cache_and_it_recovers() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"));
    let model = fx.model_with_host_experts(Some("SIM0"));
    let n_expert = model.hparams.n_expert as i32;
    let bytes = bytes_for_all(&model_groups(&model));
    let mut c = ctx(&model, 7, cache(PolicyKind::Lrfu, bytes));
    for bad in [n_expert, -1, i32::MIN] {
        c.set_expert_id_filter(Some(Box::new(move |ids: &mut [i32]| ids[0] = bad)));
        let e = c
            .decode(&fx.tokens[..3], false)
            .expect_err("poisoned ids must fail");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("expert id {bad}")) && msg.contains("out of range"),
            "{msg}"
        );
        assert_eq!(c.n_past(), 0);
        c.moe_cache_verify().expect("the cache stays consistent");
    }
    c.set_expert_id_filter(None);
    let got = logits(&mut c, &fx);
    let cpu = logits(
        &mut ctx(
            &fx.model_with_host_experts(None),
            512,
            MoeCacheParams::default(),
        ),
        &fx,
    );
    assert!(
        got.iter()
            .zip(&cpu)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "logits after the poisoned ubatches differ from the CPU's"
    );
}

#[test]
fn a_cache_larger_than_the_sim_memory_is_an_error_naming_the_flag() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"));
    let dev = llama::device::open_device_with_memory("SIM0", 2, 1, Some(16 << 20))
        .expect("SIM0")
        .expect("a device");
    let params = ModelParams {
        device: Some(dev),
        placement: Placement {
            cpu_moe: true,
            ..Default::default()
        },
        progress: None,
        ..Default::default()
    };
    let model = Arc::new(Model::load(&fx.gguf, params).expect("load"));
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 7,
        moe: MoeParams {
            cache: cache(PolicyKind::Lru, 64 << 20),
            ..Default::default()
        },
        ..Default::default()
    };
    let e = Context::new(Arc::clone(&model), p)
        .err()
        .expect("must not fit")
        .to_string();
    assert!(
        e.contains("--moe-cache-mib 64") && e.contains("does not fit") && e.contains("SIM0"),
        "{e}"
    );
    // auto takes what is left, and works
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 7,
        moe: MoeParams {
            cache: MoeCacheParams {
                size: CacheSize::Auto,
                ..MoeCacheParams::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let mut c = Context::new(Arc::clone(&model), p).expect("auto fits");
    c.decode(&fx.tokens, false).expect("decode");
    let st = c.moe_cache_stats().expect("a cache");
    assert!(
        st.budget_bytes > 0 && st.budget_bytes < 16 << 20,
        "{}",
        st.budget_bytes
    );
}

#[test]
fn replaying_the_router_ids_reproduces_the_live_cache_for_every_policy() {
    use llama::moe_cache::cache::replay::{replay, TraceUbatch};
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-q8_0"));
    let model = fx.model_with_host_experts(Some("SIM0"));
    let g = &model_groups(&model)[0];
    let all = g.n_expert * g.layers.len() as u32;
    let n_slots = all / 2;
    let max_tokens = 32.min(n_slots / g.n_used) as usize;
    for policy in PolicyKind::ALL {
        let p = ContextParams {
            n_ctx: 256,
            n_batch: 256,
            n_ubatch: 7,
            n_threads: 2,
            moe: MoeParams {
                record_expert_ids: true,
                cache: cache(policy, g.bank_bytes(n_slots)),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut c = Context::new(Arc::clone(&model), p).expect("context");
        let mut steps: Vec<Vec<i32>> = fx.tokens.chunks(7).map(|c| c.to_vec()).collect();
        steps.extend(fx.gen.iter().map(|&t| vec![t]));
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
        let mut sim = llama::moe_cache::LayerCacheStats::default();
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
            "{policy}: the replay differs from the live cache"
        );
        println!(
            "{policy}: decode hit rate {:.1}% over {} tokens ({} slots of {all})",
            100.0 * live.hit_rate_decode(),
            fx.gen.len(),
            n_slots
        );
    }
}
