//! The host expert cache (CPU only, experts read from the model file):
//! logits bit for bit the same as without it on every fixture, every
//! policy, cache sizes from one layer's top-k to every expert, decode and
//! prompt ubatches; the counters add up; a cache too small for one layer's
//! top-k is a clear error.

mod common;

use std::sync::Arc;

use common::{or_skip, Fixture, MODELS};
use llama::moe_cache::cache::layout::{bytes_for_all, model_groups};
use llama::moe_cache::host::HostCacheParams;
use llama::moe_cache::{CacheSize, PolicyKind};
use llama::MoeParams;
use llama::{Context, ContextParams, Model};

fn ctx(model: &Arc<Model>, ubatch: usize, host: HostCacheParams) -> llama::Result<Context> {
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: ubatch,
        n_threads: 2,
        moe: MoeParams {
            host_cache: host,
            ..Default::default()
        },
        ..Default::default()
    };
    Context::new(Arc::clone(model), p)
}

/// Prompt logits (all rows), 4 teacher-forced rows, then a 7-token batch.
fn logits(c: &mut Context, fx: &Fixture) -> Vec<f32> {
    let (mut out, forced) = fx.prompt_and_forced(c, 4);
    out.extend(forced);
    let more = &fx.gen[4..11];
    c.decode(more, true).expect("batch");
    for i in 0..more.len() {
        out.extend_from_slice(c.logits(i).expect("row"));
    }
    out
}

/// One layer's top-k, half the experts, every expert.
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

fn host(policy: PolicyKind, bytes: u64) -> HostCacheParams {
    HostCacheParams {
        size: CacheSize::Bytes(bytes),
        policy,
    }
}

#[test]
fn host_cache_gives_the_same_logits_bit_for_bit() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = fx.model_with_host_experts(None);
        let want = logits(
            &mut ctx(&model, 512, HostCacheParams::default()).expect("context"),
            &fx,
        );
        for (bi, bytes) in budgets(&model).into_iter().enumerate() {
            // every policy at the smallest size; the default one elsewhere
            let policies: Vec<PolicyKind> = if bi == 0 {
                PolicyKind::ALL.to_vec()
            } else {
                vec![PolicyKind::default()]
            };
            for policy in policies {
                for ub in [7, 512] {
                    let mut c = ctx(&model, ub, host(policy, bytes)).expect("context");
                    let got = logits(&mut c, &fx);
                    assert!(
                        common::same_bits(&got, &want),
                        "{name} {policy} {bytes} B ubatch {ub}: logits differ without the host cache"
                    );
                    let st = c.host_cache_stats().expect("a host cache");
                    let t = st.cache.total();
                    assert!(
                        t.hits() + t.misses() > 0,
                        "{name}: the host cache never ran"
                    );
                    assert!(st.disk.reads > 0 && st.disk.bytes >= t.bytes_uploaded);
                    assert!(t.bytes_uploaded == t.misses() * st.cache.groups[0].slot_bytes);
                    c.verify_host_cache().expect("maps agree with the slots");
                }
            }
        }
    }
}

#[test]
fn a_host_cache_smaller_than_one_layers_top_k_is_refused() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"), return);
    let model = fx.model_with_host_experts(None);
    let g = &model_groups(&model)[0];
    let e = match ctx(
        &model,
        8,
        host(PolicyKind::default(), g.bank_bytes(g.n_used) - 1),
    ) {
        Ok(_) => panic!("a cache too small was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("fewer than the") && e.contains("one layer's top-k needs at least"),
        "{e}"
    );
}
