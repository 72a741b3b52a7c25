//! Decode prediction (`--moe-predict`): the next cached layer's experts
//! guessed while the current layer computes, and the guessed misses
//! uploaded into the expert cache early. Two predictors ([`MoePredict`]):
//!
//! - **`router`** (`on`): layer `l + 1`'s experts from layer `l`'s hidden
//!   state through layer `l + 1`'s router.
//!   - **Graph** ([`crate::graph::GraphBuilder::moe_predict_next`]): for a cached
//!     ubatch, beside layer `l`'s router, `top_k(mul_mat(gate_inp[l + 1],
//!     x_l))` (`x_l` = layer `l`'s normalized FFN input), named
//!     `ffn_moe_pred-{l + 1}`, a graph output on the device. The logits do
//!     not depend on it. The hook reads it (an id read).
//!   - Under forced routing (`--expert-trace-in`) it guesses what the
//!     model's own router would pick, not the trace: its recall there says
//!     nothing of the routing.
//! - **`history`**: from the routing the hook has already read
//!   ([`history`]): each layer's recent experts and the
//!   transitions from the same token's layer before. No graph node, no
//!   read; it also guesses the ubatch's first cached layer (from recency),
//!   and it predicts under forced routing.
//!
//! - **Hook** ([`PredictShared::offer`]): the scheduler's look-ahead offers
//!   layer `l + 1`'s slot map (a host weight of the next split) after layer
//!   `l`'s split queued its copies and before it computes. The hook takes
//!   the guess, gives the predicted misses slots in the group's bank (never
//!   evicting layer `l`'s experts, which the split about to compute reads)
//!   and uploads them on the copy stream, asynchronously. It declines the
//!   offer, so the map is served as usual when its split comes: correctly
//!   predicted experts are then hits, mispredicted ones misses uploaded on
//!   the critical path.
//! - **Counts** ([`PredictStats`]): experts predicted, correct, bytes
//!   uploaded early, of those used by layer `l + 1`'s real ids and wasted.
//!   A guess is counted also when the bank had no free unprotected slots
//!   for its misses (then nothing was uploaded).

pub mod history;
pub mod replay;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use ggml_core::{Graph, Stream, TensorId, WaitKind};
use ggml_sched::{HookError, PrefetchCtx};

use crate::diagnostics;
use crate::expert_copy::ids;
use crate::moe_cache::cache::shared::CacheShared;
use crate::moe_cache::policy::Key;
use history::{HistoryParams, HistoryPredictor};

/// Which predictor guesses the next layer's experts (`--moe-predict`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MoePredict {
    /// No prediction (`off`, the default).
    #[default]
    Off,
    /// Through the next layer's router (`router`, or `on`).
    Router,
    /// From the routing already seen (`history`).
    History,
}

impl MoePredict {
    /// The values `--moe-predict` takes.
    pub const NAMES: [&'static str; 4] = ["off", "on", "router", "history"];

    /// The name in summaries and JSON: `off`, `router` or `history`.
    pub fn name(self) -> &'static str {
        match self {
            MoePredict::Off => "off",
            MoePredict::Router => "router",
            MoePredict::History => "history",
        }
    }

    /// Whether a predictor is on.
    pub fn is_on(self) -> bool {
        self != MoePredict::Off
    }
}

impl From<bool> for MoePredict {
    /// `true`: the router predictor (what `--moe-predict on` always meant).
    fn from(on: bool) -> Self {
        if on {
            MoePredict::Router
        } else {
            MoePredict::Off
        }
    }
}

impl std::fmt::Display for MoePredict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for MoePredict {
    type Err = String;
    /// `off`, `on` (= `router`), `router` or `history`.
    fn from_str(s: &str) -> Result<MoePredict, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "0" => Ok(MoePredict::Off),
            "on" | "1" | "router" => Ok(MoePredict::Router),
            "history" | "2" => Ok(MoePredict::History),
            _ => Err(format!(
                "'{s}' is not a predictor: give off, on (= router), router or history"
            )),
        }
    }
}

/// Counters of the decode prediction, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PredictStats {
    /// Layer accesses whose experts were predicted.
    pub layers: u64,
    /// Distinct experts the real ids of those layers named.
    pub experts_needed: u64,
    /// Distinct experts predicted for those layers.
    pub experts_predicted: u64,
    /// Of those, experts the prediction named.
    pub experts_correct: u64,
    /// Expert bytes uploaded early (predicted misses).
    pub bytes: u64,
    /// Of those, bytes of experts the layer's real ids named.
    pub bytes_used: u64,
    /// Of those, bytes of experts the layer did not use.
    pub bytes_wasted: u64,
}

