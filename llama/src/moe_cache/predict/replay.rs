//! A routing trace replayed with the history prediction
//! ([`super::history`]) in front of the cache, in the order the
//! decode hook ([`super`]) follows: before each layer access, the
//! layer's experts are predicted (from the ubatch's layer just before, or
//! from recency alone for the ubatch's first layer); the predicted misses
//! scoring at least the upload threshold are given slots, never evicting
//! the layer just served nor the predicted experts already resident (which
//! the policy does not see touched); then the layer's real ids are served
//! (uploaded guesses are hits now) and observed.
//!
//! Without a bank ([`replay_predicted`] with `cache: None`) only the
//! predictor runs: recall and precision of the guesses.

use std::collections::BTreeSet;

use super::history::{score, HistoryParams, HistoryPredictor};
use crate::moe_cache::cache::bank::{BankError, SlotBank};
use crate::moe_cache::cache::replay::{count_access, TraceUbatch};
use crate::moe_cache::cache::stats::LayerCacheStats;
use crate::moe_cache::policy::{Key, Policy};

/// What a replay with prediction counted. Byte counters count one byte per
/// expert (multiply by a slot's bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PredictReplay {
    /// Layer accesses that had a prediction.
    pub layers: u64,
    /// Distinct experts those accesses used.
    pub needed: u64,
    /// Distinct experts predicted for them.
    pub predicted: u64,
    /// Experts both predicted and used.
    pub correct: u64,
    /// Experts uploaded early (predicted misses).
    pub uploaded: u64,
    /// Of those, uploads in decode (one-token) ubatches.
    pub uploaded_decode: u64,
    /// Of those, experts the layer then used.
    pub used: u64,
    /// The cache's counts with the prediction (its misses are the uploads
    /// left on the critical path).
    pub cache: LayerCacheStats,
}

impl PredictReplay {
    /// `correct / needed`.
    pub fn recall(&self) -> f64 {
        self.correct as f64 / self.needed.max(1) as f64
    }

    /// `correct / predicted`.
    pub fn precision(&self) -> f64 {
        self.correct as f64 / self.predicted.max(1) as f64
    }

    /// Add another group's counts.
    pub fn add(&mut self, o: &PredictReplay) {
        self.layers += o.layers;
        self.needed += o.needed;
        self.predicted += o.predicted;
        self.correct += o.correct;
        self.uploaded += o.uploaded;
        self.uploaded_decode += o.uploaded_decode;
        self.used += o.used;
        self.cache.add(&o.cache);
    }
}

