//! One owner of a context's MoE state ([`MoeRuntime`]).
//!
//! The MoE features are states shared between the scheduler's copy hook
//! (which the scheduler owns) and the context: the selective expert copy's
//! counters, the device cache of host experts (with hybrid experts), the
//! prefill prefetch's staging slots, the decode predictor; plus forced
//! routing and the recording of each layer's expert ids. The runtime
//! builds them from [`MoeParams`] (`build.rs`), installs the hook over them,
//! and is the one place that reads their counters ([`MoeStats`], with one
//! reset baseline) and talks to them around each ubatch.
//!
//! Data flow of one ubatch, as [`crate::Context`] drives it:
//!
//! 1. [`MoeRuntime::begin_ubatch`]: the cache's clock advances.
//! 2. The graph: [`MoeRuntime::graph_inputs`] says what its MoE layers read
//!    ([`MoeGraphInputs`]: the cache's layout, hybrid maps, which guesses
//!    to compute, forced routing); the builder records what it made in the
//!    same object, which the context keeps with the graph (a graph of the
//!    same [`MoeRuntime::graph_key`] and shape is computed again).
//! 3. [`MoeRuntime::graph_chosen`]: the prefetch learns the ubatch, the
//!    cache the layers the graph reads from host memory; the context writes
//!    the inputs ([`MoeGraphInputs::set_inputs`] for forced routing's).
//! 4. The scheduler computes; the hook ([`crate::moe_cache::hook`]) serves
//!    slot maps, host expert tensors and look-ahead offers from the states.
//! 5. [`MoeRuntime::after_compute`]: the prefetch settles its counts, and
//!    the layers' expert ids are read back when recorded (into a trace,
//!    when one is being recorded).

mod build;
mod params;
mod stats;

use std::sync::Arc;

use parking_lot::Mutex;

use ggml_core::{Backend, Graph, TensorId};
use ggml_sched::Scheduler;

use crate::device_stats::DeviceStats;
use crate::error::{LlamaError, Result};
use crate::expert_copy::{ExpertCopyStats, IdFilter, PolicyShared};
use crate::graph::moe::MoeGraphInputs;
use crate::kv_cache::KvCache;
use crate::model::Model;
use crate::moe_cache::alias::{AliasCounters, AliasReport};
use crate::moe_cache::host::{self, hook::HostCacheHook, HostCache, HostCacheStats};
use crate::moe_cache::predict::{MoePredict, PredictShared, PredictStats};
use crate::moe_cache::prefetch::{PrefetchStats, Staging, LOOKAHEAD_SPLITS};
use crate::moe_cache::trace::forced::ForcedRouting;
use crate::moe_cache::{
    CacheShared, CacheStats, LayerCacheStats, MoeCacheHook, Trace, TraceHeader,
};
pub use params::MoeParams;
use stats::mib;
pub use stats::MoeStats;

/// A context's MoE states, the hook's view of them, and their counters.
pub struct MoeRuntime {
    /// The selective copy's state (counters, the ids filter, off switch).
    copy: Arc<Mutex<PolicyShared>>,
    /// The expert cache, when there is one (with hybrid experts inside).
    cache: Option<Arc<Mutex<CacheShared>>>,
    /// The host expert cache, when there is one (CPU-only runs).
    host_cache: Option<Arc<Mutex<HostCache>>>,
    /// The prefill prefetch's staging, when asked for and possible.
    prefetch: Option<Arc<Mutex<Staging>>>,
    /// The decode predictor, when asked for and there is a cache.
    predict: Option<Arc<Mutex<PredictShared>>>,
    /// The predictor's node is in the graph (`--moe-predict router`).
    predict_router: bool,
    /// The trace the MoE layers route by, when forced.
    forced: Option<Arc<ForcedRouting>>,
    /// Read each layer's expert ids back after every ubatch.
    record_expert_ids: bool,
    /// The counters at the last reset (or zeros).
    base: MoeStats,
    /// Each layer's expert ids of the last ubatch, when recorded.
    last_expert_ids: Vec<Vec<i32>>,
    /// The trace being recorded.
    expert_trace: Option<Trace>,
    /// The compute alias's decision, with a device cache.
    alias: Option<AliasReport>,
    /// The alias's lender counters, when it is on.
    alias_counters: Option<Arc<Mutex<AliasCounters>>>,
}

