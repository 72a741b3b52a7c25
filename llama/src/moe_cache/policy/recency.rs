//! A recency list of keys: touch moves a key to the most recent end; the
//! least recent unpinned key is found by walking from the old end. Ordered
//! by a stamp that only grows, so the order is a pure function of the
//! touches.

use std::collections::{BTreeMap, HashMap};

use super::Key;

/// Keys ordered from least to most recently touched.
#[derive(Clone, Debug, Default)]
pub struct Recency {
    by_stamp: BTreeMap<u64, Key>,
    stamp_of: HashMap<Key, u64>,
    next: u64,
}

impl Recency {
    /// An empty list.
    pub fn new() -> Recency {
        Recency::default()
    }

    /// Make `key` the most recent (inserting it if absent).
    pub fn touch(&mut self, key: Key) {
        if let Some(s) = self.stamp_of.get(&key) {
            self.by_stamp.remove(s);
        }
        self.next += 1;
        self.by_stamp.insert(self.next, key);
        self.stamp_of.insert(key, self.next);
    }

    /// Remove `key`; whether it was present.
    pub fn remove(&mut self, key: Key) -> bool {
        match self.stamp_of.remove(&key) {
            Some(s) => {
                self.by_stamp.remove(&s);
                true
            }
            None => false,
        }
    }

    /// Whether `key` is in the list.
    pub fn contains(&self, key: Key) -> bool {
        self.stamp_of.contains_key(&key)
    }

    /// The least recent key not pinned.
    pub fn oldest(&self, pinned: &dyn Fn(Key) -> bool) -> Option<Key> {
        self.by_stamp.values().copied().find(|&k| !pinned(k))
    }

    /// Keys in the list.
    pub fn len(&self) -> usize {
        self.stamp_of.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.stamp_of.is_empty()
    }
}