impl PredictStats {
    /// `self - earlier`, field by field.
    pub fn since(&self, b: &PredictStats) -> PredictStats {
        PredictStats {
            layers: self.layers - b.layers,
            experts_needed: self.experts_needed - b.experts_needed,
            experts_predicted: self.experts_predicted - b.experts_predicted,
            experts_correct: self.experts_correct - b.experts_correct,
            bytes: self.bytes - b.bytes,
            bytes_used: self.bytes_used - b.bytes_used,
            bytes_wasted: self.bytes_wasted - b.bytes_wasted,
        }
    }

    /// Of the experts the predicted layers needed, the fraction predicted.
    pub fn recall(&self) -> Option<f64> {
        (self.experts_needed > 0).then(|| self.experts_correct as f64 / self.experts_needed as f64)
    }

    /// Of the experts predicted, the fraction the layer used.
    pub fn precision(&self) -> Option<f64> {
        (self.experts_predicted > 0)
            .then(|| self.experts_correct as f64 / self.experts_predicted as f64)
    }
}

/// A layer's prediction, waiting for its real ids.
#[derive(Clone, Debug, Default)]
struct Predicted {
    experts: Vec<u32>,
    uploaded: Vec<u32>,
    slot_bytes: u64,
}

/// The layer the cache served last in this graph.
#[derive(Clone, Debug)]
struct Served {
    layer: u32,
    /// Its distinct experts, ascending: the split about to compute reads
    /// their slots.
    distinct: Vec<u32>,
    /// Its ids, `n_used` per row.
    rows: Vec<u32>,
}

/// The prediction's state, shared by the hook and the context.
pub struct PredictShared {
    /// Counters.
    pub stats: PredictStats,
    mode: MoePredict,
    history: Option<HistoryPredictor>,
    pending: HashMap<u32, Predicted>,
    current: Option<Served>,
}

/// The name of layer `il`'s prediction node.
pub fn pred_name(il: usize) -> String {
    format!("ffn_moe_pred-{il}")
}

fn find_node(g: &Graph, name: &str) -> Option<TensorId> {
    g.nodes()
        .iter()
        .copied()
        .find(|&n| g.tensor(n).name == name)
}

impl PredictShared {
    /// The state of predictor `mode` for layers of `n_expert` experts,
    /// `n_used` per token.
    pub fn new(mode: MoePredict, n_expert: u32, n_used: u32) -> PredictShared {
        PredictShared {
            stats: PredictStats::default(),
            mode,
            history: (mode == MoePredict::History)
                .then(|| HistoryPredictor::new(n_expert, n_used, HistoryParams::default())),
            pending: HashMap::new(),
            current: None,
        }
    }

    /// A copy of the counters now.
    pub fn counters(&self) -> PredictStats {
        self.stats
    }

    /// The predictor.
    pub fn mode(&self) -> MoePredict {
        self.mode
    }

    /// The cache served `layer` with `experts` (its ids, `n_used` per row):
    /// count the layer's prediction, if there was one, let the history
    /// predictor see the ids, and remember the layer as the one being
    /// computed.
    pub fn served(&mut self, layer: u32, experts: &[u32]) {
        let mut need: Vec<u32> = experts.to_vec();
        need.sort_unstable();
        need.dedup();
        if let Some(h) = self.history.as_mut() {
            let prev = self.current.as_ref().map(|c| (c.layer, c.rows.as_slice()));
            h.observe(layer, prev, experts);
        }
        if let Some(p) = self.pending.remove(&layer) {
            let s = &mut self.stats;
            s.layers += 1;
            s.experts_needed += need.len() as u64;
            s.experts_predicted += p.experts.len() as u64;
            s.experts_correct += p
                .experts
                .iter()
                .filter(|e| need.binary_search(e).is_ok())
                .count() as u64;
            for e in &p.uploaded {
                if need.binary_search(e).is_ok() {
                    s.bytes_used += p.slot_bytes;
                } else {
                    s.bytes_wasted += p.slot_bytes;
                }
            }
        }
        self.current = Some(Served {
            layer,
            distinct: need,
            rows: experts.to_vec(),
        });
    }

    /// Forget predictions whose layer never came (a failed graph).
    pub fn begin_graph(&mut self) {
        for (_, p) in self.pending.drain() {
            self.stats.bytes_wasted += p.uploaded.len() as u64 * p.slot_bytes;
        }
        self.current = None;
    }

