//! The history predictor (`--moe-predict history`): a layer's experts for
//! the current token guessed from the routing already seen on the host,
//! with no graph node and no read of the device.
//!
//! A trained model's routing is temporally local (a median reuse distance
//! of about 2 tokens) and consecutive layers' choices are correlated. The
//! predictor keeps, per cached layer:
//!
//! - **recency**: an exponential moving average of each expert's use over
//!   the layer's earlier rows (tokens), `r <- decay * r + (1 - decay) *
//!   [used]`; its values sum to about `n_used`;
//! - **transitions**: from each expert `s` of the layer just before (in
//!   the same token), how often the token then used expert `e` here,
//!   `count[s][e]`; a source's row of counts is halved when its total
//!   reaches [`TRANSITION_CAP`], so old topics fade. `p(e | s) = n_used *
//!   count[s][e] / total[s]` is the share of the rows using `s` that then
//!   used `e`.
//!
//! A row's guess is the `n_used` experts of highest score
//! `(1 - layer_weight) * r[e] + layer_weight * max_s p(e | s)` over the
//! row's experts `s` at the layer before: both terms estimate the chance
//! that the row uses `e`, so the score does too. Experts of score 0 are
//! never guessed. For the first layer of a token, or when there are no
//! transitions into the layer yet, `r[e]` alone is the score. A ubatch of several rows
//! guesses the union of its rows' guesses.
//!
//! Memory: `n_expert` floats per layer and `n_expert^2` counts per pair of
//! consecutive cached layers (3 MiB for 48 layers of 128 experts), made
//! when the pair is first seen.
//!
//! The same code runs in decode (the cache hook, [`super`]) and
//! on a trace ([`super::replay::replay_predicted`]), so the recall
//! `llama-moe-cache --predict` reports is the one decode gets on that
//! routing. It needs only the ids the cache's hook already reads, so it
//! also predicts under forced routing (`--expert-trace-in`).

use std::collections::HashMap;

/// A source expert's transition counts are halved when their total
/// reaches this.
pub const TRANSITION_CAP: u32 = 4096;

/// The predictor's two parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistoryParams {
    /// Weight of the previous rows in the recency average (0: only the
    /// last row counts; closer to 1: a longer memory).
    pub decay: f32,
    /// Share of the score given to the transitions from the layer before
    /// (0: recency alone; 1: transitions alone).
    pub layer_weight: f32,
    /// A guessed expert that is not in the cache is uploaded early only
    /// when its score is at least this (about the chance that the token
    /// uses it); guesses already in the cache cost nothing.
    pub min_upload_score: f32,
}

impl Default for HistoryParams {
    /// `decay` 0.95, `layer_weight` 0.3, `min_upload_score` 0.3 (chosen on
    /// the `zipf` and `topic` traces of the 4- and 48-layer synths,
    /// `docs/moe-cache-tuning.md`).
    fn default() -> Self {
        HistoryParams {
            decay: 0.95,
            layer_weight: 0.3,
            min_upload_score: 0.3,
        }
    }
}

impl HistoryParams {
    /// An error naming the parameter that is outside `[0, 1]`.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [
            ("decay", self.decay),
            ("layer weight", self.layer_weight),
            ("minimum upload score", self.min_upload_score),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!(
                    "the history predictor's {name} is {v}: give a value in 0..=1"
                ));
            }
        }
        Ok(())
    }
}

/// Transition counts from one layer's experts to another's.
#[derive(Clone, Debug)]
struct Transitions {
    /// `counts[s * n_expert + e]`.
    counts: Vec<u32>,
    /// `totals[s]`: the sum of source `s`'s counts.
    totals: Vec<u32>,
}

/// The history predictor's state over every layer it has seen.
#[derive(Clone, Debug)]
pub struct HistoryPredictor {
    n_expert: usize,
    n_used: usize,
    params: HistoryParams,
    recency: HashMap<u32, Vec<f32>>,
    /// Keyed by `(layer before, layer)`.
    trans: HashMap<(u32, u32), Transitions>,
}

/// The rows of `ids` (`n_used` ids each) that line up with `n` rows: the
/// last ones (a layer that routes only a ubatch's output rows routes its
/// last rows).
fn last_rows(ids: &[u32], n_used: usize, n: usize) -> &[u32] {
    let have = ids.len() / n_used;
    let skip = have.saturating_sub(n);
    &ids[skip * n_used..have * n_used]
}

impl HistoryPredictor {
    /// An empty predictor for layers of `n_expert` experts, `n_used` of
    /// them per token (`n_used` >= 1).
    pub fn new(n_expert: u32, n_used: u32, params: HistoryParams) -> HistoryPredictor {
        HistoryPredictor {
            n_expert: n_expert as usize,
            n_used: n_used.max(1) as usize,
            params,
            recency: HashMap::new(),
            trans: HashMap::new(),
        }
    }

