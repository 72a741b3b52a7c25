//! Adaptive selection (`adapt`): several expert policies run side by side,
//! and the one that would have hit most lately decides the evictions.
//!
//! # The principle
//!
//! No single rule wins everywhere: frequency with history (`hlfu`) is best
//! on skewed, drifting routing, the learned expected-next-use rule
//! (`nextuse-nopredict`, `nextuse`) on near-uniform routing with short
//! reuse (trained Mixtral), and both lose to the other somewhere. As ARC
//! and LeCaR do with recency and frequency, this policy measures the
//! choice instead of fixing it: every expert policy also drives a *shadow*
//! cache of the same size (its own resident set, the same driver protocol
//! as [`crate::moe_cache::cache::bank::SlotBank`], no data), and its
//! shadow hits are counted with an exponential decay. The live victim is
//! the choice of the expert whose decayed count is highest (the earlier
//! expert among equals, and the current leader keeps the lead on a tie, so
//! a trace where all agree is served exactly as the first expert, `hlfu`,
//! serves it).
//!
//! The decay's half-life is eight times the group's key space (layers x
//! experts) in accesses, so the score averages over several uses of every
//! key yet follows a change of regime within some hundreds of tokens; and
//! the lead changes hands only when a challenger's decayed count beats the
//! leader's by two standard deviations of a Poisson count
//! (`2 sqrt(a + b)`): a switch costs hits (the live cache was shaped by
//! the old leader), so it must pay for itself beyond noise. Both scale with
//! the group; no constant is fitted to a trace.
//!
//! # Purity
//!
//! Every expert policy sees the very same access sequence (live and
//! shadow), the live experts all track the live resident set (the victim
//! the leader names is taken from the others too), and nothing depends on
//! a clock or a hash order: the decisions are a pure function of the access
//! sequence, so the replay reproduces the live cache.
//!
//! Costs: `2 x` the experts' own costs (live and shadow), plus a victim
//! search per expert per eviction.

use std::collections::BTreeSet;

use super::{Key, Policy, PolicyKind};

/// The expert policies, in tie-break order (the first is the old default).
pub const EXPERTS: [PolicyKind; 3] = [
    PolicyKind::Hlfu,
    PolicyKind::NextUseNoPredict,
    PolicyKind::NextUse,
];

/// Half-life of the shadow hit counts, in key spaces (layers x experts) of
/// accesses.
pub const HALF_LIFE_KEYS: f64 = 8.0;

/// Standard deviations by which a challenger must lead to take over.
pub const SWITCH_SIGMAS: f64 = 2.0;

/// The per-access decay of a half-life of `HALF_LIFE_KEYS x keys` accesses.
fn decay_factor(keys: usize) -> f64 {
    (-1.0 / (HALF_LIFE_KEYS * keys.max(1) as f64)).exp2()
}

/// One expert's shadow cache: a resident set driven like a slot bank.
struct Shadow {
    policy: Box<dyn Policy>,
    resident: BTreeSet<Key>,
}

impl Shadow {
    /// Serve one layer's accesses; the number of hits.
    fn access(&mut self, n_slots: usize, layer: u32, experts: &[u32]) -> u32 {
        self.policy.begin_layer(layer, experts);
        let mut hits = 0;
        let mut missing = Vec::new();
        for &e in experts {
            let k = Key::new(layer, e);
            if self.resident.contains(&k) {
                self.policy.hit(k);
                hits += 1;
            } else {
                missing.push(k);
            }
        }
        for k in missing {
            if self.resident.len() >= n_slots {
                let pinned = |x: Key| x.layer == layer && experts.binary_search(&x.expert).is_ok();
                match self.policy.victim(&pinned) {
                    Some(v) => {
                        self.resident.remove(&v);
                    }
                    None => continue,
                }
            }
            self.resident.insert(k);
            self.policy.insert(k);
        }
        hits
    }
}

/// The adaptive policy over one group's slots.
pub struct Adaptive {
    n_slots: usize,
    live: Vec<Box<dyn Policy>>,
    shadows: Vec<Shadow>,
    /// Decayed shadow hits per expert.
    score: Vec<f64>,
    /// Per-access decay of the scores.
    factor: f64,
    leader: usize,
    /// Evictions decided by each expert (for the tests and the docs).
    decided: Vec<u64>,
}

impl Adaptive {
    /// An adaptive policy over [`EXPERTS`] for a group of `n_slots` slots.
    pub fn new(n_slots: usize) -> Adaptive {
        Adaptive::with_experts(&EXPERTS, n_slots)
    }

