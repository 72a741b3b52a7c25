//! `--prefetch-experts-slots -1` (auto): per layer and ubatch, each host
//! expert tensor is not prefetched, prefetched whole, or prefetched
//! selectively (the experts predicted for the layer).
//!
//! Without prefetch, a split copies only the experts its ubatch's ids name
//! (the selective copy, [`crate::expert_copy`]), on the critical path:
//! `u * B / link_bw` for a tensor of `B` bytes of which the fraction `u` is
//! used. Whole-tensor prefetch moves all `B` bytes, but on the copy stream
//! while earlier splits compute, so only what the compute does not hide
//! stays on the critical path: `max(0, B / link_bw - hidden)`.
//!
//! The selective prefetch stages only the experts predicted for the layer
//! from the previous layer's hidden state through the layer's router (the
//! union of each token's top-k, [`super`]), `S` bytes, early; when
//! the layer's split comes, the experts the real ids name and the guess
//! missed are copied on the critical path: `max(0, S / link_bw - hidden) +
//! (1 - r) * u * B / link_bw`, with `r` the prediction's recall (the
//! fraction of the needed experts it named) measured on earlier ubatches of
//! the layer ([`PredictionCounts`]). A layer with no recall measured yet is
//! not prefetched selectively. Auto takes the selective prefetch only when
//! the model puts it at most [`SELECTIVE_MARGIN`] of the better of the
//! other two (the cost model is approximate; the other two are the proven
//! choices), else the shorter of whole and none ([`choose`]).
//!
//! `u` is the fraction measured on the last earlier ubatch of the same
//! tensor (same layer and role): the bytes its selective copy moved, or,
//! when it was prefetched, the bytes of the experts its ids named. A tensor
//! with no history (the first ubatch) uses the mean of what was measured on
//! the other tensors so far; with nothing measured yet it is not prefetched
//! (the look-ahead offers it again before each later split, so a layer
//! later in the same ubatch can already use what earlier layers measured).
//! `hidden` is the device's compute time per expert tensor of the ubatch:
//! measured on the previous prompt ubatch where the device has a clock to
//! read (the sim device: its busy time over the ubatch, per expert tensor
//! the ubatch read, per token, times this ubatch's tokens,
//! [`AutoPlan::observe_device_time`]), and never less than the device's
//! time for the role's expert matmul over the ubatch (its routed tokens'
//! FLOPs, or the used bytes at device memory bandwidth), which is all it
//! is before anything was measured.
//!
//! Auto never moves more bytes than whole-tensor prefetch: a tensor moves
//! whole, not at all, or as the byte ranges of the predicted experts and
//! then of the needed experts not yet staged (never a byte twice, so at
//! most the tensor's bytes).

use std::collections::HashMap;

use crate::moe_cache::cost::CostModel;

/// Auto takes the selective prefetch only when its modelled time is at
/// most this fraction of the better of whole and none.
pub const SELECTIVE_MARGIN: f64 = 0.9;

/// One of auto's three choices for a tensor and ubatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Left to the selective copy at its split.
    None,
    /// Prefetched whole.
    Whole,
    /// The predicted experts prefetched, the missed ones copied at the
    /// split.
    Selective,
}

impl std::str::FromStr for Choice {
    type Err = String;
    fn from_str(s: &str) -> Result<Choice, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" | "off" => Ok(Choice::None),
            "whole" => Ok(Choice::Whole),
            "selective" => Ok(Choice::Selective),
            _ => Err(format!(
                "'{s}' is not a prefetch choice: give none, whole or selective"
            )),
        }
    }
}

/// The modelled critical-path seconds of each choice for one tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChoiceCosts {
    /// No prefetch: the selective copy of the used fraction.
    pub none_s: f64,
    /// Whole-tensor prefetch: what the compute does not hide.
    pub whole_s: f64,
    /// Selective prefetch, when it is a candidate.
    pub selective_s: Option<f64>,
}

