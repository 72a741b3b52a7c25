//! Eviction policies of the expert cache: one trait, small pure
//! implementations.
//!
//! A policy sees only the sequence of `(layer, expert)` accesses, ubatch by
//! ubatch, in a fixed order (see [`Policy`]), and decides which resident key
//! to evict. It holds no clock and iterates no hash map when it decides, so
//! the same access sequence always gives the same decisions: the routing-
//! trace replay tool drives this very code, and [`belady::Belady`] (which
//! knows the future) implements the same trait.

pub mod adaptive;
pub mod admission;
pub mod belady;
pub mod hlfu;
pub mod lrfu;
pub mod lru;
pub mod nextuse;
pub mod phase;
pub mod recency;
pub mod slru;

use std::fmt;
use std::str::FromStr;

/// A cached expert: layer index (in the model) and expert index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Layer index in the model.
    pub layer: u32,
    /// Expert index in the layer.
    pub expert: u32,
}

impl Key {
    /// `(layer, expert)`.
    pub fn new(layer: u32, expert: u32) -> Key {
        Key { layer, expert }
    }
}

/// An eviction policy over the resident keys of one group of layers.
///
/// The driver ([`crate::moe_cache::cache::bank::SlotBank`]) calls, per ubatch:
/// [`Policy::begin_ubatch`] once; then for each cached layer in graph order
/// [`Policy::begin_layer`] with the layer's distinct experts (ascending),
/// [`Policy::hit`] for each resident one (ascending), and for each missing
/// one (ascending) [`Policy::victim`] when no slot is free, then
/// [`Policy::insert`]. A policy must never name a pinned key (an expert the
/// current layer needs) as victim.
pub trait Policy: Send {
    /// The policy's name (`lru`, `slru`, ...).
    fn name(&self) -> &'static str;
    /// The group's layers (ascending, the order a ubatch visits them) and
    /// experts per layer, once, before any access (the bank calls it).
    fn begin_group(&mut self, _layers: &[u32], _n_expert: u32) {}
    /// A ubatch of `n_tokens` tokens begins (time advances by `n_tokens`).
    fn begin_ubatch(&mut self, n_tokens: u32);
    /// The accesses of one layer in the current ubatch follow: `experts`
    /// are its distinct experts, ascending.
    fn begin_layer(&mut self, _layer: u32, _experts: &[u32]) {}
    /// A resident key was used.
    fn hit(&mut self, key: Key);
    /// A key became resident (after a miss).
    fn insert(&mut self, key: Key);
    /// Choose a resident key that `pinned` does not protect, and forget it
    /// (it is evicted). `None` only when every resident key is pinned.
    fn victim(&mut self, pinned: &dyn Fn(Key) -> bool) -> Option<Key>;
    /// Resident keys the policy tracks.
    fn len(&self) -> usize;
    /// Whether no key is resident.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The policies selectable by name (`--moe-cache-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PolicyKind {
    /// Least recently used.
    Lru,
    /// Segmented LRU: a probationary and a protected segment.
    Slru,
    /// Frequency-class LRU with decayed counts (half-life 128 tokens, 8 classes).
    Lrfu,
    /// Decayed frequency with a history that survives eviction (this
    /// project's); the default: the best against Belady over random, Zipf
    /// and topic-shaped routing (`docs/moe-cache-tuning.md`).
    #[default]
    Hlfu,
    /// Expected next use: Belady's rule on an online estimate of each
    /// expert's chance of use at its layer's next visit, with the layer
    /// walk's position and the history prediction's transitions.
    NextUse,
    /// [`PolicyKind::NextUse`] without the transitions (recency and
    /// frequency only), to measure what the prediction adds.
    NextUseNoPredict,
    /// [`PolicyKind::Lru`] behind the TinyLFU admission filter
    /// ([`admission::Admission`]): resists the layer loop.
    TlfuLru,
    /// [`PolicyKind::Slru`] behind the TinyLFU admission filter.
    TlfuSlru,
    /// [`PolicyKind::Lrfu`] behind the TinyLFU admission filter.
    TlfuLrfu,
    /// Adaptive selection ([`adaptive::Adaptive`]): `hlfu`,
    /// `nextuse-nopredict` and `nextuse` each drive a shadow cache, and
    /// the one with the most recent shadow hits decides the evictions.
    Adapt,
}

impl PolicyKind {
    /// Every selectable policy.
    pub const ALL: [PolicyKind; 10] = [
        PolicyKind::Lru,
        PolicyKind::Slru,
        PolicyKind::Lrfu,
        PolicyKind::Hlfu,
        PolicyKind::NextUse,
        PolicyKind::NextUseNoPredict,
        PolicyKind::TlfuLru,
        PolicyKind::TlfuSlru,
        PolicyKind::TlfuLrfu,
        PolicyKind::Adapt,
    ];

    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Slru => "slru",
            PolicyKind::Lrfu => "lrfu",
            PolicyKind::Hlfu => "hlfu",
            PolicyKind::NextUse => "nextuse",
            PolicyKind::NextUseNoPredict => "nextuse-nopredict",
            PolicyKind::TlfuLru => "tlfu-lru",
            PolicyKind::TlfuSlru => "tlfu-slru",
            PolicyKind::TlfuLrfu => "tlfu-lrfu",
            PolicyKind::Adapt => "adapt",
        }
    }

    /// Names of every policy, `|`-separated.
    pub fn names() -> String {
        PolicyKind::ALL.map(|k| k.name()).join("|")
    }

    /// A fresh policy for a group of `n_slots` slots.
    pub fn build(self, n_slots: usize) -> Box<dyn Policy> {
        match self {
            PolicyKind::Lru => Box::new(lru::Lru::new()),
            PolicyKind::Slru => Box::new(slru::Slru::new(n_slots)),
            PolicyKind::Lrfu => Box::new(lrfu::Lrfu::new(
                lrfu::DEFAULT_HALF_LIFE,
                lrfu::DEFAULT_CLASSES,
            )),
            PolicyKind::Hlfu => Box::new(hlfu::Hlfu::new(hlfu::DEFAULT_HALF_LIFE)),
            PolicyKind::NextUse => Box::new(nextuse::NextUse::new()),
            PolicyKind::NextUseNoPredict => Box::new(nextuse::NextUse::without_prediction()),
            PolicyKind::TlfuLru => self.admitted(PolicyKind::Lru, n_slots),
            PolicyKind::TlfuSlru => self.admitted(PolicyKind::Slru, n_slots),
            PolicyKind::TlfuLrfu => self.admitted(PolicyKind::Lrfu, n_slots),
            PolicyKind::Adapt => Box::new(adaptive::Adaptive::new(n_slots)),
        }
    }

    /// `inner` behind the admission filter, under this kind's name.
    fn admitted(self, inner: PolicyKind, n_slots: usize) -> Box<dyn Policy> {
        Box::new(admission::Admission::new(
            self.name(),
            inner.build(n_slots),
            n_slots,
        ))
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<PolicyKind, String> {
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!(
                    "unknown cache policy '{s}' (available: {})",
                    PolicyKind::names()
                )
            })
    }
}

/// `2^(-dt / half_life)`: the decay of a count after `dt` tokens.
pub(crate) fn decay(dt: u64, half_life: f64) -> f64 {
    (-(dt as f64) / half_life).exp2()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_is_an_error() {
        for k in PolicyKind::ALL {
            assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
        }
        let e = "mru".parse::<PolicyKind>().unwrap_err();
        assert!(
            e.contains("unknown cache policy 'mru'") && e.contains("lru|slru"),
            "{e}"
        );
    }
}
