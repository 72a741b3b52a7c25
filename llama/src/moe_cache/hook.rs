//! The copy-hook side of the cache. [`MoeCacheHook`] is the scheduler's one
//! hook: slot maps go to the cache, every other host weight to the
//! selective expert copy ([`crate::expert_copy`]).
//!
//! For a slot map (offered because its `get_rows` lookup heads a device
//! split), the hook reads the layer's router ids once, validates them,
//! asks the group's [`super::cache::bank::SlotBank`] for hits and misses, uploads each run of
//! misses with one ranged write per role straight into the banks, and then
//! writes the map, so that the lookup reads slots that hold the experts.

use std::sync::Arc;

use parking_lot::Mutex;

use ggml_core::backend::{check_range, copy_bytes};
use ggml_core::{GgmlType, Op};
use ggml_core::{Stream, TensorData, WaitKind};
use ggml_sched::{CopyHook, HookCtx, HookError};

use super::cache::bank::upload_runs;
use super::cache::shared::CacheShared;
use super::hybrid;
use crate::diagnostics;
use crate::expert_copy::{ids, ExpertCopyPolicy, PolicyShared};

/// Make the split's copy stream wait for everything queued on the device's
/// compute stream: a miss may evict a slot that an earlier layer's kernels
/// (an earlier split) still read. Free in practice: the hook has just read
/// the router's ids, which the last queued split computes.
fn after_queued_compute(cx: &HookCtx<'_>) -> Result<(), HookError> {
    let be = cx.backend();
    if cx.stream() != Stream::Compute {
        let ev = be.record_event_on(Stream::Compute)?;
        be.wait_event_for(cx.stream(), &ev, WaitKind::Slot)?;
    }
    Ok(())
}

/// Copy `len` bytes of a host expert tensor into a bank on the split's
/// copy stream (asynchronously: the host goes on, e.g. to the CPU's share
/// of the layer, while they cross), or synchronously when the source is not
/// host-addressable.
fn upload_on_stream(
    cx: &HookCtx<'_>,
    src: &TensorData,
    src_off: usize,
    dst: &TensorData,
    dst_off: usize,
    len: usize,
) -> Result<(), HookError> {
    let Some(p) = src.buffer.base_ptr() else {
        return Ok(copy_bytes(src, src_off, dst, dst_off, len)?);
    };
    check_range(
        src.buffer.name(),
        src.buffer.size(),
        src.offset + src_off,
        len,
    )?;
    // SAFETY: the range was checked against the source buffer; the layer's
    // cache holds that host weights buffer (never written by compute) for
    // as long as the banks exist, past the split's synchronization.
    let s = unsafe { std::slice::from_raw_parts(p.add(src.offset + src_off), len) };
    cx.backend().write_on(cx.stream(), dst, dst_off, s)?;
    Ok(())
}

/// The experts the router picked for `layer` (validated, `< n_expert`):
/// the ids its slot map's one `get_rows` lookup reads, from an earlier
/// split, read back and passed through the test's id filter.
pub(crate) fn layer_experts(
    cx: &HookCtx<'_>,
    layer: usize,
    n_expert: u32,
    copy_shared: &Mutex<PolicyShared>,
) -> Result<Vec<u32>, HookError> {
    let g = cx.graph();
    let consumers = cx.consumers();
    let ids = match consumers.as_slice() {
        [c] if g.tensor(*c).op == Op::GetRows && g.tensor(*c).src[0] == cx.dst() => {
            g.tensor(*c).src[1]
        }
        _ => {
            return Err(HookError::msg(format!(
                "the slot map of layer {layer} must be read by exactly one get_rows"
            )))
        }
    };
    // the lookup heads its split (it reads a host weight), so the ids
    // come from an earlier split; refuse clearly if a graph breaks that
    let mut producer = ids;
    while let Some(v) = g.tensor(producer).view_src {
        producer = v;
    }
    if cx.nodes().contains(&producer) {
        return Err(HookError::msg(format!(
            "the expert ids of layer {layer} are computed in the same split as their slot lookup"
        )));
    }
    let t = g.tensor(ids);
    if t.ty != GgmlType::I32 {
        return Err(HookError::msg(format!(
            "expert ids '{}' are {}, not i32",
            t.name, t.ty
        )));
    }
    let raw = cx.read_ids(ids)?;
    diagnostics::count_id_read(cx.backend());
    let mut vals = ids::decode_i32(&raw);
    if let Some(f) = copy_shared.lock().id_filter.as_mut() {
        f(&mut vals);
    }
    let mut experts = Vec::with_capacity(vals.len());
    for (i, &id) in vals.iter().enumerate() {
        let e = ids::expert_index(id, i, n_expert as usize, &g.tensor(producer).name)
            .map_err(HookError::msg)?;
        experts.push(e as u32);
    }
    Ok(experts)
}

