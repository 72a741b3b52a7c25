//! Synthetic routing traces (`llama-moe-cache --synth-trace`): the expert
//! ids a router would pick, generated from a model's shape alone, with the
//! statistics of trained routers or deliberately without them.
//!
//! - **`random`**: every token picks `n_used` distinct experts uniformly
//!   per layer (what a random-weight router gives).
//! - **`zipf`**: every token picks independently from a per-layer Zipf
//!   popularity (`p(rank r) ~ 1 / (r + 1)^s`, each layer's ranking its own
//!   random permutation), with no memory between tokens.
//! - **`topic`**: what trained routers show. The text is a series of
//!   *topics* (contexts) of geometric length (mean `topic_len` tokens). A
//!   topic has, per layer, a working set of `topic_experts` experts drawn
//!   from the layer's Zipf popularity, the sets of consecutive layers
//!   related by a fixed per-layer mapping (an expert of layer `l - 1`'s
//!   set maps to one of layer `l`'s with probability `p_layer`). Each of a
//!   token's `n_used` picks at layer `l` is, in order of the draws:
//!   an expert of the previous token at the same layer (probability
//!   `p_repeat`: short reuse distances); the mapping of one of the same
//!   token's picks at layer `l - 1` (probability `p_layer`: correlation
//!   between consecutive layers); a draw from the layer's whole popularity
//!   (probability `p_global`: the long tail, which makes nearly every
//!   expert active over a thousand tokens); otherwise a popularity-weighted
//!   draw from the topic's working set. Duplicates are drawn again.
//!
//! The defaults of `topic` are calibrated to published figures of a trained
//! Qwen3-30B-A3B (48 layers, 128 experts, 8 used): LRU at 40% residency
//! hits 90 to 95% of decode accesses, and about 98.6% of the (layer,
//! expert) pairs are active within 1,300 tokens (the table is in
//! `docs/moe-cache-tuning.md`). Generation is deterministic for a seed.

use std::fmt;
use std::str::FromStr;

/// The kind of synthetic routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynthKind {
    /// Uniform picks, no memory.
    Random,
    /// Per-layer Zipf popularity, no memory.
    Zipf,
    /// Topics, reuse, layer correlation and a long tail (trained-like).
    Topic,
}

impl SynthKind {
    /// Every kind, in the order of `--synth-trace`'s help.
    pub const ALL: [SynthKind; 3] = [SynthKind::Random, SynthKind::Zipf, SynthKind::Topic];

    /// The flag's name.
    pub fn name(self) -> &'static str {
        match self {
            SynthKind::Random => "random",
            SynthKind::Zipf => "zipf",
            SynthKind::Topic => "topic",
        }
    }
}

impl fmt::Display for SynthKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SynthKind {
    type Err = String;
    fn from_str(s: &str) -> Result<SynthKind, String> {
        SynthKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("'{s}' is not a synthetic routing: give random, zipf or topic"))
    }
}

/// The generator's parameters (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SynthParams {
    /// The kind.
    pub kind: SynthKind,
    /// Seed of the generator.
    pub seed: u64,
    /// Zipf exponent of each layer's popularity (`zipf`, `topic`).
    pub zipf_s: f64,
    /// Mean tokens of a topic (`topic`).
    pub topic_len: f64,
    /// Experts of a topic's working set per layer (`topic`); 0: three times
    /// the experts used per token, at most every expert (24 of 128 for 8
    /// used).
    pub topic_experts: u32,
    /// Probability a pick repeats one of the previous token's (`topic`).
    pub p_repeat: f64,
    /// Probability a pick follows the previous layer's (`topic`).
    pub p_layer: f64,
    /// Probability a pick comes from the layer's whole popularity (`topic`).
    pub p_global: f64,
}