    /// An adaptive policy over `experts` (at least one).
    pub fn with_experts(experts: &[PolicyKind], n_slots: usize) -> Adaptive {
        Adaptive {
            n_slots,
            live: experts.iter().map(|k| k.build(n_slots)).collect(),
            shadows: experts
                .iter()
                .map(|k| Shadow {
                    policy: k.build(n_slots),
                    resident: BTreeSet::new(),
                })
                .collect(),
            score: vec![0.0; experts.len()],
            factor: decay_factor(n_slots),
            leader: 0,
            decided: vec![0; experts.len()],
        }
    }

    /// The expert that decides evictions now (an index into the experts).
    pub fn leader(&self) -> usize {
        self.leader
    }

    /// Evictions each expert decided so far.
    pub fn decided(&self) -> &[u64] {
        &self.decided
    }
}

impl Policy for Adaptive {
    fn name(&self) -> &'static str {
        "adapt"
    }
    fn begin_group(&mut self, layers: &[u32], n_expert: u32) {
        self.factor = decay_factor(layers.len() * n_expert as usize);
        for p in &mut self.live {
            p.begin_group(layers, n_expert);
        }
        for s in &mut self.shadows {
            s.policy.begin_group(layers, n_expert);
        }
    }
    fn begin_ubatch(&mut self, n_tokens: u32) {
        for p in &mut self.live {
            p.begin_ubatch(n_tokens);
        }
        for s in &mut self.shadows {
            s.policy.begin_ubatch(n_tokens);
        }
    }
    fn begin_layer(&mut self, layer: u32, experts: &[u32]) {
        for p in &mut self.live {
            p.begin_layer(layer, experts);
        }
        let f = self.factor.powi(experts.len() as i32);
        for (s, score) in self.shadows.iter_mut().zip(&mut self.score) {
            let h = s.access(self.n_slots, layer, experts);
            *score = *score * f + h as f64;
        }
        let lead = self.score[self.leader];
        let mut best: Option<(usize, f64)> = None;
        for (i, &s) in self.score.iter().enumerate() {
            if s - lead > SWITCH_SIGMAS * (s + lead).sqrt() && best.is_none_or(|(_, b)| s > b) {
                best = Some((i, s));
            }
        }
        if let Some((i, _)) = best {
            self.leader = i;
        }
    }
    fn hit(&mut self, key: Key) {
        for p in &mut self.live {
            p.hit(key);
        }
    }
    fn insert(&mut self, key: Key) {
        for p in &mut self.live {
            p.insert(key);
        }
    }
    fn victim(&mut self, pinned: &dyn Fn(Key) -> bool) -> Option<Key> {
        let k = self.live[self.leader].victim(pinned)?;
        self.decided[self.leader] += 1;
        for (i, p) in self.live.iter_mut().enumerate() {
            if i != self.leader {
                // every other key pinned: the expert forgets exactly `k`
                p.victim(&|x| x != k);
            }
        }
        Some(k)
    }
    fn len(&self) -> usize {
        self.live[self.leader].len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_expert_that_hits_and_tracks_the_live_set() {
        // a pure loop over 2 layers x 3 experts, one expert per layer, in a
        // cache of 3: hlfu's tied counts evict what comes next (0 hits),
        // the expected-next-use experts keep some; the adaptive policy must
        // hand the lead to one of them
        let layers = [0u32, 1];
        let mut a = Adaptive::new(3);
        a.begin_group(&layers, 3);
        let mut resident = BTreeSet::new();
        for t in 0..300u32 {
            a.begin_ubatch(1);
            for &l in &layers {
                let e = t % 3;
                a.begin_layer(l, &[e]);
                let k = Key::new(l, e);
                if resident.contains(&k) {
                    a.hit(k);
                } else {
                    if resident.len() >= 3 {
                        let v = a.victim(&|x| x == k).expect("a victim");
                        assert!(resident.remove(&v), "victim {v:?} not resident");
                    }
                    resident.insert(k);
                    a.insert(k);
                }
                assert_eq!(a.len(), resident.len());
                for p in &a.live {
                    assert_eq!(p.len(), resident.len());
                }
            }
        }
        assert!(a.score[0] < a.score[a.leader()], "{:?}", a.score);
        assert_ne!(a.leader(), 0, "hlfu kept the lead: {:?}", a.score);
    }
}
