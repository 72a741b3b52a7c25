//! Least recently used: evict the resident expert whose last use is oldest.

use super::recency::Recency;
use super::{Key, Policy};

/// LRU over one group's slots.
#[derive(Clone, Debug, Default)]
pub struct Lru {
    list: Recency,
}

impl Lru {
    /// An empty LRU.
    pub fn new() -> Lru {
        Lru::default()
    }
}

impl Policy for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }
    fn begin_ubatch(&mut self, _n_tokens: u32) {}
    fn hit(&mut self, key: Key) {
        self.list.touch(key);
    }
    fn insert(&mut self, key: Key) {
        self.list.touch(key);
    }
    fn victim(&mut self, pinned: &dyn Fn(Key) -> bool) -> Option<Key> {
        let k = self.list.oldest(pinned)?;
        self.list.remove(k);
        Some(k)
    }
    fn len(&self) -> usize {
        self.list.len()
    }
}