impl SynthParams {
    /// The calibrated defaults of `kind`.
    pub fn new(kind: SynthKind) -> SynthParams {
        SynthParams {
            kind,
            seed: 1,
            zipf_s: 1.0,
            topic_len: 400.0,
            topic_experts: 0,
            p_repeat: 0.1,
            p_layer: 0.15,
            p_global: 0.055,
        }
    }

    /// Check the parameters against a shape of `n_expert` experts of which
    /// `n_used` are picked; the error names the parameter.
    pub fn check(&self, n_expert: u32, n_used: u32) -> Result<(), String> {
        if n_used == 0 || n_used > n_expert {
            return Err(format!(
                "{n_used} experts used per token is not in 1..={n_expert}"
            ));
        }
        if !(self.zipf_s.is_finite() && self.zipf_s >= 0.0) {
            return Err(format!("--zipf-s {}: give a number >= 0", self.zipf_s));
        }
        if !(self.topic_len.is_finite() && self.topic_len >= 1.0) {
            return Err(format!(
                "--topic-len {}: give a number >= 1",
                self.topic_len
            ));
        }
        if self.topic_experts != 0 && (self.topic_experts < n_used || self.topic_experts > n_expert)
        {
            return Err(format!(
                "--topic-experts {}: give n_used ({n_used}) to n_expert ({n_expert}) experts, or 0 for 3 x n_used",
                self.topic_experts
            ));
        }
        for (name, p) in [
            ("--p-repeat", self.p_repeat),
            ("--p-layer", self.p_layer),
            ("--p-global", self.p_global),
        ] {
            if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
                return Err(format!("{name} {p}: give a probability from 0 to 1"));
            }
        }
        if self.p_repeat + self.p_layer + self.p_global > 1.0 {
            return Err(format!(
                "--p-repeat + --p-layer + --p-global = {}: give a sum of at most 1",
                self.p_repeat + self.p_layer + self.p_global
            ));
        }
        Ok(())
    }

    /// The working set's size for `n_expert` experts, `n_used` used.
    pub fn working_set(&self, n_expert: u32, n_used: u32) -> u32 {
        match self.topic_experts {
            0 => (3 * n_used).min(n_expert),
            m => m,
        }
    }
}

/// SplitMix64: small, fast and deterministic.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// A random permutation of `0..n`.
    pub fn permutation(&mut self, n: usize) -> Vec<u32> {
        let mut v: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
        v
    }
}

/// A discrete distribution sampled by its cumulative weights.
#[derive(Clone, Debug)]
struct Weighted {
    items: Vec<u32>,
    cum: Vec<f64>,
}

impl Weighted {
    fn new(items: Vec<u32>, weights: &[f64]) -> Weighted {
        let mut cum = Vec::with_capacity(weights.len());
        let mut s = 0.0;
        for w in weights {
            s += w;
            cum.push(s);
        }
        Weighted { items, cum }
    }

    fn sample(&self, rng: &mut Rng) -> u32 {
        let total = self.cum.last().copied().unwrap_or(0.0);
        let x = rng.f64() * total;
        let i = self.cum.partition_point(|&c| c <= x);
        self.items[i.min(self.items.len() - 1)]
    }
}

/// Per-layer popularity: Zipf weights over a random ranking of the experts.
fn popularity(rng: &mut Rng, n_expert: u32, s: f64) -> (Vec<f64>, Weighted) {
    let rank = rng.permutation(n_expert as usize);
    let mut w = vec![0.0; n_expert as usize];
    for (r, &e) in rank.iter().enumerate() {
        w[e as usize] = 1.0 / ((r + 1) as f64).powf(s);
    }
    let all = Weighted::new((0..n_expert).collect(), &w);
    (w, all)
}