impl MoeRuntime {
    /// Build the states `params` asks for (staging slots, then the cache,
    /// each after the largest graph's compute memory of ubatches of up to
    /// `n_ubatch` tokens over `kv`), and install the copy hook over them in
    /// `sched` (with the look-ahead the prefetch or the predictor needs).
    pub fn new(
        model: &Arc<Model>,
        params: &MoeParams,
        n_ubatch: usize,
        cpu: &Arc<dyn Backend>,
        kv: &KvCache,
        sched: &mut Scheduler,
    ) -> Result<MoeRuntime> {
        let copy = Arc::new(Mutex::new(PolicyShared {
            disabled: !params.expert_copy,
            ..Default::default()
        }));
        let prefetch = build::staging(model, params, n_ubatch, kv, sched)?;
        let built = build::cache(model, params, n_ubatch, cpu, kv, sched)?;
        let cache = built.cache;
        let host_cache = host::build(model, &params.host_cache, n_ubatch, cpu)?;
        let mut hook = MoeCacheHook::new(Arc::clone(&copy), cache.clone());
        if let Some(p) = prefetch.as_ref().filter(|p| p.lock().n_slots() > 0) {
            hook = hook.with_prefetch(Arc::clone(p));
            sched.set_lookahead(LOOKAHEAD_SPLITS);
        }
        let hp = &model.hparams;
        let predict = (params.predict.is_on() && cache.is_some()).then(|| {
            Arc::new(Mutex::new(PredictShared::new(
                params.predict,
                hp.n_expert as u32,
                hp.n_expert_used as u32,
            )))
        });
        if let Some(p) = &predict {
            hook = hook.with_predict(Arc::clone(p));
            sched.set_lookahead(LOOKAHEAD_SPLITS);
        }
        match &host_cache {
            Some(h) => sched.set_copy_hook(Box::new(HostCacheHook::new(
                Arc::clone(h),
                Arc::clone(&copy),
            ))),
            None => sched.set_copy_hook(Box::new(hook)),
        }
        Ok(MoeRuntime {
            copy,
            host_cache,
            predict_router: predict.is_some() && params.predict == MoePredict::Router,
            cache,
            prefetch,
            predict,
            forced: params.forced_routing.clone(),
            record_expert_ids: params.record_expert_ids,
            base: MoeStats::default(),
            last_expert_ids: Vec::new(),
            expert_trace: None,
            alias: built.alias,
            alias_counters: built.alias_counters,
        })
    }

    /// What was decided about the compute alias (`None` without a device
    /// cache): on or off, the ubatch and why.
    pub fn alias(&self) -> Option<&AliasReport> {
        self.alias.as_ref()
    }

    /// The compute alias's lender counters since creation (`None` when the
    /// alias is off).
    pub fn alias_counters(&self) -> Option<AliasCounters> {
        self.alias_counters.as_ref().map(|c| *c.lock())
    }

    /// What a graph's structure depends on besides its shape: the cache's
    /// layout and the hybrid maps the graph reads (addresses; fixed for a
    /// context's life; zeros without them).
    pub fn graph_key(&self) -> (usize, usize) {
        if let Some(h) = &self.host_cache {
            return (Arc::as_ptr(&h.lock().cache.layout) as usize, 0);
        }
        self.cache.as_ref().map_or((0, 0), |c| {
            let c = c.lock();
            (
                Arc::as_ptr(&c.layout) as usize,
                c.hybrid
                    .as_ref()
                    .map_or(0, |h| Arc::as_ptr(&h.maps) as *const u8 as usize),
            )
        })
    }

    /// The largest ubatch every MoE layer can serve from the host cache
    /// (`None` without one, or when its slots hold every expert of a
    /// layer): the context cuts its ubatches to this, so that the cache
    /// serves prompts too.
    pub fn max_ubatch(&self) -> Option<usize> {
        let h = self.host_cache.as_ref()?.lock();
        h.cache
            .layout
            .layers
            .iter()
            .flatten()
            .map(|l| l.max_tokens)
            .min()
    }

    /// A new batch: the last one's expert ids are forgotten.
    pub fn begin_batch(&mut self) {
        self.last_expert_ids.clear();
    }

    /// A ubatch of `n_tokens` tokens is about to be computed (before its
    /// graph is chosen): the cache's clock advances.
    pub fn begin_ubatch(&mut self, n_tokens: usize) {
        if let Some(c) = &self.cache {
            c.lock().begin_ubatch(n_tokens);
        }
        if let Some(h) = &self.host_cache {
            h.lock().cache.begin_ubatch(n_tokens);
        }
    }

