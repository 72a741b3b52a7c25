//! Belady's optimum (MIN): with the whole future access sequence known,
//! evict the resident expert whose next use is farthest away (never used
//! again first). It implements [`Policy`] like the others, so a trace
//! replay can run it through the same driver and compare.
//!
//! Resident keys are kept ordered by their next use, so a victim is found
//! in logarithmic time (a key's next use only changes when it is used).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use super::{Key, Policy};

/// Belady's MIN over a known sequence of layer steps.
#[derive(Clone, Debug)]
pub struct Belady {
    /// for each key, the steps at which it is used, ascending
    uses: HashMap<Key, Vec<u64>>,
    /// the current step (one per `begin_layer`), 0 before the first
    step: u64,
    /// resident keys by (next use, key reversed): the last is the victim
    by_next: BTreeSet<(u64, Reverse<Key>)>,
    /// each resident key's entry in `by_next`
    next_of: HashMap<Key, u64>,
}

impl Belady {
    /// Belady over `steps`: the future, one entry per `(layer, experts)`
    /// access in the order the driver will call [`Policy::begin_layer`].
    pub fn new(steps: &[(u32, Vec<u32>)]) -> Belady {
        let mut uses: HashMap<Key, Vec<u64>> = HashMap::new();
        for (i, (layer, experts)) in steps.iter().enumerate() {
            for &e in experts {
                uses.entry(Key::new(*layer, e))
                    .or_default()
                    .push(i as u64 + 1);
            }
        }
        Belady {
            uses,
            step: 0,
            by_next: BTreeSet::new(),
            next_of: HashMap::new(),
        }
    }

    /// The first step after the current one at which `key` is used.
    fn next_use(&self, key: Key) -> u64 {
        let Some(v) = self.uses.get(&key) else {
            return u64::MAX;
        };
        let i = v.partition_point(|&s| s <= self.step);
        v.get(i).copied().unwrap_or(u64::MAX)
    }

    /// (Re)file a resident `key` under its next use after this step.
    fn refile(&mut self, key: Key) {
        if let Some(n) = self.next_of.remove(&key) {
            self.by_next.remove(&(n, Reverse(key)));
        }
        let n = self.next_use(key);
        self.by_next.insert((n, Reverse(key)));
        self.next_of.insert(key, n);
    }
}

impl Policy for Belady {
    fn name(&self) -> &'static str {
        "belady"
    }
    fn begin_ubatch(&mut self, _n_tokens: u32) {}
    fn begin_layer(&mut self, _layer: u32, _experts: &[u32]) {
        self.step += 1;
    }
    fn hit(&mut self, key: Key) {
        self.refile(key);
    }
    fn insert(&mut self, key: Key) {
        self.refile(key);
    }
    fn victim(&mut self, pinned: &dyn Fn(Key) -> bool) -> Option<Key> {
        // the farthest next use, the smallest key among equals
        let &(n, Reverse(k)) = self
            .by_next
            .iter()
            .rev()
            .find(|(_, Reverse(k))| !pinned(*k))?;
        self.by_next.remove(&(n, Reverse(k)));
        self.next_of.remove(&k);
        Some(k)
    }
    fn len(&self) -> usize {
        self.next_of.len()
    }
}