    /// Experts picked per token.
    pub fn n_used(&self) -> usize {
        self.n_used
    }

    /// Layer `layer` routed `ids` (`n_used` per row, rows in token order);
    /// `prev` is the same ubatch's layer just before and its ids, when
    /// there is one. Ids out of range are ignored (the hook refuses them
    /// before).
    pub fn observe(&mut self, layer: u32, prev: Option<(u32, &[u32])>, ids: &[u32]) {
        let (n_expert, n_used) = (self.n_expert, self.n_used);
        let n_rows = ids.len() / n_used;
        let d = self.params.decay;
        let r = self
            .recency
            .entry(layer)
            .or_insert_with(|| vec![0.0; n_expert]);
        for row in ids.chunks_exact(n_used) {
            for v in r.iter_mut() {
                *v *= d;
            }
            for &e in row {
                if let Some(v) = r.get_mut(e as usize) {
                    *v += 1.0 - d;
                }
            }
        }
        let Some((pl, pids)) = prev else {
            return;
        };
        let pids = last_rows(pids, n_used, n_rows);
        let ids = last_rows(ids, n_used, pids.len() / n_used);
        let t = self
            .trans
            .entry((pl, layer))
            .or_insert_with(|| Transitions {
                counts: vec![0; n_expert * n_expert],
                totals: vec![0; n_expert],
            });
        for (prow, row) in pids.chunks_exact(n_used).zip(ids.chunks_exact(n_used)) {
            for &s in prow {
                let s = s as usize;
                if s >= n_expert {
                    continue;
                }
                for &e in row {
                    let e = e as usize;
                    if e >= n_expert {
                        continue;
                    }
                    t.counts[s * n_expert + e] += 1;
                    t.totals[s] += 1;
                }
                if t.totals[s] >= TRANSITION_CAP {
                    let row = &mut t.counts[s * n_expert..(s + 1) * n_expert];
                    let mut total = 0;
                    for c in row {
                        *c /= 2;
                        total += *c;
                    }
                    t.totals[s] = total;
                }
            }
        }
    }

    /// The parameters.
    pub fn params(&self) -> HistoryParams {
        self.params
    }

    /// The guess for layer `layer` of a ubatch of `n_rows` rows, given the
    /// same ubatch's layer just before and its ids (`prev`), when there is
    /// one: distinct experts, ascending; empty when nothing was seen yet.
    pub fn predict(&self, layer: u32, prev: Option<(u32, &[u32])>, n_rows: usize) -> Vec<u32> {
        self.predict_scored(layer, prev, n_rows)
            .into_iter()
            .map(|(e, _)| e)
            .collect()
    }

    /// [`Self::predict`] with each expert's score (its highest over the
    /// rows that guessed it).
    pub fn predict_scored(
        &self,
        layer: u32,
        prev: Option<(u32, &[u32])>,
        n_rows: usize,
    ) -> Vec<(u32, f32)> {
        let (n_expert, n_used) = (self.n_expert, self.n_used);
        let w = self.params.layer_weight;
        let recency: Vec<f32> = match self.recency.get(&layer) {
            Some(r) => r.clone(),
            None => vec![0.0; n_expert],
        };
        let base: Vec<f32> = recency.iter().map(|&v| (1.0 - w) * v).collect();
        let trans = prev.and_then(|(pl, pids)| {
            let t = self.trans.get(&(pl, layer))?;
            Some((t, last_rows(pids, n_used, n_rows)))
        });
        let mut out: Vec<(u32, f32)> = Vec::new();
        let mut score = vec![0.0; n_expert];
        let pick = |score: &[f32], out: &mut Vec<(u32, f32)>| {
            let mut idx: Vec<usize> = (0..n_expert).filter(|&e| score[e] > 0.0).collect();
            // highest score first, lower id on ties
            idx.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
            out.extend(idx.into_iter().take(n_used).map(|e| (e as u32, score[e])));
        };
        match trans {
            Some((t, pids)) if !pids.is_empty() => {
                let mut chance = vec![0.0f32; n_expert];
                for prow in pids.chunks_exact(n_used) {
                    chance.fill(0.0);
                    for &s in prow {
                        let s = s as usize;
                        if s >= n_expert || t.totals[s] == 0 {
                            continue;
                        }
                        // rows that used `s`: its count of transitions / n_used
                        let k = n_used as f32 / t.totals[s] as f32;
                        let row = &t.counts[s * n_expert..(s + 1) * n_expert];
                        for (v, &c) in chance.iter_mut().zip(row) {
                            *v = v.max((k * c as f32).min(1.0));
                        }
                    }
                    for ((v, &b), &c) in score.iter_mut().zip(&base).zip(&chance) {
                        *v = b + w * c;
                    }
                    pick(&score, &mut out);
                }
            }
            _ => pick(&recency, &mut out),
        }
        // by expert, the highest score first, then one entry per expert
        out.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
        out.dedup_by_key(|p| p.0);
        out
    }
}