/// Replay `trace` (restricted to `layers`, `n_used` ids per row) with the
/// history predictor of `params`, and, when `cache` gives a slot count and
/// a policy, through a bank of `layers` of `n_expert` experts.
pub fn replay_predicted(
    layers: &[u32],
    n_expert: u32,
    n_used: u32,
    params: HistoryParams,
    cache: Option<(u32, Box<dyn Policy>)>,
    trace: &[TraceUbatch],
) -> Result<PredictReplay, BankError> {
    let mut pred = HistoryPredictor::new(n_expert, n_used, params);
    let mut bank = cache.map(|(n, p)| SlotBank::new(layers, n_expert, n, p));
    let mut out = PredictReplay::default();
    for ub in trace {
        if let Some(b) = bank.as_mut() {
            b.begin_ubatch(ub.n_tokens);
        }
        let steps: Vec<&(u32, Vec<u32>)> = ub
            .layers
            .iter()
            .filter(|(l, _)| layers.contains(l))
            .collect();
        let rows = ub.n_tokens as usize;
        let mut prev: Option<(u32, &[u32])> = None;
        for (l, ids) in steps.iter().map(|s| (s.0, &s.1)) {
            // predicted while the layer before computes
            let scored = pred.predict_scored(l, prev, rows);
            let guess: Vec<u32> = scored.iter().map(|&(e, _)| e).collect();
            let mut uploaded: Vec<u32> = Vec::new();
            if let Some(b) = bank.as_mut() {
                let mut protect: Vec<Key> = prev
                    .map(|(pl, pids)| {
                        pids.iter()
                            .collect::<BTreeSet<_>>()
                            .into_iter()
                            .map(|&e| Key::new(pl, e))
                            .collect()
                    })
                    .unwrap_or_default();
                let mut upload: Vec<u32> = Vec::new();
                for &(e, sc) in &scored {
                    if b.is_resident(l, e) {
                        protect.push(Key::new(l, e));
                    } else if sc >= params.min_upload_score {
                        upload.push(e);
                    }
                }
                // too few unprotected slots: nothing is uploaded
                if !upload.is_empty() {
                    if let Ok(acc) = b.access_protecting(l, &upload, &protect) {
                        uploaded = acc.misses.iter().map(|&(e, _)| e).collect();
                    }
                }
            }
            if !guess.is_empty() {
                let h = score(&guess, ids);
                out.layers += 1;
                out.needed += h.needed;
                out.predicted += h.predicted;
                out.correct += h.correct;
                out.uploaded += uploaded.len() as u64;
                if ub.n_tokens <= 1 {
                    out.uploaded_decode += uploaded.len() as u64;
                }
                out.used += uploaded.iter().filter(|e| ids.contains(e)).count() as u64;
            }
            if let Some(b) = bank.as_mut() {
                let acc = b.access(l, ids)?;
                count_access(&mut out.cache, ub.n_tokens, &acc);
            }
            pred.observe(l, prev, ids);
            prev = Some((l, ids));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moe_cache::cache::replay::replay;
    use crate::moe_cache::PolicyKind;

    fn ub(layers: Vec<(u32, Vec<u32>)>) -> TraceUbatch {
        TraceUbatch {
            n_tokens: 1,
            layers,
        }
    }

    #[test]
    fn repeated_routing_is_predicted_and_turns_misses_into_early_uploads() {
        // two layers; layer 1 follows layer 0 by a fixed map, tokens alternate
        let trace: Vec<TraceUbatch> = (0..40)
            .map(|i| {
                let a = if i % 2 == 0 { vec![0, 1] } else { vec![2, 3] };
                let b: Vec<u32> = a.iter().map(|e| e + 4).collect();
                ub(vec![(0, a), (1, b)])
            })
            .collect();
        let params = HistoryParams {
            decay: 0.5,
            layer_weight: 0.9,
            min_upload_score: 0.3,
        };
        let only = replay_predicted(&[0, 1], 8, 2, params, None, &trace).unwrap();
        assert_eq!(only.uploaded, 0);
        assert_eq!(only.cache, LayerCacheStats::default());
        // recency guesses layer 0 wrong (the tokens alternate), the
        // transitions guess layer 1 right once the map is learned: 2 of the
        // 4 experts of each of the 39 predicted tokens
        assert_eq!(only.layers, 39 * 2);
        assert!(only.correct >= 38 * 2 && only.correct <= 39 * 2, "{only:?}");
        assert!(only.correct <= only.needed && only.correct <= only.predicted);
        // 4 slots for 16 experts: the cache alone hits nothing after the start
        let plain = replay(&[0, 1], 8, 4, PolicyKind::Lru.build(4), &trace).unwrap();
        let plain_misses: u64 = plain.values().map(|s| s.misses()).sum();
        let with = replay_predicted(
            &[0, 1],
            8,
            2,
            params,
            Some((4, PolicyKind::Lru.build(4))),
            &trace,
        )
        .unwrap();
        assert!(with.uploaded > 0 && with.used > 0 && with.used <= with.uploaded);
        assert!(
            with.cache.misses() < plain_misses,
            "{} >= {plain_misses}",
            with.cache.misses()
        );
        // every access is served: hits + misses = distinct experts needed
        assert_eq!(with.cache.hits() + with.cache.misses(), 40 * 4);
    }

    #[test]
    fn layers_outside_the_list_are_skipped() {
        let trace = vec![ub(vec![(0, vec![1]), (5, vec![2])]); 3];
        let r = replay_predicted(&[5], 4, 1, HistoryParams::default(), None, &trace).unwrap();
        // layer 5 predicted from its own recency on the 2nd and 3rd tokens
        assert_eq!((r.layers, r.needed, r.correct), (2, 2, 2));
    }
}
