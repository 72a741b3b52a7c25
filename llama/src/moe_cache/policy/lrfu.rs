//! Frequency-class LRU (upstream's LRFU): each resident expert keeps a
//! count that decays with a half-life in tokens; the count's class
//! (`floor(log2(count))`, clamped to `0..classes`) ranks experts, and the
//! victim is the least recently used expert of the lowest class. A count
//! starts afresh when its expert is evicted.

use std::collections::BTreeMap;

use super::{decay, Key, Policy};

/// Upstream's half-life of a count, in tokens.
pub const DEFAULT_HALF_LIFE: f64 = 128.0;
/// Upstream's number of frequency classes.
pub const DEFAULT_CLASSES: u32 = 8;

#[derive(Clone, Copy, Debug)]
struct Entry {
    count: f64,
    /// time (tokens) of the last use
    at: u64,
    /// order of the last use
    stamp: u64,
}

/// LRFU over one group's slots.
#[derive(Clone, Debug)]
pub struct Lrfu {
    half_life: f64,
    classes: u32,
    now: u64,
    stamp: u64,
    resident: BTreeMap<Key, Entry>,
}

impl Lrfu {
    /// An LRFU with counts halving every `half_life` tokens and `classes`
    /// frequency classes.
    pub fn new(half_life: f64, classes: u32) -> Lrfu {
        Lrfu {
            half_life: half_life.max(1e-9),
            classes: classes.max(1),
            now: 0,
            stamp: 0,
            resident: BTreeMap::new(),
        }
    }

    fn class(&self, e: &Entry) -> u32 {
        let c = e.count * decay(self.now - e.at, self.half_life);
        if c < 2.0 {
            0
        } else {
            (c.log2().floor() as u32).min(self.classes - 1)
        }
    }

    fn touch(&mut self, key: Key, fresh: bool) {
        self.stamp += 1;
        let (now, stamp, hl) = (self.now, self.stamp, self.half_life);
        let e = self.resident.entry(key).or_insert(Entry {
            count: 0.0,
            at: now,
            stamp,
        });
        if fresh {
            e.count = 0.0;
        }
        e.count = e.count * decay(now - e.at, hl) + 1.0;
        e.at = now;
        e.stamp = stamp;
    }
}

impl Policy for Lrfu {
    fn name(&self) -> &'static str {
        "lrfu"
    }
    fn begin_ubatch(&mut self, n_tokens: u32) {
        self.now += n_tokens as u64;
    }
    fn hit(&mut self, key: Key) {
        self.touch(key, false);
    }
    fn insert(&mut self, key: Key) {
        self.touch(key, true);
    }
    fn victim(&mut self, pinned: &dyn Fn(Key) -> bool) -> Option<Key> {
        let k = self
            .resident
            .iter()
            .filter(|(k, _)| !pinned(**k))
            .min_by_key(|(_, e)| (self.class(e), e.stamp))
            .map(|(k, _)| *k)?;
        self.resident.remove(&k);
        Some(k)
    }
    fn len(&self) -> usize {
        self.resident.len()
    }
}
