//! Building a context's MoE states from its [`MoeParams`] and its devices'
//! memory: the prefill prefetch's staging slots, then the expert cache
//! (with hybrid experts), each after the largest graph's compute memory,
//! so that what is left is known. With the compute alias the cache comes
//! after the memory of the graphs it serves only, and the prompt graphs
//! borrow its banks ([`crate::moe_cache::alias`]).

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
use crate::moe_cache::alias::{
    choose_ubatch, AliasCounters, AliasReport, CacheLender, UbatchChoice,
};
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
    let n = n_ubatch.min(kv.size).max(1);
    let n_kv = n.next_multiple_of(KV_PAD).min(kv.size);
    alloc_graph_of(model, n, n_kv, kv, sched, what, before)
}

/// The graph of a ubatch of `n` tokens over `n_kv` cells, with every
/// token's logits (the most memory such a ubatch takes).
fn worst_graph(model: &Arc<Model>, n: usize, n_kv: usize, kv: &KvCache) -> ggml_core::Graph {
    let mut b = GraphBuilder::new(model);
    b.build_decoder(kv, n, n_kv, n);
    b.g
}

/// Allocate the compute memory of the graph of a ubatch of `n` tokens
/// that the cache serves, over the whole context (the scheduler's own
/// memory under the compute alias): built through a minimal cache of the
/// same groups (a graph's compute memory does not depend on the slot
/// count), which is freed again before the real one is laid out.
fn alloc_cached_graph(
    model: &Arc<Model>,
    n: usize,
    kv: &KvCache,
    cpu: &Arc<dyn Backend>,
    sched: &mut Scheduler,
    what: &str,
) -> Result<()> {
    let Some(dev) = model.devices.iter().find(|d| d.memory().is_some()) else {
        return Ok(());
    };
    let budgets: Vec<u64> = (0..model.devices.len())
        .map(|d| {
            let groups = model_groups_on(model, Some(d));
            let one: u64 = groups.iter().map(|g| g.bank_bytes(g.n_used)).sum();
            one * groups.len().max(1) as u64
        })
        .collect();
    let mut probe = CacheLayout::new(model, &budgets, cpu, n)?;
    // planned, never computed: every cached layer serves `n` tokens
    for l in probe.layers.iter_mut().flatten() {
        l.max_tokens = n;
    }
    let probe = Arc::new(probe);
    let mut b = GraphBuilder::new(model);
    b.moe.cache = Some(Arc::clone(&probe));
    b.build_decoder(kv, n, kv.size, n);
    let mut g = b.g;
    sched.alloc_graph(&mut g).map_err(|e| {
        LlamaError::Invalid(format!(
            "{what}: the graph of a {n}-token ubatch does not fit on {} before the cache: {e}",
            dev.name()
        ))
    })?;
    Ok(())
}