/// Counts of a prediction against the ids that came.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hits {
    /// Distinct experts the layer used.
    pub needed: u64,
    /// Distinct experts predicted.
    pub predicted: u64,
    /// Experts both predicted and used.
    pub correct: u64,
}

/// Compare `predicted` (distinct, ascending) with the `used` ids (any
/// order, repeats allowed).
pub fn score(predicted: &[u32], used: &[u32]) -> Hits {
    let mut need: Vec<u32> = used.to_vec();
    need.sort_unstable();
    need.dedup();
    Hits {
        needed: need.len() as u64,
        predicted: predicted.len() as u64,
        correct: predicted
            .iter()
            .filter(|e| need.binary_search(e).is_ok())
            .count() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_seen_predicts_nothing_then_recency_repeats_the_last_rows() {
        let params = HistoryParams {
            decay: 0.7,
            ..HistoryParams::default()
        };
        let mut p = HistoryPredictor::new(8, 2, params);
        assert!(p.predict(0, None, 1).is_empty());
        p.observe(0, None, &[3, 5]);
        assert_eq!(p.predict(0, None, 1), vec![3, 5]);
        // the newer row outweighs the older one; scores are recency averages
        p.observe(0, None, &[1, 5]);
        assert_eq!(p.predict(0, None, 1), vec![1, 5]);
        let s = p.predict_scored(0, None, 1);
        assert!(
            (s[0].1 - 0.3).abs() < 1e-6 && (s[1].1 - 0.51).abs() < 1e-6,
            "{s:?}"
        );
        // another layer has its own history
        assert!(p.predict(1, None, 1).is_empty());
    }

    #[test]
    fn transitions_follow_the_layer_before() {
        let params = HistoryParams {
            decay: 0.5,
            layer_weight: 1.0,
            min_upload_score: 0.3,
        };
        let mut p = HistoryPredictor::new(8, 1, params);
        // expert 2 at layer 0 is always followed by 6 at layer 1, 4 by 7
        for _ in 0..3 {
            p.observe(0, None, &[2]);
            p.observe(1, Some((0, &[2])), &[6]);
            p.observe(0, None, &[4]);
            p.observe(1, Some((0, &[4])), &[7]);
        }
        assert_eq!(p.predict(1, Some((0, &[2])), 1), vec![6]);
        assert_eq!(p.predict(1, Some((0, &[4])), 1), vec![7]);
        // two rows: the union of their guesses
        assert_eq!(p.predict(1, Some((0, &[2, 4])), 2), vec![6, 7]);
        // an unseen source: no transition, and no recency at this weight
        assert!(p.predict(1, Some((0, &[5])), 1).is_empty());
    }

    #[test]
    fn counts_halve_at_the_cap_and_bad_ids_are_ignored() {
        let mut p = HistoryPredictor::new(4, 1, HistoryParams::default());
        for _ in 0..TRANSITION_CAP + 10 {
            p.observe(0, None, &[1]);
            p.observe(1, Some((0, &[1])), &[2]);
        }
        let t = &p.trans[&(0, 1)];
        assert!(t.totals[1] < TRANSITION_CAP && t.totals[1] > TRANSITION_CAP / 4);
        assert_eq!(t.totals[1], t.counts[4..8].iter().sum::<u32>());
        p.observe(1, Some((0, &[9])), &[11]);
        assert_eq!(p.predict(1, Some((0, &[1])), 1), vec![2]);
    }

    #[test]
    fn rows_line_up_from_the_last_and_scores_count_distinct_experts() {
        let mut p = HistoryPredictor::new(8, 1, HistoryParams::default());
        // layer 1 routed only the last of 3 rows
        p.observe(0, None, &[0, 1, 2]);
        p.observe(1, Some((0, &[0, 1, 2])), &[5]);
        assert_eq!(p.trans[&(0, 1)].totals[2], 1);
        assert_eq!(p.trans[&(0, 1)].totals[0], 0);
        let h = score(&[1, 2, 3], &[2, 2, 4, 1]);
        assert_eq!(
            h,
            Hits {
                needed: 3,
                predicted: 3,
                correct: 2
            }
        );
        assert!(HistoryParams {
            decay: 1.5,
            ..HistoryParams::default()
        }
        .check()
        .unwrap_err()
        .contains("decay is 1.5"));
    }
}