/// The choice the costs give: selective when at most [`SELECTIVE_MARGIN`]
/// of the better other one, else whole when not longer than none (a tie
/// goes to the prefetch), else none.
pub fn choose(c: &ChoiceCosts) -> Choice {
    let best_other = c.whole_s.min(c.none_s);
    if let Some(s) = c.selective_s {
        if s <= SELECTIVE_MARGIN * best_other {
            return Choice::Selective;
        }
    }
    if c.whole_s <= c.none_s {
        Choice::Whole
    } else {
        Choice::None
    }
}

/// Whether prefetching a whole tensor of `tensor_bytes` beats its
/// selective copy when the fraction `use_frac` of it is used and the
/// compute before its consumer hides `hidden_s` seconds of link time
/// (a tie goes to the prefetch).
pub fn whole_pays(cost: &CostModel, tensor_bytes: f64, use_frac: f64, hidden_s: f64) -> bool {
    let c = costs(cost, tensor_bytes, use_frac, hidden_s, None);
    c.whole_s <= c.none_s
}

/// The modelled costs of a tensor of `tensor_bytes` of which `use_frac`
/// is used, with `hidden_s` of compute before its consumer, and, for the
/// selective prefetch, `(staged bytes, recall)` of the prediction.
pub fn costs(
    cost: &CostModel,
    tensor_bytes: f64,
    use_frac: f64,
    hidden_s: f64,
    selective: Option<(f64, f64)>,
) -> ChoiceCosts {
    let u = use_frac.clamp(0.0, 1.0);
    let hidden = hidden_s.max(0.0);
    let lat = cost.link_latency_s;
    let whole_s = (lat + tensor_bytes / cost.link_bw - hidden).max(0.0);
    let none_s = lat + u * tensor_bytes / cost.link_bw;
    let selective_s = selective.map(|(staged, recall)| {
        let r = recall.clamp(0.0, 1.0);
        let early = (lat + staged.max(0.0) / cost.link_bw - hidden).max(0.0);
        early + lat + (1.0 - r) * u * tensor_bytes / cost.link_bw
    });
    ChoiceCosts {
        none_s,
        whole_s,
        selective_s,
    }
}

/// A layer's prediction counts on earlier ubatches, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PredictionCounts {
    /// Distinct experts the layer's ubatches needed.
    pub needed: u64,
    /// Distinct experts predicted for them.
    pub predicted: u64,
    /// Of those, experts needed.
    pub correct: u64,
}

impl PredictionCounts {
    /// Of the needed experts, the fraction predicted.
    pub fn recall(&self) -> Option<f64> {
        (self.needed > 0).then(|| self.correct as f64 / self.needed as f64)
    }

    /// Of the predicted experts, the fraction needed.
    pub fn precision(&self) -> Option<f64> {
        (self.predicted > 0).then(|| self.correct as f64 / self.predicted as f64)
    }
}

/// What auto knows of a layer's prediction when it decides a tensor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Prediction {
    /// The graph predicts nothing for the layer (its first MoE layer).
    Absent,
    /// Predicted by a split not queued yet.
    Pending,
    /// Read: the bytes staging the predicted experts would copy.
    Ready {
        /// Bytes of the predicted experts' ranges.
        staged_bytes: usize,
    },
}

/// The decision state of auto prefetch.
#[derive(Debug)]
pub struct AutoPlan {
    /// Link and device rates.
    pub cost: CostModel,
    /// Experts used per token.
    pub n_used: usize,
    /// Take this choice wherever it is possible instead of the costs'
    /// (tests and measurements; selective falls back to whole where the
    /// layer has no prediction).
    pub force: Option<Choice>,
    /// Whether the selective prefetch may be chosen by the costs.
    pub selective: bool,
    /// Tokens of the current ubatch.
    n_tokens: usize,
    /// Last measured use fraction per tensor name.
    use_frac: HashMap<String, f64>,
    /// This ubatch's decisions per tensor name.
    decided: HashMap<String, Choice>,
    /// Prediction counts per layer, over earlier ubatches.
    pred: HashMap<u32, PredictionCounts>,
    /// Device compute seconds per expert tensor and token, measured on the
    /// last prompt ubatch.
    hidden_per_token_s: Option<f64>,
}

