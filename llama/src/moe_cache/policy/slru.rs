//! Segmented LRU: new experts enter a probationary segment; a hit there
//! promotes to a protected segment (at most 80% of the slots; its least
//! recent expert is demoted back when it overflows). Victims come from the
//! probationary segment first, so one-off experts cannot flush the ones
//! used again and again.

use super::recency::Recency;
use super::{Key, Policy};

/// Share of the slots the protected segment may hold, in percent.
pub const PROTECTED_PERCENT: usize = 80;

/// SLRU over one group's slots.
#[derive(Clone, Debug)]
pub struct Slru {
    probation: Recency,
    protected: Recency,
    protected_cap: usize,
}

impl Slru {
    /// An SLRU for `n_slots` slots.
    pub fn new(n_slots: usize) -> Slru {
        Slru {
            probation: Recency::new(),
            protected: Recency::new(),
            protected_cap: (n_slots * PROTECTED_PERCENT / 100).max(1),
        }
    }
}

impl Policy for Slru {
    fn name(&self) -> &'static str {
        "slru"
    }
    fn begin_ubatch(&mut self, _n_tokens: u32) {}
    fn hit(&mut self, key: Key) {
        self.probation.remove(key);
        self.protected.touch(key);
        while self.protected.len() > self.protected_cap {
            match self.protected.oldest(&|k| k == key) {
                Some(d) => {
                    self.protected.remove(d);
                    self.probation.touch(d);
                }
                None => break,
            }
        }
    }
    fn insert(&mut self, key: Key) {
        self.probation.touch(key);
    }
    fn victim(&mut self, pinned: &dyn Fn(Key) -> bool) -> Option<Key> {
        if let Some(k) = self.probation.oldest(pinned) {
            self.probation.remove(k);
            return Some(k);
        }
        let k = self.protected.oldest(pinned)?;
        self.protected.remove(k);
        Some(k)
    }
    fn len(&self) -> usize {
        self.probation.len() + self.protected.len()
    }
}