    /// The look-ahead offers a host weight: when it is a cached layer's
    /// slot map and the graph predicts that layer, upload the predicted
    /// misses on the copy stream. Always declines (the map is served when
    /// its split comes).
    pub fn offer(
        &mut self,
        cache: &Arc<Mutex<CacheShared>>,
        cx: &mut PrefetchCtx<'_>,
    ) -> Result<bool, HookError> {
        let g = cx.graph();
        // only for the next split: the prediction is computed with the
        // router of the layer the current split computes, which the cache's
        // read of its ids already waited for
        if cx.split_index() != cx.current_split() + 1 {
            return Ok(false);
        }
        let Some(d) = g.data_of(cx.src()) else {
            return Ok(false);
        };
        let mut cache = cache.lock();
        if !std::ptr::addr_eq(
            Arc::as_ptr(&d.buffer),
            Arc::as_ptr(&cache.layout.map_buffer),
        ) {
            return Ok(false);
        }
        let Some(lc) = cache
            .layout
            .layers
            .iter()
            .flatten()
            .find(|l| l.map.offset == d.offset)
            .cloned()
        else {
            return Ok(false);
        };
        let layer = lc.layer;
        if self.pending.contains_key(&layer) {
            return Ok(false);
        }
        // the guess, and the least score of an expert worth uploading
        let (experts, scores, min_score): (Vec<u32>, Vec<f32>, f32) = match self.mode {
            MoePredict::Off => return Ok(false),
            MoePredict::Router => {
                let Some(pred) = find_node(g, &pred_name(layer as usize)) else {
                    return Ok(false);
                };
                if cx.nodes().contains(&pred) || self.current.is_none() {
                    return Ok(false);
                }
                let e = read_router_guess(cx, pred, layer, lc.n_expert)?;
                let n = e.len();
                (e, vec![1.0; n], 0.0)
            }
            MoePredict::History => {
                let Some(h) = self.history.as_ref() else {
                    return Ok(false);
                };
                let prev = self.current.as_ref().map(|c| (c.layer, c.rows.as_slice()));
                let scored = h.predict_scored(layer, prev, cache.n_tokens() as usize);
                let (e, s) = scored.into_iter().unzip();
                (e, s, h.params().min_upload_score)
            }
        };
        if experts.is_empty() {
            return Ok(false);
        }
        let Some(bank) = cache.banks.get_mut(lc.group).and_then(|b| b.as_mut()) else {
            return Ok(false);
        };
        // the split about to compute reads the current layer's slots; the
        // guessed experts already in the cache stay (and are not touched:
        // the policy sees only real accesses and early uploads)
        let mut protect: Vec<Key> = match &self.current {
            Some(c) => c.distinct.iter().map(|&e| Key::new(c.layer, e)).collect(),
            None => Vec::new(),
        };
        let mut upload: Vec<u32> = Vec::new();
        for (&e, &sc) in experts.iter().zip(&scores) {
            if bank.is_resident(layer, e) {
                protect.push(Key::new(layer, e));
            } else if sc >= min_score {
                upload.push(e);
            }
        }
        let slot_bytes: u64 = lc.expert_bytes.iter().map(|&b| b as u64).sum();
        let acc =
            match (!upload.is_empty()).then(|| bank.access_protecting(layer, &upload, &protect)) {
                Some(Ok(a)) => a,
                // nothing worth uploading, or not enough unprotected slots:
                // upload nothing this time (the guess is still counted)
                _ => {
                    self.pending.insert(
                        layer,
                        Predicted {
                            experts,
                            uploaded: Vec::new(),
                            slot_bytes,
                        },
                    );
                    return Ok(false);
                }
            };
        let be = cx.backend();
        let stream = if cx.stream() == Stream::Compute {
            Stream::Compute
        } else {
            cx.stream()
        };
        if self.mode == MoePredict::History && stream != Stream::Compute && !acc.misses.is_empty() {
            // an evicted slot may belong to a layer an earlier split reads:
            // the uploads wait for the compute queued so far (the router's
            // guess was read after it, on the readback stream, and the
            // host waited for that read: the `readback` class; this guess
            // read nothing). Implied today by the cache's read of the
            // current layer's ids in the same split's copies, so free in
            // practice. This is a slot-reuse wait: the `slot` planted bug
            // drops it.
            let ev = be.record_event_on(Stream::Compute)?;
            be.wait_event_for(stream, &ev, WaitKind::Slot)?;
        }
        let upload = || -> Result<(), HookError> {
            for run in crate::moe_cache::cache::bank::upload_runs(&acc.misses) {
                for r in 0..3 {
                    let eb = lc.expert_bytes[r];
                    let len = run.n as usize * eb;
                    let h = &lc.host[r];
                    let off = h.offset + run.expert as usize * eb;
                    diagnostics::label(be, &format!("predict layer {layer} role {r}"));
                    match h.buffer.base_ptr() {
                        Some(p) => {
                            ggml_core::backend::check_range(
                                h.buffer.name(),
                                h.buffer.size(),
                                off,
                                len,
                            )?;
                            // SAFETY: the range was checked against the host
                            // expert buffer, which the model keeps alive
                            // past the graph's final synchronize; host
                            // weights are never written.
                            let s = unsafe { std::slice::from_raw_parts(p.add(off), len) };
                            be.write_on(stream, &lc.banks[r].0, run.slot as usize * eb, s)?;
                        }
                        None => {
                            let mut tmp = vec![0u8; len];
                            h.buffer.read(off, &mut tmp)?;
                            // a synchronous write: `tmp` does not outlive it
                            let b = &lc.banks[r].0;
                            b.buffer.write(b.offset + run.slot as usize * eb, &tmp)?;
                        }
                    }
                }
            }
            Ok(())
        };
        if let Err(e) = upload() {
            cache.reset_group(lc.group);
            return Err(e);
        }
        let uploaded: Vec<u32> = acc.misses.iter().map(|&(e, _)| e).collect();
        self.stats.bytes += uploaded.len() as u64 * slot_bytes;
        self.pending.insert(
            layer,
            Predicted {
                experts,
                uploaded,
                slot_bytes,
            },
        );
        Ok(false)
    }
}

