//! Property test of the cache's slot state: random access sequences,
//! random slot counts, every policy (Belady included). After every access
//! the bank never holds an expert twice, a hit is served from the slot the
//! map names, the map and the slot owners agree, and no eviction drops an
//! expert the same access needs.

use std::collections::BTreeSet;

use llama::moe_cache::policy::belady::Belady;
use llama::moe_cache::{Key, Policy, PolicyKind, SlotBank};
use proptest::prelude::*;

/// ubatches of `(tokens, per layer: ids)`.
type Trace = Vec<(u32, Vec<(u32, Vec<u32>)>)>;

fn trace() -> impl Strategy<Value = (u32, u32, u32, Trace)> {
    (2u32..4, 4u32..12, 1u32..4).prop_flat_map(|(n_layer, n_expert, n_used)| {
        let ub = (1u32..4).prop_flat_map(move |nt| {
            let layer = proptest::collection::vec(0..n_expert, (n_used * nt) as usize);
            (
                Just(nt),
                proptest::collection::vec(layer, n_layer as usize).prop_map(|ls| {
                    ls.into_iter()
                        .enumerate()
                        .map(|(l, ids)| (l as u32, ids))
                        .collect::<Vec<_>>()
                }),
            )
        });
        (
            Just(n_layer),
            Just(n_expert),
            Just(n_used),
            proptest::collection::vec(ub, 1..24),
        )
    })
}

fn run(n_layer: u32, n_expert: u32, n_slots: u32, policy: Box<dyn Policy>, t: &Trace) {
    let layers: Vec<u32> = (0..n_layer).collect();
    let name = policy.name();
    let mut bank = SlotBank::new(&layers, n_expert, n_slots, policy);
    for (nt, ls) in t {
        bank.begin_ubatch(*nt);
        for (l, ids) in ls {
            let need: BTreeSet<u32> = ids.iter().copied().collect();
            let before: Vec<i32> = bank.slot_map(*l).expect("map").to_vec();
            let acc = bank.access(*l, ids).expect("access");
            for &(e, s) in &acc.hits {
                assert_eq!(
                    before[e as usize], s as i32,
                    "{name}: a hit from another slot"
                );
                assert_eq!(bank.owner(s), Some(Key::new(*l, e)));
            }
            for k in &acc.evicted {
                assert!(
                    !(k.layer == *l && need.contains(&k.expert)),
                    "{name}: evicted {k:?}, which the access needs"
                );
            }
            let map = bank.slot_map(*l).expect("map");
            for &e in &need {
                let s = map[e as usize];
                assert!(s >= 0, "{name}: needed expert {e} has no slot");
                assert_eq!(bank.owner(s as u32), Some(Key::new(*l, e)));
            }
            assert_eq!(acc.hits.len() + acc.misses.len(), need.len());
            bank.check().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn banks_and_maps_stay_consistent((n_layer, n_expert, n_used, t) in trace(), extra in 0u32..40) {
        let max_nt = t.iter().map(|u| u.0).max().unwrap_or(1);
        // enough slots for one access, up to more than every expert
        let n_slots = (n_used * max_nt).min(n_expert) + extra;
        for k in PolicyKind::ALL {
            run(n_layer, n_expert, n_slots, k.build(n_slots as usize), &t);
        }
        let steps: Vec<(u32, Vec<u32>)> = t
            .iter()
            .flat_map(|(_, ls)| ls.iter().map(|(l, ids)| {
                let s: BTreeSet<u32> = ids.iter().copied().collect();
                (*l, s.into_iter().collect())
            }))
            .collect();
        run(n_layer, n_expert, n_slots, Box::new(Belady::new(&steps)), &t);
    }

    #[test]
    fn belady_never_misses_more_than_any_policy((n_layer, n_expert, n_used, t) in trace(), extra in 0u32..6) {
        let max_nt = t.iter().map(|u| u.0).max().unwrap_or(1);
        let n_slots = (n_used * max_nt).min(n_expert) + extra;
        let layers: Vec<u32> = (0..n_layer).collect();
        let steps: Vec<(u32, Vec<u32>)> = t
            .iter()
            .flat_map(|(_, ls)| ls.iter().map(|(l, ids)| {
                let s: BTreeSet<u32> = ids.iter().copied().collect();
                (*l, s.into_iter().collect())
            }))
            .collect();
        let misses = |p: Box<dyn Policy>| {
            let mut b = SlotBank::new(&layers, n_expert, n_slots, p);
            let mut m = 0;
            for (nt, ls) in &t {
                b.begin_ubatch(*nt);
                for (l, ids) in ls {
                    m += b.access(*l, ids).expect("access").misses.len();
                }
            }
            m
        };
        let opt = misses(Box::new(Belady::new(&steps)));
        for k in PolicyKind::ALL {
            let m = misses(k.build(n_slots as usize));
            prop_assert!(opt <= m, "belady {} > {} {}", opt, k, m);
        }
    }
}

#[test]
fn policies_are_deterministic() {
    let t: Trace = (0..50)
        .map(|i| {
            (
                1,
                vec![
                    (0, vec![(i * 7) % 13, (i * 3) % 13]),
                    (1, vec![(i * 5) % 13]),
                ],
            )
        })
        .collect();
    for k in PolicyKind::ALL {
        let go = || {
            let mut b = SlotBank::new(&[0, 1], 13, 6, k.build(6));
            let mut log = Vec::new();
            for (nt, ls) in &t {
                b.begin_ubatch(*nt);
                for (l, ids) in ls {
                    log.push(b.access(*l, ids).expect("access"));
                }
            }
            log
        };
        assert_eq!(go(), go(), "{k}");
    }
}