/// The scheduler's copy hook: the expert cache and the selective copy.
pub struct MoeCacheHook {
    copy: ExpertCopyPolicy,
    copy_shared: Arc<Mutex<PolicyShared>>,
    cache: Option<Arc<Mutex<CacheShared>>>,
    prefetch: Option<Arc<Mutex<super::prefetch::Staging>>>,
    predict: Option<Arc<Mutex<super::predict::PredictShared>>>,
}

impl MoeCacheHook {
    /// Stage later splits' host expert tensors into `staging`'s slots when
    /// the scheduler's look-ahead offers them ([`super::prefetch`]).
    pub fn with_prefetch(mut self, staging: Arc<Mutex<super::prefetch::Staging>>) -> Self {
        self.prefetch = Some(staging);
        self
    }

    /// Upload the predicted experts of the next cached layer early
    /// ([`super::predict`]).
    pub fn with_predict(mut self, p: Arc<Mutex<super::predict::PredictShared>>) -> Self {
        self.predict = Some(p);
        self
    }

    /// The hook over the selective copy's state and, when there is one, the
    /// cache's.
    pub fn new(
        copy_shared: Arc<Mutex<PolicyShared>>,
        cache: Option<Arc<Mutex<CacheShared>>>,
    ) -> MoeCacheHook {
        MoeCacheHook {
            copy: ExpertCopyPolicy::new(Arc::clone(&copy_shared)),
            copy_shared,
            cache,
            prefetch: None,
            predict: None,
        }
    }

    /// The cached layer whose slot map `cx` offers.
    pub(crate) fn map_layer(cache: &CacheShared, cx: &HookCtx<'_>) -> Option<usize> {
        let d = cx.graph().data_of(cx.src())?;
        let mb = &cache.layout.map_buffer;
        if !std::ptr::addr_eq(Arc::as_ptr(&d.buffer), Arc::as_ptr(mb)) {
            return None;
        }
        cache
            .layout
            .layers
            .iter()
            .flatten()
            .find(|l| l.map.offset == d.offset)
            .map(|l| l.layer as usize)
    }

