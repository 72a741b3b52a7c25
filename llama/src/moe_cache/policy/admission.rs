//! An admission filter in front of a policy (TinyLFU, as in Caffeine's
//! W-TinyLFU): a newcomer enters the policy only if its estimated frequency
//! beats that of the expert the policy last evicted; otherwise it waits on
//! probation and is the first to go at the next eviction, so a one-off
//! expert does not push a hot one out.
//!
//! # How it fits a demand cache
//!
//! The bank must give every missing expert a slot (the layer computes with
//! it), so the filter cannot refuse a newcomer outright. It decides who
//! goes *next*: a newcomer whose estimate does not beat the last victim's
//! is kept on probation, outside the inner policy; the next eviction takes
//! the oldest unpinned probationary expert before asking the inner policy.
//! A probationary expert used again is admitted (handed to the inner
//! policy as an insert). The window is thus the layer's own misses, and
//! the main cache is the inner policy's.
//!
//! # The frequency sketch
//!
//! A count-min sketch (4 rows of 4-bit counters, 16 counters per slot of
//! the group, at least 64) counts every access, hits and misses. Every
//! `10 * n_slots` accesses all counters are halved (TinyLFU's reset: the
//! sample is ten times the cache, so the sketch follows popularity over
//! about that many accesses). Hashing is a fixed mix of `(layer, expert)`
//! and the row, so the filter is a pure function of the access sequence
//! and replay equals the live cache.
//!
//! # Loop resistance
//!
//! A recency policy walking the layers in a loop larger than its slots
//! evicts exactly what comes next (LRU hits nothing at 1/8 of a Mixtral).
//! In a loop every expert's estimate is alike, so newcomers stay on
//! probation and evict each other, and the inner policy's experts survive
//! to be hit at the next walk.

use super::{Key, Policy};

/// Rows of the sketch.
const ROWS: usize = 4;
/// Counters per slot of the group (per row).
const COUNTERS_PER_SLOT: usize = 16;
/// The smallest row.
const MIN_WIDTH: usize = 64;
/// Accesses between halvings, per slot of the group.
const SAMPLE_PER_SLOT: u64 = 10;
/// A counter's ceiling (4 bits).
const MAX_COUNT: u8 = 15;

/// A count-min sketch of 4-bit counters with periodic halving.
#[derive(Clone, Debug)]
pub struct FrequencySketch {
    counts: Vec<u8>,
    width: usize,
    sample: u64,
    added: u64,
}

impl FrequencySketch {
    /// A sketch for a group of `n_slots` slots.
    pub fn new(n_slots: usize) -> FrequencySketch {
        let width = (n_slots.max(1) * COUNTERS_PER_SLOT)
            .max(MIN_WIDTH)
            .next_power_of_two();
        FrequencySketch {
            counts: vec![0; width * ROWS],
            width,
            sample: SAMPLE_PER_SLOT * n_slots.max(1) as u64,
            added: 0,
        }
    }

