//! `--prefetch-experts-slots -1` (auto): per layer and ubatch, whether a
//! host expert tensor is prefetched whole or not at all.
//!
//! Without prefetch, a split copies only the experts its ubatch's ids name
//! (the selective copy, [`crate::expert_copy`]), on the critical path:
//! `u * B / link_bw` for a tensor of `B` bytes of which the fraction `u` is
//! used. Whole-tensor prefetch moves all `B` bytes, but on the copy stream
//! while earlier splits compute, so only what the compute does not hide
//! stays on the critical path: `max(0, B / link_bw - hidden)`. The tensor
//! is prefetched when that is shorter ([`whole_pays`]).
//!
//! `u` is the fraction measured on the last earlier ubatch of the same
//! tensor (same layer and role): the bytes its selective copy moved, or,
//! when it was prefetched, the bytes of the experts its ids named. A tensor
//! with no history (the first ubatch) uses the mean of what was measured on
//! the other tensors so far; with nothing measured yet it is not prefetched
//! (the look-ahead offers it again before each later split, so a layer
//! later in the same ubatch can already use what earlier layers measured).
//! `hidden` is the device's time for the role's expert matmul over the
//! ubatch (its routed tokens' FLOPs, or the used bytes at device memory
//! bandwidth), a conservative share of the compute the copy overlaps.
//!
//! Auto never moves more bytes than whole-tensor prefetch: it moves each
//! tensor either whole or not at all.

use std::collections::HashMap;

use super::cost::CostModel;

/// Whether prefetching a whole tensor of `tensor_bytes` beats its
/// selective copy when the fraction `use_frac` of it is used and the
/// compute before its consumer hides `hidden_s` seconds of link time
/// (a tie goes to the prefetch).
pub fn whole_pays(cost: &CostModel, tensor_bytes: f64, use_frac: f64, hidden_s: f64) -> bool {
    let u = use_frac.clamp(0.0, 1.0);
    let whole_s = cost.link_latency_s + tensor_bytes / cost.link_bw;
    let exposed = (whole_s - hidden_s.max(0.0)).max(0.0);
    let selective_s = cost.link_latency_s + u * tensor_bytes / cost.link_bw;
    exposed <= selective_s
}

/// The decision state of auto prefetch.
#[derive(Debug)]
pub struct AutoPlan {
    /// Link and device rates.
    pub cost: CostModel,
    /// Experts used per token.
    pub n_used: usize,
    /// Tokens of the current ubatch.
    n_tokens: usize,
    /// Last measured use fraction per tensor name.
    use_frac: HashMap<String, f64>,
    /// This ubatch's decisions per tensor name (`true`: whole).
    decided: HashMap<String, bool>,
}

/// Counters of auto's decisions, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutoCounts {
    /// Tensors (per ubatch) prefetched whole.
    pub whole: u64,
    /// Tensors (per ubatch) left to the selective copy.
    pub none: u64,
}

impl AutoPlan {
    /// A plan with no history.
    pub fn new(cost: CostModel, n_used: usize) -> AutoPlan {
        AutoPlan {
            cost,
            n_used: n_used.max(1),
            n_tokens: 0,
            use_frac: HashMap::new(),
            decided: HashMap::new(),
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

    /// Decide tensor `name` (`tensor_bytes` bytes, `n_expert` experts of
    /// `ne0 x ne1` weights) for this ubatch: `Some(true)` prefetch whole,
    /// `Some(false)` not, `None` not yet known (ask again later). A
    /// decision made holds for the rest of the ubatch; `counts` counts it
    /// once.
    pub fn decide(
        &mut self,
        name: &str,
        tensor_bytes: usize,
        n_expert: usize,
        ne01: [i64; 2],
        counts: &mut AutoCounts,
    ) -> Option<bool> {
        if let Some(&d) = self.decided.get(name) {
            return Some(d);
        }
        let u = self.estimate(name)?;
        let n_expert = n_expert.max(1) as f64;
        let routed = (self.n_tokens * self.n_used) as f64;
        let flops = 2.0 * ne01[0] as f64 * ne01[1] as f64 * routed;
        let used_bytes = u * tensor_bytes as f64;
        let hidden = (flops / self.cost.device_flops).max(used_bytes / self.cost.device_bw)
            + self.cost.device_launch_s;
        // a tensor whose experts the ubatch cannot all use (fewer routed
        // tokens than experts) is never fully used
        let u = u.min(routed / n_expert);
        let d = whole_pays(&self.cost, tensor_bytes as f64, u, hidden);
        self.decided.insert(name.to_string(), d);
        if d {
            counts.whole += 1;
        } else {
            counts.none += 1;
        }
        Some(d)
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
    fn a_tensor_without_history_uses_the_others_or_waits() {
        let mut p = AutoPlan::new(cost(), 8);
        let mut n = AutoCounts::default();
        p.begin_ubatch(512);
        let ne = [2048, 768];
        assert_eq!(
            p.decide("blk.1.ffn_up_exps.weight", 88_000_000, 128, ne, &mut n),
            None
        );
        p.observe("blk.0.ffn_up_exps.weight", 1.0);
        assert_eq!(
            p.decide("blk.1.ffn_up_exps.weight", 88_000_000, 128, ne, &mut n),
            Some(true)
        );
        // decided once per ubatch
        p.observe("blk.1.ffn_up_exps.weight", 0.3);
        assert_eq!(
            p.decide("blk.1.ffn_up_exps.weight", 88_000_000, 128, ne, &mut n),
            Some(true)
        );
        assert_eq!(n, AutoCounts { whole: 1, none: 0 });
        // the next ubatch uses the tensor's own measurement
        p.begin_ubatch(512);
        assert_eq!(
            p.decide("blk.1.ffn_up_exps.weight", 88_000_000, 128, ne, &mut n),
            Some(false)
        );
        assert_eq!(n, AutoCounts { whole: 1, none: 1 });
    }
}