    /// What the MoE layers of a graph for a ubatch of `n_tokens` tokens
    /// read (nothing recorded yet).
    pub fn graph_inputs(&self, n_tokens: usize) -> MoeGraphInputs {
        let mut m = MoeGraphInputs::default();
        if let Some(c) = &self.cache {
            let c = c.lock();
            m.cache = Some(Arc::clone(&c.layout));
            m.hybrid = c.hybrid.as_ref().map(|h| Arc::clone(&h.maps));
        }
        if let Some(h) = &self.host_cache {
            m.cache = Some(Arc::clone(&h.lock().cache.layout));
        }
        m.predict_router = self.predict_router;
        m.cache_lent = self.alias.as_ref().is_some_and(|a| a.on)
            && m.cache
                .as_ref()
                .is_some_and(|l| n_tokens > l.served_tokens());
        m.prefetch_predict = self
            .prefetch
            .as_ref()
            .is_some_and(|p| p.lock().predicts(n_tokens));
        m.forced = self.forced.clone();
        m
    }

    /// The ubatch's graph is chosen (built or kept; `moe` is what it
    /// recorded): the prefetch learns the ubatch, the cache the layers the
    /// graph reads from host memory (too large a ubatch).
    pub fn graph_chosen(&mut self, n_tokens: usize, moe: &MoeGraphInputs) {
        if let Some(p) = &self.prefetch {
            p.lock().begin_ubatch(n_tokens);
        }
        if let Some(c) = &self.cache {
            c.lock().note_bypassed(&moe.bypassed);
        }
        if let Some(h) = &self.host_cache {
            h.lock().cache.note_bypassed(&moe.bypassed);
        }
    }

    /// The ubatch's graph `g` was computed: the prefetch settles its
    /// counts; with the ids recorded, each layer's expert ids (`expert_ids`,
    /// `None` for a dense layer) are read back, and added to the trace
    /// being recorded.
    pub fn after_compute(
        &mut self,
        g: &Graph,
        expert_ids: &[Option<TensorId>],
        n_tokens: usize,
    ) -> Result<()> {
        if let Some(p) = &self.prefetch {
            p.lock().settle(g)?;
        }
        self.last_expert_ids.clear();
        if self.record_expert_ids {
            for ids in expert_ids {
                let v = match ids {
                    Some(ids) => bytemuck::pod_collect_to_vec(&g.read_bytes(*ids)?),
                    None => Vec::new(),
                };
                self.last_expert_ids.push(v);
            }
            if let Some(t) = &mut self.expert_trace {
                t.push_ubatch(n_tokens, &self.last_expert_ids)
                    .map_err(LlamaError::Invalid)?;
            }
        }
        Ok(())
    }

    /// Every MoE counter now (cumulative).
    fn snapshot(&self) -> MoeStats {
        let copy = self.copy.lock();
        MoeStats {
            expert_copy: copy.counters(),
            bytes_by_backend: copy.bytes_by_backend.clone(),
            cache: self.cache.as_ref().map(|c| c.lock().counters()),
            prefetch: self.prefetch.as_ref().map(|p| p.lock().counters()),
            predict: self.predict.as_ref().map(|p| p.lock().counters()),
            host_cache: self.host_cache.as_ref().map(|h| h.lock().counters()),
        }
    }

    /// Every MoE counter since creation or the last [`MoeRuntime::reset`].
    pub fn stats(&self) -> MoeStats {
        self.snapshot().since(&self.base)
    }

    /// Zero every MoE counter (the current ones become the baseline).
    pub fn reset(&mut self) {
        self.base = self.snapshot();
    }

    /// The selective copy's counters since creation or the last reset.
    pub fn expert_copy_stats(&self) -> ExpertCopyStats {
        self.copy.lock().counters().since(&self.base.expert_copy)
    }

