//! The host cache's copy hook. A cached layer's slot map lives in memory
//! the CPU reads only through a copy, so its lookup heads a CPU split and
//! the scheduler offers the map here, after the router's split computed:
//! the hook reads the layer's ids (`moe_cache::hook::layer_experts`),
//! asks the group's slot bank for hits and misses (the policy of
//! `--moe-host-cache-policy`), reads the misses from the model file
//! (adjacent experts of one tensor merged into one read, several reads in
//! flight, [`super::disk`]) straight into their slots, and writes the map
//! last.

use std::sync::Arc;

use parking_lot::Mutex;

use ggml_core::backend::check_range;
use ggml_sched::{CopyHook, HookCtx, HookError};

use super::disk::{DiskReader, ReadDone, ReadReq};
use super::state::HostCache;
use crate::expert_copy::PolicyShared;
use crate::moe_cache::cache::bank::LayerAccess;
use crate::moe_cache::hook::{layer_experts, MoeCacheHook};
use crate::moe_cache::LayerCache;

/// The copy hook of a CPU-only run with a host expert cache.
pub struct HostCacheHook {
    host: Arc<Mutex<HostCache>>,
    copy_shared: Arc<Mutex<PolicyShared>>,
}

impl HostCacheHook {
    /// The hook over `host` (and the selective copy's state, for the tests'
    /// expert-id filter).
    pub fn new(host: Arc<Mutex<HostCache>>, copy_shared: Arc<Mutex<PolicyShared>>) -> Self {
        HostCacheHook { host, copy_shared }
    }
}

/// One merged read: experts of role `role` adjacent in the file, each into
/// its slot.
struct Run {
    role: usize,
    off: u64,
    slots: Vec<u32>,
}

/// The reads of a layer's misses: per role, runs of adjacent experts (their
/// slots need not be adjacent: each expert's bytes go to its own slot).
fn plan_reads(lc: &LayerCache, acc: &LayerAccess) -> Vec<Run> {
    let mut runs = Vec::new();
    for r in 0..3 {
        let eb = lc.expert_bytes[r];
        let base = lc.host[r].offset as u64;
        let mut i = 0;
        while i < acc.misses.len() {
            let (e0, _) = acc.misses[i];
            let mut j = i + 1;
            while j < acc.misses.len() && acc.misses[j].0 == e0 + (j - i) as u32 {
                j += 1;
            }
            runs.push(Run {
                role: r,
                off: base + e0 as u64 * eb as u64,
                slots: acc.misses[i..j].iter().map(|&(_, s)| s).collect(),
            });
            i = j;
        }
    }
    runs
}

/// Read `runs` of layer `lc` from the disk straight into their slots.
fn read_runs(disk: &DiskReader, lc: &LayerCache, runs: &[Run]) -> Result<Vec<ReadDone>, HookError> {
    // every slot's address, checked inside its bank and disjoint from every
    // other before any of them is written
    let mut slots: Vec<(*mut u8, usize)> = Vec::new();
    for run in runs {
        let eb = lc.expert_bytes[run.role];
        let bank = &lc.banks[run.role].0;
        let Some(base) = bank.buffer.base_ptr() else {
            return Err(HookError::msg(format!(
                "the host expert cache's bank '{}' has no host address",
                bank.buffer.name()
            )));
        };
        for &slot in &run.slots {
            let start = bank.offset + slot as usize * eb;
            check_range(bank.buffer.name(), bank.buffer.size(), start, eb)?;
            // SAFETY: `start + eb` is inside the buffer (checked above).
            slots.push((unsafe { base.add(start) }, eb));
        }
    }
    let mut sorted: Vec<(usize, usize)> = slots.iter().map(|&(p, l)| (p as usize, l)).collect();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
        return Err(HookError::msg(format!(
            "host expert cache, layer {}: two misses were given overlapping slots",
            lc.layer
        )));
    }
    let mut slots = slots.into_iter();
    let mut reqs = Vec::with_capacity(runs.len());
    for run in runs {
        let dst = slots
            .by_ref()
            .take(run.slots.len())
            // SAFETY: each range lies inside its bank's buffer and overlaps
            // no other destination of this batch (both checked above); the
            // slots being filled are misses, which no node reads until this
            // hook returns (the split that reads the banks runs after it, on
            // this thread), and the layout keeps the buffers alive.
            .map(|(p, l)| unsafe { std::slice::from_raw_parts_mut(p, l) })
            .collect();
        reqs.push(ReadReq { off: run.off, dst });
    }
    disk.read_batch(reqs)
        .map_err(|e| HookError::msg(format!("host expert cache, layer {}: {e}", lc.layer)))
}

impl CopyHook for HostCacheHook {
    fn copy_input(&mut self, cx: &mut HookCtx<'_>) -> Result<bool, HookError> {
        let mut guard = self.host.lock();
        let host = &mut *guard;
        let Some(layer) = MoeCacheHook::map_layer(&host.cache, cx) else {
            return Ok(false);
        };
        let Some(lc) = host.cache.layout.layers[layer].clone() else {
            return Err(HookError::msg(format!("layer {layer} is not cached")));
        };
        let experts = layer_experts(cx, layer, lc.n_expert, &self.copy_shared)?;
        let Some(bank) = host.cache.banks.get_mut(lc.group).and_then(|b| b.as_mut()) else {
            return Err(HookError::msg(format!("layer {layer}'s group has no bank")));
        };
        let acc = bank
            .access(layer as u32, &experts)
            .map_err(HookError::msg)?;
        let runs = plan_reads(&lc, &acc);
        let t0 = std::time::Instant::now();
        let done = read_runs(&host.disk, &lc, &runs);
        let done = match done {
            Ok(d) => d,
            Err(e) => {
                // the planned slots did not all receive their experts
                host.cache.reset_group(lc.group);
                return Err(e);
            }
        };
        host.disk_stats.add(&done, t0.elapsed().as_secs_f64());
        let Some(bank) = host.cache.banks.get(lc.group).and_then(|b| b.as_ref()) else {
            return Err(HookError::msg(format!("layer {layer}'s group has no bank")));
        };
        let map: Vec<u8> = bank
            .slot_map(layer as u32)
            .unwrap_or(&[])
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect();
        cx.write_async(0, &map)?;
        let slot_bytes: u64 = lc.expert_bytes.iter().map(|&b| b as u64).sum();
        let decode = host.cache.n_tokens() <= 1;
        let st = host.cache.stats.layers.entry(layer as u32).or_default();
        let (h, m) = (acc.hits.len() as u64, acc.misses.len() as u64);
        if decode {
            st.hits_decode += h;
            st.misses_decode += m;
        } else {
            st.hits_prompt += h;
            st.misses_prompt += m;
        }
        st.bytes_uploaded += m * slot_bytes;
        st.bytes_from_bank += h * slot_bytes;
        st.evictions += acc.evicted.len() as u64;
        st.id_reads += 1;
        st.writes += runs.len() as u64;
        Ok(true)
    }
}