    fn serve_map(
        &mut self,
        cache: &mut CacheShared,
        layer: usize,
        cx: &mut HookCtx<'_>,
    ) -> Result<bool, HookError> {
        let Some(lc) = cache.layout.layers[layer].clone() else {
            return Err(HookError::msg(format!("layer {layer} is not cached")));
        };
        if cache.is_lent(lc.group) {
            return Err(HookError::msg(format!(
                "layer {layer}'s cache banks are lent to the compute graph (--moe-cache-alias): a graph that uses the cache must not run in them"
            )));
        }
        let experts = layer_experts(cx, layer, lc.n_expert, &self.copy_shared)?;
        let Some(bank) = cache.banks.get_mut(lc.group).and_then(|b| b.as_mut()) else {
            return Err(HookError::msg(format!("layer {layer}'s group has no bank")));
        };
        // hybrid experts: the misses the CPU computes, decided now
        let cpu = match &cache.hybrid {
            Some(h) => {
                let shape = &cache.layout.shapes[lc.group];
                hybrid::split_misses(h, shape, bank, layer as u32, &experts)
            }
            None => Vec::new(),
        };
        let acc = bank
            .access_except(layer as u32, &experts, &cpu)
            .map_err(HookError::msg)?;
        let mut uploaded = 0u64;
        let mut writes = 0u64;
        if !acc.misses.is_empty() {
            after_queued_compute(cx)?;
        }
        let mut upload = || -> Result<(), HookError> {
            for run in upload_runs(&acc.misses) {
                for r in 0..3 {
                    let eb = lc.expert_bytes[r];
                    let len = run.n as usize * eb;
                    upload_on_stream(
                        cx,
                        &lc.host[r],
                        run.expert as usize * eb,
                        &lc.banks[r].0,
                        run.slot as usize * eb,
                        len,
                    )?;
                    uploaded += len as u64;
                    writes += 1;
                }
            }
            Ok(())
        };
        if let Err(e) = upload() {
            // the planned slots did not all receive their experts
            cache.reset_group(lc.group);
            return Err(e);
        }
        let Some(bank) = cache.banks.get_mut(lc.group).and_then(|b| b.as_mut()) else {
            return Err(HookError::msg(format!("layer {layer}'s group has no bank")));
        };
        let map: Vec<u8> = bank
            .slot_map(layer as u32)
            .unwrap_or(&[])
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect();
        cx.write_async(0, &map)?;
        if let Some(h) = &cache.hybrid {
            h.maps
                .write(layer, lc.n_expert, &cpu)
                .map_err(|e| HookError::msg(e.to_string()))?;
        }
        let slot_bytes: u64 = lc.expert_bytes.iter().map(|&b| b as u64).sum();
        let decode = cache.n_tokens() <= 1;
        let st = cache.stats.layers.entry(layer as u32).or_default();
        let (h, m) = (acc.hits.len() as u64, acc.misses.len() as u64);
        let c = cpu.len() as u64;
        if decode {
            st.hits_decode += h;
            st.misses_decode += m;
            st.cpu_decode += c;
        } else {
            st.hits_prompt += h;
            st.misses_prompt += m;
            st.cpu_prompt += c;
        }
        st.bytes_uploaded += uploaded;
        st.bytes_from_bank += h * slot_bytes;
        self.copy_shared
            .lock()
            .add_backend_bytes(cx.backend().name(), uploaded);
        st.evictions += acc.evicted.len() as u64;
        st.id_reads += 1;
        st.writes += writes;
        if let Some(p) = &self.predict {
            p.lock().served(layer as u32, &experts);
        }
        Ok(true)
    }
}

impl MoeCacheHook {
    /// The cached layer and role whose host expert tensor `cx` offers.
    fn host_role(cache: &CacheShared, cx: &HookCtx<'_>) -> Option<(usize, usize)> {
        let d = cx.graph().data_of(cx.src())?;
        cache.layout.layers.iter().flatten().find_map(|l| {
            l.host
                .iter()
                .position(|h| {
                    std::ptr::addr_eq(Arc::as_ptr(&h.buffer), Arc::as_ptr(&d.buffer))
                        && h.offset == d.offset
                })
                .map(|r| (l.layer as usize, r))
        })
    }

    /// A ubatch too large for the cache reads a cached layer's host expert
    /// tensor: the experts the bank holds are copied device to device, the
    /// others from host memory (runs, padded as the selective copy pads);
    /// nothing is inserted. `None`: leave it to the selective copy.
    fn serve_bypass(
        &mut self,
        cache: &mut CacheShared,
        layer: usize,
        role: usize,
        cx: &mut HookCtx<'_>,
    ) -> Result<Option<bool>, HookError> {
        if self.copy_shared.lock().disabled {
            return Ok(None);
        }
        let Some(used) = self.copy.used_for_input(cx)? else {
            return Ok(None);
        };
        let Some(lc) = cache.layout.layers[layer].clone() else {
            return Ok(None);
        };
        // banks lent to this very graph hold its activations, no expert
        if cache.is_lent(lc.group) {
            return Ok(None);
        }
        let Some(bank) = cache.banks.get(lc.group).and_then(|b| b.as_ref()) else {
            return Ok(None);
        };
        let map = bank.slot_map(layer as u32).unwrap_or(&[]);
        let from_bank: Vec<(u32, u32)> = used
            .iter()
            .enumerate()
            .filter(|(_, &u)| u)
            .filter_map(|(e, _)| {
                map.get(e)
                    .filter(|&&s| s >= 0)
                    .map(|&s| (e as u32, s as u32))
            })
            .collect();
        if from_bank.is_empty() {
            return Ok(None);
        }
        let Some(dst) = cx.graph().data_of(cx.dst()) else {
            return Ok(None);
        };
        let eb = lc.expert_bytes[role];
        let total = cx.nbytes();
        let overhang = cx.read_overhang();
        let mut host_used = used.clone();
        let mut served = 0u64;
        for run in upload_runs(&from_bank) {
            let len = run.n as usize * eb;
            let done = cx.backend().copy_within(
                &lc.banks[role].0,
                run.slot as usize * eb,
                &dst,
                run.expert as usize * eb,
                len,
            )?;
            if done {
                served += run.n as u64;
                for e in run.expert..run.expert + run.n {
                    host_used[e as usize] = false;
                }
                let end = (run.expert + run.n) as usize * eb;
                if overhang > 0 && end < total {
                    cx.copy_range(end, overhang.min(total - end))?;
                }
            }
        }
        if served == 0 {
            return Ok(None);
        }
        for r in crate::expert_copy::runs::copy_ranges(&host_used, eb, total, overhang) {
            cx.copy_range(r.start, r.len())?;
        }
        {
            let mut s = self.copy_shared.lock();
            s.stats.inputs += 1;
            s.stats.full_bytes += total as u64;
            s.stats.experts_full += used.len() as u64;
            s.stats.bytes += cx.bytes_written();
            s.add_backend_bytes(cx.backend().name(), cx.bytes_written());
            s.stats.experts_copied += host_used.iter().filter(|&&u| u).count() as u64;
        }
        let st = cache.stats.layers.entry(layer as u32).or_default();
        st.bytes_from_bank += served * eb as u64;
        if role == 0 {
            st.bypass_reads += served;
        }
        Ok(Some(true))
    }
}