    /// The expert cache's counters since creation or the last reset; `None`
    /// when there is no cache (off, no device, or no experts in host memory).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        let c = self.cache.as_ref()?;
        stats::cache_since(Some(&c.lock().counters()), self.base.cache.as_ref())
    }

    /// The host expert cache's counters since creation or the last reset;
    /// `None` without one.
    pub fn host_cache_stats(&self) -> Option<HostCacheStats> {
        let h = self.host_cache.as_ref()?;
        let now = h.lock().counters();
        Some(match &self.base.host_cache {
            Some(b) => now.since(b),
            None => now,
        })
    }

    /// Why the host cache reads through the page cache, when it does
    /// (`O_DIRECT` refused: one line for the tools to print).
    pub fn host_cache_note(&self) -> Option<String> {
        let h = self.host_cache.as_ref()?;
        let n = h.lock().disk.note().map(str::to_string);
        n
    }

    /// Make the host cache read the model file through `src` from now on
    /// (fault injection: tests hand a source that fails with `EIO` or ends
    /// early); false without a host cache.
    pub fn set_host_cache_source(
        &self,
        src: Box<dyn crate::moe_cache::host::disk::ReadAt>,
    ) -> bool {
        match &self.host_cache {
            Some(h) => {
                h.lock().disk.set_source(src);
                true
            }
            None => false,
        }
    }

    /// Check the host cache's invariants (the slot maps, owners and
    /// policy agree; tests).
    pub fn verify_host_cache(&self) -> Result<()> {
        match &self.host_cache {
            Some(h) => h.lock().cache.check().map_err(LlamaError::Invalid),
            None => Ok(()),
        }
    }

    /// The prefill prefetch's counters since creation or the last reset;
    /// `None` when `--prefetch-experts-slots` is off or has nothing to do
    /// (no device, or no experts in host memory).
    pub fn prefetch_stats(&self) -> Option<PrefetchStats> {
        let p = self.prefetch.as_ref()?;
        let base = self.base.prefetch.as_ref();
        Some(
            p.lock()
                .counters()
                .since(base.unwrap_or(&PrefetchStats::default())),
        )
    }

    /// The decode prediction's counters since creation or the last reset;
    /// `None` when `--moe-predict` is off or there is no cache.
    pub fn predict_stats(&self) -> Option<PredictStats> {
        let p = self.predict.as_ref()?;
        let base = self.base.predict.as_ref();
        Some(
            p.lock()
                .counters()
                .since(base.unwrap_or(&PredictStats::default())),
        )
    }

    /// Each of `model`'s devices' counters since creation or the last
    /// reset, in [`Model::devices`] order (empty without devices).
    pub fn device_stats(&self, model: &Model) -> Vec<DeviceStats> {
        let n_layer = model.layers.len();
        let cache = self.cache_stats();
        let layout = self.cache.as_ref().map(|c| Arc::clone(&c.lock().layout));
        let bytes = self.copy.lock().bytes_by_backend.clone();
        model
            .devices
            .iter()
            .enumerate()
            .map(|(di, d)| {
                let name = d.name().to_string();
                let mut total = LayerCacheStats::default();
                let mut budget = 0u64;
                if let (Some(cs), Some(l)) = (&cache, &layout) {
                    budget = l.device_budget.get(di).copied().unwrap_or(0);
                    for (layer, s) in &cs.layers {
                        let g = l.layers.get(*layer as usize).and_then(|c| c.as_ref());
                        if g.is_some_and(|g| l.group_device.get(g.group) == Some(&di)) {
                            total.add(s);
                        }
                    }
                }
                let now = bytes.get(&name).copied().unwrap_or(0);
                let base = self.base.bytes_by_backend.get(&name).copied().unwrap_or(0);
                DeviceStats {
                    layers: (0..n_layer)
                        .filter(|&il| model.layers[il].device == Some(di))
                        .count(),
                    moe_cache_mib: mib(budget),
                    moe_cache_hit_rate: total.hit_rate_decode(),
                    h2d_bytes_experts: now.saturating_sub(base),
                    name,
                }
            })
            .collect()
    }

    /// The prefetch's staging slots: `(slots made, bytes per slot, note)`,
    /// the note saying why fewer slots than asked for were made.
    pub fn prefetch_slots(&self) -> Option<(usize, usize, Option<String>)> {
        let p = self.prefetch.as_ref()?;
        let p = p.lock();
        Some((p.n_slots(), p.slot_bytes(), p.note.clone()))
    }

    /// Check the cache's invariants against the device's banks
    /// ([`CacheShared::verify`]; nothing to check without a cache).
    pub fn verify_cache(&self) -> Result<()> {
        match &self.cache {
            Some(c) => c.lock().verify(),
            None => Ok(()),
        }
    }

    /// Install (or remove) a function applied to every expert-ids tensor the
    /// selective copy reads, before validation. For tests that poison ids.
    pub fn set_expert_id_filter(&mut self, f: Option<IdFilter>) {
        self.copy.lock().id_filter = f;
    }

    /// Whether each layer's expert ids are read back after every ubatch.
    pub fn records_expert_ids(&self) -> bool {
        self.record_expert_ids
    }

    /// The experts each layer selected in the last ubatch
    /// (`[layer][n_used * n_tokens]`, empty for a dense layer); empty unless
    /// the ids are recorded.
    pub fn last_expert_ids(&self) -> &[Vec<i32>] {
        &self.last_expert_ids
    }

    /// Start recording a routing trace of `model`: every ubatch computed
    /// from now on adds its token count and each MoE layer's ids (the ids
    /// are recorded from now on).
    pub fn start_expert_trace(&mut self, model: &Model) {
        self.record_expert_ids = true;
        self.expert_trace = Some(Trace::new(TraceHeader::from_model(model)));
    }

    /// The trace recorded since [`MoeRuntime::start_expert_trace`]
    /// (recording stops).
    pub fn take_expert_trace(&mut self) -> Option<Trace> {
        self.expert_trace.take()
    }
}