/// Counters of auto's decisions, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutoCounts {
    /// Tensors (per ubatch) prefetched whole.
    pub whole: u64,
    /// Tensors (per ubatch) left to the selective copy.
    pub none: u64,
    /// Tensors (per ubatch) prefetched selectively.
    pub selective: u64,
}

impl AutoPlan {
    /// A plan with no history.
    pub fn new(cost: CostModel, n_used: usize) -> AutoPlan {
        AutoPlan {
            cost,
            n_used: n_used.max(1),
            force: None,
            selective: true,
            n_tokens: 0,
            use_frac: HashMap::new(),
            decided: HashMap::new(),
            pred: HashMap::new(),
            hidden_per_token_s: None,
        }
    }

    /// The device computed for `busy_s` seconds during a ubatch of
    /// `n_tokens` tokens that read `n_tensors` expert tensors.
    pub fn observe_device_time(&mut self, busy_s: f64, n_tensors: usize, n_tokens: usize) {
        if n_tensors > 0 && n_tokens > 0 && busy_s.is_finite() && busy_s > 0.0 {
            self.hidden_per_token_s = Some(busy_s / (n_tensors * n_tokens) as f64);
        }
    }

    /// A ubatch of `n_tokens` begins: this ubatch's decisions are cleared.
    pub fn begin_ubatch(&mut self, n_tokens: usize) {
        self.n_tokens = n_tokens;
        self.decided.clear();
    }

    /// Record the use fraction measured for tensor `name` this ubatch.
    pub fn observe(&mut self, name: &str, frac: f64) {
        if frac.is_finite() {
            self.use_frac.insert(name.to_string(), frac.clamp(0.0, 1.0));
        }
    }

    /// Record how layer `layer`'s prediction did this ubatch.
    pub fn observe_prediction(&mut self, layer: u32, c: PredictionCounts) {
        let p = self.pred.entry(layer).or_default();
        p.needed += c.needed;
        p.predicted += c.predicted;
        p.correct += c.correct;
    }

    /// Layer `layer`'s prediction counts so far.
    pub fn prediction_counts(&self, layer: u32) -> PredictionCounts {
        self.pred.get(&layer).copied().unwrap_or_default()
    }

    /// The use fraction to decide `name` with: its own last one, else the
    /// mean of all measured so far, else `None`.
    pub fn estimate(&self, name: &str) -> Option<f64> {
        if let Some(&u) = self.use_frac.get(name) {
            return Some(u);
        }
        if self.use_frac.is_empty() {
            return None;
        }
        Some(self.use_frac.values().sum::<f64>() / self.use_frac.len() as f64)
    }

    /// This ubatch's decision for `name`, if made.
    pub fn decided(&self, name: &str) -> Option<Choice> {
        self.decided.get(name).copied()
    }

    /// Decide tensor `name` of layer `layer` (`tensor_bytes` bytes,
    /// `n_expert` experts of `ne0 x ne1` weights) for this ubatch, knowing
    /// `pred` of the layer's prediction: the choice, or `None` when not
    /// yet known (ask again later). A decision made holds for the rest of
    /// the ubatch; `counts` counts it once.
    #[allow(clippy::too_many_arguments)]
    pub fn decide(
        &mut self,
        name: &str,
        layer: u32,
        tensor_bytes: usize,
        n_expert: usize,
        ne01: [i64; 2],
        pred: Prediction,
        counts: &mut AutoCounts,
    ) -> Option<Choice> {
        if let Some(&d) = self.decided.get(name) {
            return Some(d);
        }
        let d = match self.force {
            Some(Choice::Selective) => match pred {
                Prediction::Pending => return None,
                Prediction::Absent => Choice::Whole,
                Prediction::Ready { .. } => Choice::Selective,
            },
            Some(c) => c,
            None => self.by_cost(name, layer, tensor_bytes, n_expert, ne01, pred)?,
        };
        self.decided.insert(name.to_string(), d);
        match d {
            Choice::Whole => counts.whole += 1,
            Choice::None => counts.none += 1,
            Choice::Selective => counts.selective += 1,
        }
        Some(d)
    }