impl CopyHook for MoeCacheHook {
    fn begin_graph(&mut self) {
        self.copy.begin_graph();
        if let Some(p) = &self.predict {
            p.lock().begin_graph();
        }
    }

    fn prefetch_input(&mut self, cx: &mut ggml_sched::PrefetchCtx<'_>) -> Result<bool, HookError> {
        if let (Some(p), Some(c)) = (&self.predict, &self.cache) {
            let mut p = p.lock();
            let before = p.stats.bytes;
            p.offer(c, cx)?;
            let added = p.stats.bytes - before;
            self.copy_shared
                .lock()
                .add_backend_bytes(cx.backend().name(), added);
        }
        match &self.prefetch {
            Some(p) => {
                let mut p = p.lock();
                let before = p.stats.bytes;
                let r = p.offer(cx)?;
                let added = p.stats.bytes - before;
                self.copy_shared
                    .lock()
                    .add_backend_bytes(cx.backend().name(), added);
                Ok(r)
            }
            None => Ok(false),
        }
    }

    fn copy_input(&mut self, cx: &mut HookCtx<'_>) -> Result<bool, HookError> {
        if cx.completes_staging() {
            // a tensor the prefetch staged selectively: the experts its
            // guess missed (declined: copied whole into the slot)
            let Some(p) = self.prefetch.clone() else {
                return Ok(false);
            };
            let used = self.copy.used_for_input(cx)?;
            let r = p.lock().complete(cx, used.as_deref())?;
            self.copy_shared
                .lock()
                .add_backend_bytes(cx.backend().name(), cx.bytes_written());
            return Ok(r);
        }
        let r = self.copy_input_inner(cx)?;
        if let Some(p) = &self.prefetch {
            let mut p = p.lock();
            if p.is_auto() {
                // declined: the scheduler copies the whole input
                let written = if r {
                    cx.bytes_written()
                } else {
                    cx.nbytes() as u64
                };
                p.observe_copy(cx.graph(), cx.src(), cx.nbytes(), written);
            }
        }
        Ok(r)
    }
}

impl MoeCacheHook {
    /// A host weight's copy: the cache's slot maps and bypass reads, else
    /// the selective expert copy.
    fn copy_input_inner(&mut self, cx: &mut HookCtx<'_>) -> Result<bool, HookError> {
        if let Some(c) = self.cache.clone() {
            let mut cache = c.lock();
            if let Some(layer) = Self::map_layer(&cache, cx) {
                return self.serve_map(&mut cache, layer, cx);
            }
            if let Some((layer, role)) = Self::host_role(&cache, cx) {
                if let Some(h) = self.serve_bypass(&mut cache, layer, role, cx)? {
                    return Ok(h);
                }
            }
        }
        self.copy.copy_input(cx)
    }
}
