//! History LFU (this project's policy): every `(layer, expert)` keeps a
//! decayed use count (half-life in tokens) for as long as the cache lives,
//! resident or not. The victim is the resident expert with the lowest
//! current count, the least recent one among equals.
//!
//! Why: a MoE router's popularity per layer is skewed and slowly drifting.
//! LRU forgets popularity; LRFU forgets it at eviction, so a popular expert
//! squeezed out once re-enters as a newcomer in the lowest class and is the
//! first to go again. The key space is small (layers x experts), so keeping
//! every key's history is cheap, and a returning expert competes with its
//! real record.

use std::collections::{BTreeMap, HashMap};

use super::{decay, Key, Policy};

/// Default half-life of a count, in tokens.
pub const DEFAULT_HALF_LIFE: f64 = 256.0;

#[derive(Clone, Copy, Debug)]
struct Hist {
    count: f64,
    at: u64,
    stamp: u64,
}

/// History LFU over one group's slots.
#[derive(Clone, Debug)]
pub struct Hlfu {
    half_life: f64,
    now: u64,
    stamp: u64,
    hist: HashMap<Key, Hist>,
    /// resident keys, ordered (decisions iterate this, never the map)
    resident: BTreeMap<Key, ()>,
}

impl Hlfu {
    /// A history LFU whose counts halve every `half_life` tokens.
    pub fn new(half_life: f64) -> Hlfu {
        Hlfu {
            half_life: half_life.max(1e-9),
            now: 0,
            stamp: 0,
            hist: HashMap::new(),
            resident: BTreeMap::new(),
        }
    }

    fn touch(&mut self, key: Key) {
        self.stamp += 1;
        let (now, stamp, hl) = (self.now, self.stamp, self.half_life);
        let h = self.hist.entry(key).or_insert(Hist {
            count: 0.0,
            at: now,
            stamp,
        });
        h.count = h.count * decay(now - h.at, hl) + 1.0;
        h.at = now;
        h.stamp = stamp;
    }

    fn score(&self, key: Key) -> (f64, u64) {
        self.hist.get(&key).map_or((0.0, 0), |h| {
            (h.count * decay(self.now - h.at, self.half_life), h.stamp)
        })
    }
}

impl Policy for Hlfu {
    fn name(&self) -> &'static str {
        "hlfu"
    }
    fn begin_ubatch(&mut self, n_tokens: u32) {
        self.now += n_tokens as u64;
    }
    fn hit(&mut self, key: Key) {
        self.touch(key);
    }
    fn insert(&mut self, key: Key) {
        self.touch(key);
        self.resident.insert(key, ());
    }
    fn victim(&mut self, pinned: &dyn Fn(Key) -> bool) -> Option<Key> {
        let mut best: Option<(Key, (f64, u64))> = None;
        for &k in self.resident.keys() {
            if pinned(k) {
                continue;
            }
            let s = self.score(k);
            let better = match best {
                None => true,
                Some((_, b)) => s.0 < b.0 || (s.0 == b.0 && s.1 < b.1),
            };
            if better {
                best = Some((k, s));
            }
        }
        let (k, _) = best?;
        self.resident.remove(&k);
        Some(k)
    }
    fn len(&self) -> usize {
        self.resident.len()
    }
}