/// Generate `n_tokens` tokens of routing for `n_moe` MoE layers of
/// `n_expert` experts picking `n_used`: `out[t][l]` holds token `t`'s
/// `n_used` distinct ids at MoE layer `l`. `p` must pass
/// [`SynthParams::check`].
pub fn generate(
    p: &SynthParams,
    n_moe: usize,
    n_expert: u32,
    n_used: u32,
    n_tokens: usize,
) -> Vec<Vec<Vec<u32>>> {
    let mut rng = Rng::new(p.seed);
    let k = n_used as usize;
    let mut out = Vec::with_capacity(n_tokens);
    match p.kind {
        SynthKind::Random => {
            let all = Weighted::new((0..n_expert).collect(), &vec![1.0; n_expert as usize]);
            for _ in 0..n_tokens {
                out.push(
                    (0..n_moe)
                        .map(|_| distinct(k, &mut rng, |r| all.sample(r)))
                        .collect(),
                );
            }
        }
        SynthKind::Zipf => {
            let pops: Vec<Weighted> = (0..n_moe)
                .map(|_| popularity(&mut rng, n_expert, p.zipf_s).1)
                .collect();
            for _ in 0..n_tokens {
                out.push(
                    pops.iter()
                        .map(|w| distinct(k, &mut rng, |r| w.sample(r)))
                        .collect(),
                );
            }
        }
        SynthKind::Topic => {
            let pops: Vec<(Vec<f64>, Weighted)> = (0..n_moe)
                .map(|_| popularity(&mut rng, n_expert, p.zipf_s))
                .collect();
            // layer l's mapping from layer l - 1's experts
            let maps: Vec<Vec<u32>> = (0..n_moe)
                .map(|_| rng.permutation(n_expert as usize))
                .collect();
            let mut sets: Vec<Weighted> = Vec::new();
            let mut prev: Vec<Vec<u32>> = vec![Vec::new(); n_moe];
            let p_switch = 1.0 / p.topic_len;
            for t in 0..n_tokens {
                if t == 0 || rng.f64() < p_switch {
                    let m = p.working_set(n_expert, n_used) as usize;
                    sets = topic_sets(p, m, &mut rng, &pops, &maps, n_expert);
                }
                let mut tok: Vec<Vec<u32>> = Vec::with_capacity(n_moe);
                for l in 0..n_moe {
                    let below = if l > 0 { Some(&tok[l - 1]) } else { None };
                    let picks = distinct(k, &mut rng, |r| {
                        let x = r.f64();
                        if x < p.p_repeat && !prev[l].is_empty() {
                            return prev[l][r.below(prev[l].len())];
                        }
                        let x = x - p.p_repeat;
                        if let Some(b) = below.filter(|_| x >= 0.0 && x < p.p_layer) {
                            return maps[l][b[r.below(b.len())] as usize];
                        }
                        let x = x - p.p_layer;
                        if x >= 0.0 && x < p.p_global {
                            return pops[l].1.sample(r);
                        }
                        sets[l].sample(r)
                    });
                    tok.push(picks);
                }
                prev.clone_from(&tok);
                out.push(tok);
            }
        }
    }
    out
}

/// A topic's working sets, one per layer, weighted by popularity.
fn topic_sets(
    p: &SynthParams,
    m: usize,
    rng: &mut Rng,
    pops: &[(Vec<f64>, Weighted)],
    maps: &[Vec<u32>],
    n_expert: u32,
) -> Vec<Weighted> {
    let mut sets: Vec<Vec<u32>> = Vec::with_capacity(pops.len());
    for (l, (w, all)) in pops.iter().enumerate() {
        let mut set: Vec<u32> = Vec::with_capacity(m);
        if let Some(below) = l.checked_sub(1).map(|b| &sets[b]) {
            for &e in below {
                if rng.f64() < p.p_layer {
                    let f = maps[l][e as usize];
                    if !set.contains(&f) {
                        set.push(f);
                    }
                }
            }
        }
        // the rest by popularity; a draw loop with a bounded number of
        // tries, then the most popular experts not yet in the set
        let mut tries = 0;
        while set.len() < m && tries < 64 * m {
            let e = all.sample(rng);
            if !set.contains(&e) {
                set.push(e);
            }
            tries += 1;
        }
        let mut rest: Vec<u32> = (0..n_expert).filter(|e| !set.contains(e)).collect();
        rest.sort_by(|a, b| w[*b as usize].total_cmp(&w[*a as usize]));
        set.extend(rest.into_iter().take(m - set.len()));
        sets.push(set);
    }
    sets.into_iter()
        .zip(pops)
        .map(|(s, (w, _))| {
            let ws: Vec<f64> = s.iter().map(|&e| w[e as usize]).collect();
            Weighted::new(s, &ws)
        })
        .collect()
}