    fn index(&self, key: Key, row: usize) -> usize {
        // splitmix64 of the key and the row: fixed, so the sketch is the
        // same in every run
        let mut z = ((key.layer as u64) << 32 | key.expert as u64)
            .wrapping_add((row as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        row * self.width + (z as usize & (self.width - 1))
    }

    /// Count one access of `key`; every `sample` accesses, halve all.
    pub fn add(&mut self, key: Key) {
        let min = self.estimate(key);
        for r in 0..ROWS {
            let i = self.index(key, r);
            // conservative update: raise only the counters at the minimum
            if self.counts[i] == min && min < MAX_COUNT {
                self.counts[i] += 1;
            }
        }
        self.added += 1;
        if self.added >= self.sample {
            for c in &mut self.counts {
                *c >>= 1;
            }
            self.added /= 2;
        }
    }

    /// The estimated (decayed) count of `key`'s accesses.
    pub fn estimate(&self, key: Key) -> u8 {
        (0..ROWS)
            .map(|r| self.counts[self.index(key, r)])
            .min()
            .unwrap_or(0)
    }
}

/// A policy behind a TinyLFU admission filter.
pub struct Admission {
    name: &'static str,
    inner: Box<dyn Policy>,
    sketch: FrequencySketch,
    /// Resident experts not admitted, oldest first.
    probation: Vec<Key>,
    /// The estimate of the inner policy's last victim (none before the
    /// first eviction: everything is admitted while slots are free).
    threshold: Option<u8>,
}

impl Admission {
    /// `inner` behind the filter, for a group of `n_slots` slots, named
    /// `name`.
    pub fn new(name: &'static str, inner: Box<dyn Policy>, n_slots: usize) -> Admission {
        Admission {
            name,
            inner,
            sketch: FrequencySketch::new(n_slots),
            probation: Vec::new(),
            threshold: None,
        }
    }
}

impl Policy for Admission {
    fn name(&self) -> &'static str {
        self.name
    }

    fn begin_group(&mut self, layers: &[u32], n_expert: u32) {
        self.inner.begin_group(layers, n_expert);
    }

    fn begin_ubatch(&mut self, n_tokens: u32) {
        self.inner.begin_ubatch(n_tokens);
    }

    fn begin_layer(&mut self, layer: u32, experts: &[u32]) {
        for &e in experts {
            self.sketch.add(Key::new(layer, e));
        }
        self.inner.begin_layer(layer, experts);
    }

    fn hit(&mut self, key: Key) {
        match self.probation.iter().position(|&k| k == key) {
            Some(i) => {
                // used again while on probation: admitted
                self.probation.remove(i);
                self.inner.insert(key);
            }
            None => self.inner.hit(key),
        }
    }

    fn insert(&mut self, key: Key) {
        match self.threshold {
            Some(t) if self.sketch.estimate(key) <= t => self.probation.push(key),
            _ => self.inner.insert(key),
        }
    }

    fn victim(&mut self, pinned: &dyn Fn(Key) -> bool) -> Option<Key> {
        if let Some(i) = self.probation.iter().position(|&k| !pinned(k)) {
            return Some(self.probation.remove(i));
        }
        let v = self.inner.victim(pinned)?;
        self.threshold = Some(self.sketch.estimate(v));
        Some(v)
    }

    fn len(&self) -> usize {
        self.inner.len() + self.probation.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moe_cache::policy::lru::Lru;

    #[test]
    fn the_sketch_counts_and_halves() {
        let mut s = FrequencySketch::new(1);
        let (a, b) = (Key::new(0, 1), Key::new(3, 7));
        for _ in 0..5 {
            s.add(a);
        }
        s.add(b);
        assert_eq!((s.estimate(a), s.estimate(b)), (5, 1));
        // the sample is 10 accesses: 4 more reach it and halve every counter
        for _ in 0..4 {
            s.add(a);
        }
        assert_eq!((s.estimate(a), s.estimate(b)), (4, 0));
        for _ in 0..100 {
            s.add(b);
        }
        assert!(s.estimate(b) <= MAX_COUNT);
    }

    #[test]
    fn a_one_off_newcomer_goes_before_the_hot_expert() {
        let mut p = Admission::new("tlfu-lru", Box::new(Lru::new()), 2);
        let none = |_: Key| false;
        let (hot, cold) = (Key::new(0, 0), Key::new(0, 1));
        // hot used three times, cold once; two slots, both full
        for k in [hot, hot, hot] {
            p.begin_layer(0, &[k.expert]);
        }
        p.insert(hot);
        p.begin_layer(0, &[1]);
        p.insert(cold);
        // LRU alone would evict hot (least recent): the filter asks it too
        // at the first eviction, then judges the newcomer
        assert_eq!(p.victim(&none), Some(hot));
        let one_off = Key::new(1, 5);
        p.begin_layer(1, &[5]);
        p.insert(one_off);
        assert_eq!(p.len(), 2);
        // the one-off (estimate 1, not above the victim's 3) goes next
        assert_eq!(p.victim(&none), Some(one_off));
        // unless the layer needs it now: then the inner policy's victim
        p.insert(one_off);
        assert_eq!(p.victim(&|k| k == one_off), Some(cold));
        // a probationary expert used again is admitted
        p.hit(one_off);
        assert!(p.probation.is_empty());
        assert_eq!(p.len(), 1);
    }
}
