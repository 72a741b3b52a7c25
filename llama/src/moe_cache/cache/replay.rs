//! Replaying a routing trace through the cache's own code: the same
//! [`SlotBank`] and policies the hook drives, with no device. A trace is
//! the sequence of ubatches, each with the router's ids per cached layer;
//! the result counts what a cache of a given size would have done.
//! [`belady_steps`] turns a trace into the future Belady's optimum needs,
//! in the order the bank presents accesses.

use std::collections::BTreeMap;

use super::bank::{BankError, LayerAccess, SlotBank};
use super::stats::LayerCacheStats;
use crate::moe_cache::policy::Policy;

/// One ubatch of a trace: its token count and, per cached layer in graph
/// order, the ids the router picked (`n_used * n_tokens`, any order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceUbatch {
    /// Tokens in the ubatch (decode ubatches have one).
    pub n_tokens: u32,
    /// `(layer, ids)` in graph order.
    pub layers: Vec<(u32, Vec<u32>)>,
}

/// Replay `trace` through a bank of `n_slots` slots shared by `layers` of
/// `n_expert` experts, evicting by `policy`. Byte counters count one byte
/// per expert (multiply by a slot's bytes). Layers not in `layers` are
/// skipped.
pub fn replay(
    layers: &[u32],
    n_expert: u32,
    n_slots: u32,
    policy: Box<dyn Policy>,
    trace: &[TraceUbatch],
) -> Result<BTreeMap<u32, LayerCacheStats>, BankError> {
    let mut bank = SlotBank::new(layers, n_expert, n_slots, policy);
    let mut out: BTreeMap<u32, LayerCacheStats> = layers
        .iter()
        .map(|&l| (l, LayerCacheStats::default()))
        .collect();
    for ub in trace {
        bank.begin_ubatch(ub.n_tokens);
        for (l, ids) in &ub.layers {
            let Some(st) = out.get_mut(l) else { continue };
            let acc = bank.access(*l, ids)?;
            count_access(st, ub.n_tokens, &acc);
        }
    }
    Ok(out)
}

/// Count one replayed layer access of a ubatch of `n_tokens` tokens into
/// `st`: hits and misses (decode or prompt), bytes counted one per expert,
/// evictions, and the id read.
pub fn count_access(st: &mut LayerCacheStats, n_tokens: u32, acc: &LayerAccess) {
    let (h, m) = (acc.hits.len() as u64, acc.misses.len() as u64);
    if n_tokens <= 1 {
        st.hits_decode += h;
        st.misses_decode += m;
    } else {
        st.hits_prompt += h;
        st.misses_prompt += m;
    }
    st.bytes_uploaded += m;
    st.bytes_from_bank += h;
    st.evictions += acc.evicted.len() as u64;
    st.id_reads += 1;
}

/// The future of `trace` as [`crate::moe_cache::policy::belady::Belady::new`] takes
/// it: one `(layer, distinct experts ascending)` per layer access, in
/// order, restricted to `layers`.
pub fn belady_steps(layers: &[u32], trace: &[TraceUbatch]) -> Vec<(u32, Vec<u32>)> {
    trace
        .iter()
        .flat_map(|ub| ub.layers.iter())
        .filter(|(l, _)| layers.contains(l))
        .map(|(l, ids)| {
            let mut v = ids.clone();
            v.sort_unstable();
            v.dedup();
            (*l, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moe_cache::policy::belady::Belady;
    use crate::moe_cache::policy::PolicyKind;

    #[test]
    fn belady_beats_lru_on_a_cyclic_trace() {
        // 3 experts cycling through 2 slots: LRU always misses, MIN hits half
        let trace: Vec<TraceUbatch> = (0..30)
            .map(|i| TraceUbatch {
                n_tokens: 1,
                layers: vec![(0, vec![i % 3])],
            })
            .collect();
        let misses = |p| replay(&[0], 3, 2, p, &trace).unwrap()[&0].misses_decode;
        let lru = misses(PolicyKind::Lru.build(2));
        let opt = misses(Box::new(Belady::new(&belady_steps(&[0], &trace))));
        assert_eq!(lru, 30);
        assert!(opt <= 16, "{opt}");
    }

    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// The fewest misses any eviction choices give: every victim among the
    /// unpinned residents tried, free slots filled first.
    fn brute_min(steps: &[(u32, Vec<u32>)], n_slots: usize, res: &BTreeSet<(u32, u32)>) -> u64 {
        let Some(((layer, need), rest)) = steps.split_first() else {
            return 0;
        };
        let missing: Vec<(u32, u32)> = need
            .iter()
            .map(|&e| (*layer, e))
            .filter(|k| !res.contains(k))
            .collect();
        fn place(
            missing: &[(u32, u32)],
            res: &BTreeSet<(u32, u32)>,
            n_slots: usize,
            layer: u32,
            need: &[u32],
            rest: &[(u32, Vec<u32>)],
        ) -> u64 {
            let Some((k, more)) = missing.split_first() else {
                return brute_min(rest, n_slots, res);
            };
            if res.len() < n_slots {
                let mut r = res.clone();
                r.insert(*k);
                return place(more, &r, n_slots, layer, need, rest);
            }
            res.iter()
                .filter(|v| !(v.0 == layer && need.contains(&v.1)))
                .map(|v| {
                    let mut r = res.clone();
                    r.remove(v);
                    r.insert(*k);
                    place(more, &r, n_slots, layer, need, rest)
                })
                .min()
                .unwrap_or(u64::MAX)
        }
        missing.len() as u64 + place(&missing, res, n_slots, *layer, need, rest)
    }

    fn tiny_trace() -> impl Strategy<Value = (u32, Vec<TraceUbatch>)> {
        (2u32..4).prop_flat_map(|n_slots| {
            let ub = (
                0u32..2,
                proptest::collection::btree_set(0u32..5, 1..=n_slots as usize),
            )
                .prop_map(|(l, ids)| TraceUbatch {
                    n_tokens: 1,
                    layers: vec![(l, ids.into_iter().collect())],
                });
            (Just(n_slots), proptest::collection::vec(ub, 1..9))
        })
    }

    proptest! {
        #[test]
        fn belady_is_the_brute_force_optimum_and_no_policy_beats_it((n_slots, trace) in tiny_trace()) {
            let layers = [0, 1];
            let misses = |p: Box<dyn Policy>| -> u64 {
                replay(&layers, 5, n_slots, p, &trace).unwrap().values().map(|s| s.misses()).sum()
            };
            let opt = misses(Box::new(Belady::new(&belady_steps(&layers, &trace))));
            let brute = brute_min(&belady_steps(&layers, &trace), n_slots as usize, &BTreeSet::new());
            prop_assert_eq!(opt, brute);
            for k in PolicyKind::ALL {
                prop_assert!(misses(k.build(n_slots as usize)) >= opt, "{} beat belady", k);
            }
        }
    }
}