/// `k` distinct ids from `draw` (which must reach every id with some
/// probability); after many repeats, the smallest ids not yet picked.
fn distinct(k: usize, rng: &mut Rng, mut draw: impl FnMut(&mut Rng) -> u32) -> Vec<u32> {
    let mut v: Vec<u32> = Vec::with_capacity(k);
    let mut tries = 0;
    while v.len() < k && tries < 1000 * k {
        let e = draw(rng);
        if !v.contains(&e) {
            v.push(e);
        }
        tries += 1;
    }
    let mut e = 0;
    while v.len() < k {
        if !v.contains(&e) {
            v.push(e);
        }
        e += 1;
    }
    v
}

/// The fraction of `(layer, expert)` pairs the first `n` tokens of
/// `tokens` (as [`generate`] returns them) use at least once.
pub fn active_fraction(tokens: &[Vec<Vec<u32>>], n: usize, n_expert: u32) -> f64 {
    let Some(first) = tokens.first() else {
        return 0.0;
    };
    let n_moe = first.len();
    let mut seen = vec![false; n_moe * n_expert as usize];
    for tok in tokens.iter().take(n) {
        for (l, ids) in tok.iter().enumerate() {
            for &e in ids {
                seen[l * n_expert as usize + e as usize] = true;
            }
        }
    }
    seen.iter().filter(|&&s| s).count() as f64 / seen.len().max(1) as f64
}

