//! Building a context's MoE states from its [`MoeParams`] and its devices'
//! memory: the prefill prefetch's staging slots, then the expert cache
//! (with hybrid experts), each after the largest graph's compute memory,
//! so that what is left is known.

use std::sync::Arc;

use parking_lot::Mutex;

use ggml_core::Backend;
use ggml_sched::Scheduler;

use super::params::MoeParams;
use super::stats::mib;
use crate::error::{LlamaError, Result};
use crate::graph::GraphBuilder;
use crate::kv_cache::{KvCache, KV_PAD};
use crate::model::Model;
use crate::moe_cache::cache::layout::{bytes_for_all, model_groups, model_groups_on};
use crate::moe_cache::hybrid::HybridShared;
use crate::moe_cache::prefetch::{PrefetchSlots, Staging};
use crate::moe_cache::{CacheLayout, CacheShared, CacheSize};

/// Device memory `auto` leaves free for the cached graphs' activations:
/// this fraction of what is free after the largest graph's memory.
const AUTO_MARGIN_DIV: usize = 16;

/// Allocate the largest graph's compute memory on the device (so that
/// what is left is known), when the device's memory is limited. An error
/// starts with `what` (the flag that asked) and ends its sentence with
/// `before`.
fn alloc_largest_graph(
    model: &Arc<Model>,
    n_ubatch: usize,
    kv: &KvCache,
    sched: &mut Scheduler,
    what: &str,
    before: &str,
) -> Result<()> {
    let Some(dev) = model.devices.iter().find(|d| d.memory().is_some()) else {
        return Ok(());
    };
    let n = n_ubatch.min(kv.size).max(1);
    let n_kv = n.next_multiple_of(KV_PAD).min(kv.size);
    let mut b = GraphBuilder::new(model);
    b.build_decoder(kv, n, n_kv, n);
    let mut g = b.g;
    sched.alloc_graph(&mut g).map_err(|e| {
        LlamaError::Invalid(format!(
            "{what}: the graph of a {n}-token ubatch does not fit on {}{before}: {e}",
            dev.name()
        ))
    })?;
    Ok(())
}

/// The prefill prefetch's staging slots, when the parameters ask for
/// them (after the largest graph's memory, before an `auto` cache; an
/// explicit cache size is kept free for the cache).
pub(super) fn staging(
    model: &Arc<Model>,
    params: &MoeParams,
    n_ubatch: usize,
    kv: &KvCache,
    sched: &mut Scheduler,
) -> Result<Option<Arc<Mutex<Staging>>>> {
    let slots = params.prefetch;
    if slots == PrefetchSlots::Off || model.devices.is_empty() {
        return Ok(None);
    }
    let min_tokens = params.cache.max_batch.min(n_ubatch);
    alloc_largest_graph(
        model,
        n_ubatch,
        kv,
        sched,
        &format!("--prefetch-experts-slots {slots}"),
        "",
    )?;
    let reserve: Vec<u64> = (0..model.devices.len())
        .map(|d| match params.cache_size_of(d) {
            CacheSize::Bytes(b) => b,
            _ => 0,
        })
        .collect();
    let free: Vec<Option<u64>> = model
        .devices
        .iter()
        .map(crate::moe_cache::prefetch::free_memory)
        .collect();
    let st = Staging::new(model, slots, &free, &reserve, min_tokens);
    Ok(Some(Arc::new(Mutex::new(st))))
}

/// The expert cache the parameters ask for, when the model keeps experts
/// in host memory and has a device to compute with them.
pub(super) fn cache(
    model: &Arc<Model>,
    params: &MoeParams,
    n_ubatch: usize,
    cpu: &Arc<dyn Backend>,
    kv: &KvCache,
    sched: &mut Scheduler,
) -> Result<Option<Arc<Mutex<CacheShared>>>> {
    let mc = params.cache;
    if mc.max_batch == 0 {
        return Err(LlamaError::Invalid(
            "--moe-cache-max-batch must be at least 1".into(),
        ));
    }
    let Some(dev) = &model.device else {
        return Ok(None);
    };
    let n_dev = model.devices.len();
    // one size per device (`--moe-cache-mib A,B`), or one for all
    let sizes: Vec<CacheSize> = match params.cache_sizes.as_slice() {
        [] => vec![mc.size; n_dev],
        v if v.len() == n_dev => v.to_vec(),
        v => {
            return Err(LlamaError::Invalid(format!(
            "--moe-cache-mib {}: {} sizes for {} devices ({}): give one for all, or one per device",
            v.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(","),
            v.len(),
            n_dev,
            model
                .devices
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(",")
        )))
        }
    };
    let groups = model_groups(model);
    if sizes.iter().all(|s| *s == CacheSize::Off) || groups.is_empty() {
        return Ok(None);
    }
    // the largest graph's memory first, so the caches take what is left
    alloc_largest_graph(
        model,
        n_ubatch,
        kv,
        sched,
        &format!("--moe-cache-mib {}", mc.size),
        " before the cache",
    )?;
    let mut budgets = Vec::with_capacity(n_dev);
    for (di, (d, size)) in model.devices.iter().zip(&sizes).enumerate() {
        budgets.push(match (*size, d.memory()) {
            (CacheSize::Bytes(b), Some((free, total))) if b > free as u64 => {
                return Err(LlamaError::Invalid(format!(
                    "--moe-cache-mib {size}: a cache of {:.2} MiB does not fit in {}'s memory ({:.2} MiB free of {:.2} MiB after the graph's)",
                    mib(b),
                    d.name(),
                    mib(free as u64),
                    mib(total as u64)
                )))
            }
            (CacheSize::Bytes(b), _) => b,
            (CacheSize::Auto, Some((free, _))) => (free - free / AUTO_MARGIN_DIV) as u64,
            (CacheSize::Auto, None) => bytes_for_all(&model_groups_on(model, Some(di))),
            (CacheSize::Off, _) => 0,
        });
    }
    let budget: u64 = budgets.iter().sum();
    let max_batch = mc.max_batch.min(n_ubatch);
    let layout = CacheLayout::new(model, &budgets, cpu, max_batch)?;
    let mut shared = CacheShared::new(Arc::new(layout), mc.policy, budget);
    if let Some(share) = params.hybrid {
        shared.hybrid = Some(HybridShared::new(
            share,
            &shared.layout,
            dev,
            cpu,
            model.hparams.n_expert,
        )?);
    }
    Ok(Some(Arc::new(Mutex::new(shared))))
}