    fn by_cost(
        &self,
        name: &str,
        layer: u32,
        tensor_bytes: usize,
        n_expert: usize,
        ne01: [i64; 2],
        pred: Prediction,
    ) -> Option<Choice> {
        let u = self.estimate(name)?;
        let n_expert = n_expert.max(1) as f64;
        let routed = (self.n_tokens * self.n_used) as f64;
        let flops = 2.0 * ne01[0] as f64 * ne01[1] as f64 * routed;
        let used_bytes = u * tensor_bytes as f64;
        let modelled = (flops / self.cost.device_flops).max(used_bytes / self.cost.device_bw)
            + self.cost.device_launch_s;
        let measured = self.hidden_per_token_s.unwrap_or(0.0) * self.n_tokens as f64;
        let hidden = modelled.max(measured);
        // a tensor whose experts the ubatch cannot all use (fewer routed
        // tokens than experts) is never fully used
        let u = u.min(routed / n_expert);
        let b = tensor_bytes as f64;
        let counts = self.prediction_counts(layer);
        let recall = counts.recall().filter(|_| self.selective);
        let selective = match (pred, recall) {
            (Prediction::Ready { staged_bytes }, Some(r)) => Some((staged_bytes as f64, r)),
            // not read yet: wait for it when, staging as much as the layer's
            // guesses did on average, it could be the choice
            (Prediction::Pending, Some(r)) => {
                let q = counts.predicted as f64 / counts.needed.max(1) as f64;
                let guess = (q * u * b).min(b);
                let c = costs(&self.cost, b, u, hidden, Some((guess, r)));
                if choose(&c) == Choice::Selective {
                    return None;
                }
                None
            }
            _ => None,
        };
        Some(choose(&costs(&self.cost, b, u, hidden, selective)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost() -> CostModel {
        CostModel::default()
    }

    #[test]
    fn whole_pays_only_when_the_unused_part_hides_behind_compute() {
        let c = cost();
        let b = 88e6; // one role of a 128-expert Q4_K layer
        let link = b / c.link_bw;
        // fully used: whole is never worse
        assert!(whole_pays(&c, b, 1.0, 0.0));
        assert!(whole_pays(&c, b, 1.0, link * 0.05));
        // half used, little compute: the selective copy wins
        assert!(!whole_pays(&c, b, 0.5, link * 0.05));
        // half used, compute hiding most of the link: whole wins
        assert!(whole_pays(&c, b, 0.5, link * 0.8));
    }

    #[test]
    fn selective_only_when_the_guess_is_good_and_its_bytes_hide() {
        let c = cost();
        let b = 88e6;
        let link = b / c.link_bw;
        // half used, a guess of that half with recall 0.95, compute hiding
        // half the link: the guess hides, the misses are few
        let good = costs(&c, b, 0.5, link * 0.5, Some((0.5 * b, 0.95)));
        assert_eq!(choose(&good), Choice::Selective, "{good:?}");
        // a chance-level guess (recall = its share of the experts) adds
        // the misses to what it staged: never worth it when the link is
        // the bottleneck
        let chance = costs(&c, b, 0.5, link * 0.05, Some((0.5 * b, 0.5)));
        assert_ne!(choose(&chance), Choice::Selective, "{chance:?}");
        // no hidden time at all: the selective copy alone is best
        let none = costs(&c, b, 0.5, 0.0, Some((0.5 * b, 0.9)));
        assert_eq!(choose(&none), Choice::None, "{none:?}");
        // a fully used tensor with plenty of compute: whole
        let whole = costs(&c, b, 1.0, link * 2.0, Some((0.9 * b, 0.9)));
        assert_eq!(choose(&whole), Choice::Whole, "{whole:?}");
        let counts = PredictionCounts {
            needed: 10,
            predicted: 8,
            correct: 6,
        };
        assert_eq!(counts.recall(), Some(0.6));
        assert_eq!(counts.precision(), Some(0.75));
    }

    #[test]
    fn a_tensor_without_history_uses_the_others_or_waits() {
        let mut p = AutoPlan::new(cost(), 8);
        let mut n = AutoCounts::default();
        p.begin_ubatch(512);
        let ne = [2048, 768];
        let up1 = "blk.1.ffn_up_exps.weight";
        let abs = Prediction::Absent;
        assert_eq!(p.decide(up1, 1, 88_000_000, 128, ne, abs, &mut n), None);
        p.observe("blk.0.ffn_up_exps.weight", 1.0);
        assert_eq!(
            p.decide(up1, 1, 88_000_000, 128, ne, abs, &mut n),
            Some(Choice::Whole)
        );
        // decided once per ubatch
        p.observe(up1, 0.3);
        assert_eq!(
            p.decide(up1, 1, 88_000_000, 128, ne, abs, &mut n),
            Some(Choice::Whole)
        );
        assert_eq!(
            n,
            AutoCounts {
                whole: 1,
                none: 0,
                selective: 0
            }
        );
        // the next ubatch uses the tensor's own measurement
        p.begin_ubatch(512);
        assert_eq!(
            p.decide(up1, 1, 88_000_000, 128, ne, abs, &mut n),
            Some(Choice::None)
        );
        assert_eq!(n.none, 1);
    }

    #[test]
    fn measured_device_time_hides_more_than_the_expert_matmul() {
        // a half-used tensor: with only the matmul's time hidden the
        // selective copy wins; once the device is measured busy for longer
        // than the link needs per tensor, whole does
        let mut p = AutoPlan::new(cost(), 8);
        p.selective = false;
        let mut n = AutoCounts::default();
        let t = "blk.1.ffn_up_exps.weight";
        let (b, ne) = (88_000_000usize, [2048, 768]);
        p.observe(t, 0.5);
        p.begin_ubatch(512);
        let abs = Prediction::Absent;
        assert_eq!(p.decide(t, 1, b, 128, ne, abs, &mut n), Some(Choice::None));
        let link = b as f64 / p.cost.link_bw;
        // 12 tensors, each ubatch's device time 1.5 link times per tensor
        p.observe_device_time(12.0 * 1.5 * link, 12, 512);
        p.begin_ubatch(512);
        assert_eq!(p.decide(t, 1, b, 128, ne, abs, &mut n), Some(Choice::Whole));
        // a short ubatch hides proportionally less
        p.begin_ubatch(16);
        assert_eq!(p.decide(t, 1, b, 128, ne, abs, &mut n), Some(Choice::None));
    }

    #[test]
    fn forcing_selective_waits_for_the_guess_and_needs_one() {
        let mut p = AutoPlan::new(cost(), 8);
        p.force = Some(Choice::Selective);
        let mut n = AutoCounts::default();
        p.begin_ubatch(512);
        let ne = [2048, 768];
        let t = "blk.1.ffn_up_exps.weight";
        assert_eq!(
            p.decide(t, 1, 1000, 128, ne, Prediction::Pending, &mut n),
            None
        );
        let ready = Prediction::Ready { staged_bytes: 500 };
        assert_eq!(
            p.decide(t, 1, 1000, 128, ne, ready, &mut n),
            Some(Choice::Selective)
        );
        let t0 = "blk.0.ffn_up_exps.weight";
        assert_eq!(
            p.decide(t0, 0, 1000, 128, ne, Prediction::Absent, &mut n),
            Some(Choice::Whole)
        );
        assert_eq!((n.selective, n.whole), (1, 1));
        assert_eq!("Selective".parse::<Choice>(), Ok(Choice::Selective));
        assert!("some".parse::<Choice>().unwrap_err().contains("'some'"));
    }
}