/// The median, over every reuse, of the tokens between two uses of the
/// same `(layer, expert)` (`None` when nothing is reused).
pub fn median_reuse_distance(tokens: &[Vec<Vec<u32>>], n_expert: u32) -> Option<usize> {
    let n_moe = tokens.first()?.len();
    let mut last: Vec<Option<usize>> = vec![None; n_moe * n_expert as usize];
    let mut d = Vec::new();
    for (t, tok) in tokens.iter().enumerate() {
        for (l, ids) in tok.iter().enumerate() {
            for &e in ids {
                let i = l * n_expert as usize + e as usize;
                if let Some(p) = last[i].replace(t) {
                    d.push(t - p);
                }
            }
        }
    }
    d.sort_unstable();
    d.get(d.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moe_cache::cache::replay::{replay, TraceUbatch};
    use crate::moe_cache::PolicyKind;

    fn lru_hit_rate(tokens: &[Vec<Vec<u32>>], n_expert: u32, n_slots: u32) -> f64 {
        let layers: Vec<u32> = (0..tokens[0].len() as u32).collect();
        let ubs: Vec<TraceUbatch> = tokens
            .iter()
            .map(|t| TraceUbatch {
                n_tokens: 1,
                layers: t
                    .iter()
                    .enumerate()
                    .map(|(l, ids)| (l as u32, ids.clone()))
                    .collect(),
            })
            .collect();
        let st = replay(
            &layers,
            n_expert,
            n_slots,
            PolicyKind::Lru.build(n_slots as usize),
            &ubs,
        )
        .unwrap();
        let (h, m) = st
            .values()
            .fold((0, 0), |(h, m), s| (h + s.hits(), m + s.misses()));
        h as f64 / (h + m) as f64
    }

    #[test]
    fn every_kind_picks_n_used_distinct_ids_in_range_deterministically() {
        for kind in SynthKind::ALL {
            let p = SynthParams::new(kind);
            p.check(16, 4).unwrap();
            assert_eq!(p.working_set(16, 4), 12);
            assert_eq!(p.working_set(8, 4), 8);
            let a = generate(&p, 3, 16, 4, 200);
            assert_eq!(a.len(), 200);
            for tok in &a {
                assert_eq!(tok.len(), 3);
                for ids in tok {
                    let mut s = ids.clone();
                    s.sort_unstable();
                    s.dedup();
                    assert_eq!(s.len(), 4, "{kind}: {ids:?}");
                    assert!(ids.iter().all(|&e| e < 16));
                }
            }
            assert_eq!(a, generate(&p, 3, 16, 4, 200), "{kind} is deterministic");
            let other = SynthParams { seed: 2, ..p };
            assert_ne!(
                a,
                generate(&other, 3, 16, 4, 200),
                "{kind}: the seed matters"
            );
            // every id is reachable even when a set is as small as n_used
            let tight = SynthParams {
                topic_experts: 4,
                ..p
            };
            assert_eq!(generate(&tight, 2, 4, 4, 3).len(), 3);
        }
    }

    #[test]
    fn bad_parameters_are_refused_naming_them() {
        let p = SynthParams::new(SynthKind::Topic);
        let e = SynthParams { p_global: 1.5, ..p }
            .check(128, 8)
            .unwrap_err();
        assert!(e.contains("--p-global 1.5"), "{e}");
        let e = SynthParams {
            p_repeat: 0.6,
            p_layer: 0.5,
            ..p
        }
        .check(128, 8)
        .unwrap_err();
        assert!(e.contains("at most 1"), "{e}");
        let e = SynthParams {
            topic_experts: 4,
            ..p
        }
        .check(128, 8)
        .unwrap_err();
        assert!(e.contains("--topic-experts 4"), "{e}");
        let e = SynthParams { zipf_s: -1.0, ..p }.check(128, 8).unwrap_err();
        assert!(e.contains("--zipf-s -1"), "{e}");
        let e = SynthParams {
            topic_len: 0.5,
            ..p
        }
        .check(128, 8)
        .unwrap_err();
        assert!(e.contains("--topic-len 0.5"), "{e}");
        assert!("mru".parse::<SynthKind>().unwrap_err().contains("'mru'"));
        assert_eq!("Topic".parse::<SynthKind>(), Ok(SynthKind::Topic));
    }

    /// The calibration: on Qwen3-30B-A3B's shape, `topic`'s LRU hit rate at
    /// 40% residency is within the published 90 to 95%, ~98.6% of the
    /// (layer, expert) pairs are active within 1,300 tokens, the median
    /// reuse distance is 2 tokens; `random` is nothing like it.
    #[test]
    fn topic_defaults_match_the_trained_figures_on_qwen3_30b_a3b() {
        let (n_moe, n_expert, n_used) = (48, 128, 8);
        let slots = (0.4 * (n_moe * n_expert as usize) as f64) as u32;
        let topic = generate(
            &SynthParams::new(SynthKind::Topic),
            n_moe,
            n_expert,
            n_used,
            4000,
        );
        let hit = lru_hit_rate(&topic, n_expert, slots);
        assert!((0.90..=0.95).contains(&hit), "LRU at 40%: {hit}");
        let act = active_fraction(&topic, 1300, n_expert);
        assert!((0.980..=0.992).contains(&act), "active within 1300: {act}");
        assert_eq!(median_reuse_distance(&topic, n_expert), Some(2));
        let random = generate(
            &SynthParams::new(SynthKind::Random),
            n_moe,
            n_expert,
            n_used,
            1300,
        );
        let hit_r = lru_hit_rate(&random, n_expert, slots);
        assert!(hit_r < 0.5, "random at 40%: {hit_r}");
    }
}