/// [`alloc_largest_graph`] of `n` tokens over `n_kv` cells.
fn alloc_graph_of(
    model: &Arc<Model>,
    n: usize,
    n_kv: usize,
    kv: &KvCache,
    sched: &mut Scheduler,
    what: &str,
    before: &str,
) -> Result<()> {
    let Some(dev) = model.devices.iter().find(|d| d.memory().is_some()) else {
        return Ok(());
    };
    let mut g = worst_graph(model, n, n_kv, kv);
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

/// The expert cache, and what was decided about the compute alias.
#[derive(Default)]
pub(super) struct BuiltCache {
    /// The cache, when there is one.
    pub cache: Option<Arc<Mutex<CacheShared>>>,
    /// The alias's decision, with a cache.
    pub alias: Option<AliasReport>,
    /// The lender's counters, when the alias is on.
    pub alias_counters: Option<Arc<Mutex<AliasCounters>>>,
}

/// The expert cache the parameters ask for (with the compute alias, when
/// it is on: the cache then lends its banks to the prompt graphs, and the
/// scheduler gets the cache as its lender), when the model keeps experts
/// in host memory and has a device to compute with them.
pub(super) fn cache(
    model: &Arc<Model>,
    params: &MoeParams,
    n_ubatch: usize,
    cpu: &Arc<dyn Backend>,
    kv: &KvCache,
    sched: &mut Scheduler,
) -> Result<BuiltCache> {
    let mc = params.cache;
    if mc.max_batch == 0 {
        return Err(LlamaError::Invalid(
            "--moe-cache-max-batch must be at least 1".into(),
        ));
    }
    let Some(dev) = &model.device else {
        return Ok(BuiltCache::default());
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
        return Ok(BuiltCache::default());
    }
    let flag = format!("--moe-cache-mib {}", mc.size);
    let mut report = AliasReport {
        requested_ubatch: n_ubatch,
        ubatch: n_ubatch,
        ..AliasReport::default()
    };
    if !params.cache_alias {
        report.reason = "--moe-cache-alias off: compute memory reserved apart".into();
    } else if n_ubatch <= mc.max_batch {
        report.reason = format!(
            "every ubatch (-ub {n_ubatch}) uses the cache (--moe-cache-max-batch {})",
            mc.max_batch
        );
    } else {
        // the scheduler's own memory holds only the graphs of the ubatches
        // the cache serves (over the whole context); the cache gets the rest
        sched.release_compute_memory();
        let n_small = mc.max_batch.min(n_ubatch).min(kv.size).max(1);
        alloc_cached_graph(model, n_small, kv, cpu, sched, &flag)?;
        let shared = new_cache(model, params, &sizes, n_ubatch, cpu, dev)?;
        let lendable = lendable_bytes(model, &shared);
        let n_dev = model.devices.len();
        let choice = choose_ubatch(n_ubatch, mc.max_batch, &lendable, |u| {
            let g = worst_graph(model, u.min(kv.size).max(1), kv.size, kv);
            sched
                .plan_memory(&g)
                .map(|v| {
                    v.iter()
                        .take(n_dev)
                        .map(|&b| b as u64)
                        .collect::<Vec<u64>>()
                })
                .map_err(|e| LlamaError::Sched(e.to_string()))
        })?;
        report.lendable_bytes = lendable.iter().sum();
        match choice {
            UbatchChoice::Fits {
                ubatch,
                graph_bytes,
                too_big,
            } => {
                report.on = true;
                report.ubatch = ubatch;
                report.graph_bytes = graph_bytes;
                report.reason = match too_big.last() {
                    None => "prompt ubatches compute in the expert cache's memory".into(),
                    Some(&(u, b)) => format!(
                        "shrunk: the worst-case graph of {u} tokens needs {:.2} MiB, more than the cache lends",
                        mib(b)
                    ),
                };
                let shared = Arc::new(Mutex::new(shared));
                let group_of = lender_groups(model, &shared.lock());
                let counters = Arc::new(Mutex::new(AliasCounters::default()));
                sched.set_lender(Box::new(CacheLender::new(
                    Arc::clone(&shared),
                    group_of,
                    Arc::clone(&counters),
                )));
                return Ok(BuiltCache {
                    cache: Some(shared),
                    alias: Some(report),
                    alias_counters: Some(counters),
                });
            }
            UbatchChoice::DropsOut(tried) => {
                let (u, b) = tried.last().copied().unwrap_or((n_ubatch, 0));
                report.graph_bytes = b;
                report.reason = format!(
                    "the worst-case graph of {u} tokens needs {:.2} MiB, more than the {:.2} MiB the cache can lend: compute memory reserved apart",
                    mib(b),
                    mib(report.lendable_bytes)
                );
                drop(shared);
                sched.release_compute_memory();
            }
        }
    }
    // the largest graph's memory first, so the caches take what is left
    alloc_largest_graph(model, n_ubatch, kv, sched, &flag, " before the cache")?;
    let shared = new_cache(model, params, &sizes, n_ubatch, cpu, dev)?;
    Ok(BuiltCache {
        cache: Some(Arc::new(Mutex::new(shared))),
        alias: Some(report),
        alias_counters: None,
    })
}

/// The cache of `sizes` (one per device) in the memory the devices have
/// free now.
fn new_cache(
    model: &Arc<Model>,
    params: &MoeParams,
    sizes: &[CacheSize],
    n_ubatch: usize,
    cpu: &Arc<dyn Backend>,
    dev: &Arc<dyn Backend>,
) -> Result<CacheShared> {
    let mc = params.cache;
    let mut budgets = Vec::with_capacity(sizes.len());
    for (di, (d, size)) in model.devices.iter().zip(sizes).enumerate() {
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
    Ok(shared)
}

/// Per device: its groups with banks (all in the device's one bank
/// buffer, what a graph on that device may borrow).
fn lender_groups(model: &Model, shared: &CacheShared) -> Vec<Vec<usize>> {
    let l = &shared.layout;
    (0..model.devices.len())
        .map(|d| {
            (0..l.groups.len())
                .filter(|&g| l.group_device.get(g) == Some(&d) && l.group_buffer(g).is_some())
                .collect()
        })
        .collect()
}

/// Per device: the bytes of its bank buffer (0 without one).
fn lendable_bytes(model: &Model, shared: &CacheShared) -> Vec<u64> {
    lender_groups(model, shared)
        .iter()
        .map(|gs| {
            gs.first()
                .and_then(|&g| shared.layout.group_buffer(g))
                .map_or(0, |b| b.size() as u64)
        })
        .collect()
}