/// Read the router predictor's guess, node `pred` (`ffn_moe_pred-{layer}`),
/// after the compute queued so far, on the readback stream (an id read):
/// distinct experts, ascending; an id out of `0..n_expert` is an error.
fn read_router_guess(
    cx: &mut PrefetchCtx<'_>,
    pred: TensorId,
    layer: u32,
    n_expert: u32,
) -> Result<Vec<u32>, HookError> {
    let g = cx.graph();
    let len = g.tensor(pred).nbytes();
    let pd = g
        .data_of(pred)
        .ok_or_else(|| HookError::msg(format!("'{}' has no memory", pred_name(layer as usize))))?;
    // with several devices, a guess computed on another device than the one
    // whose cache it fills is skipped (no guess)
    if !cx.backend().can_use_buffer(pd.buffer.as_ref()) {
        return Ok(Vec::new());
    }
    let mut raw = vec![0u8; len];
    cx.backend().read_after_compute(&pd, 0, &mut raw)?;
    diagnostics::count_id_read(cx.backend());
    let what = pred_name(layer as usize);
    let mut experts: Vec<u32> = Vec::with_capacity(raw.len() / 4);
    for (i, id) in ids::decode_i32(&raw).into_iter().enumerate() {
        let e = ids::expert_index(id, i, n_expert as usize, &what).map_err(HookError::msg)?;
        experts.push(e as u32);
    }
    experts.sort_unstable();
    experts.dedup();
    Ok(experts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predictors_parse_by_name_and_on_means_router() {
        assert_eq!("on".parse::<MoePredict>(), Ok(MoePredict::Router));
        assert_eq!("router".parse::<MoePredict>(), Ok(MoePredict::Router));
        assert_eq!("History".parse::<MoePredict>(), Ok(MoePredict::History));
        assert_eq!("off".parse::<MoePredict>(), Ok(MoePredict::Off));
        let e = "sometimes".parse::<MoePredict>().unwrap_err();
        assert!(e.contains("'sometimes'") && e.contains("history"), "{e}");
        for n in MoePredict::NAMES {
            assert!(n.parse::<MoePredict>().is_ok(), "{n}");
        }
        assert_eq!(MoePredict::from(true), MoePredict::Router);
        assert_eq!(MoePredict::History.to_string(), "history");
        let s = PredictStats {
            experts_needed: 10,
            experts_predicted: 8,
            experts_correct: 6,
            ..PredictStats::default()
        };
        assert_eq!(s.recall(), Some(0.6));
        assert_eq!(s.precision(), Some(0.75));
        assert_eq!(PredictStats::default().precision(), None);
    }
}
