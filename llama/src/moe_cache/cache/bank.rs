//! The slot state of one group: which `(layer, expert)` each slot of the
//! group's banks holds, each layer's slot map (`[n_expert]`, slot or -1),
//! the free slots, and the group's one eviction policy.
//!
//! [`SlotBank::access`] plans one layer's ubatch: hits keep their slots,
//! misses take the lowest free slot or evict the policy's victim (never an
//! expert the same access needs). It moves no bytes: the hook uploads what
//! the returned [`LayerAccess`] says, and a trace replay just counts.

use std::collections::{BTreeMap, BTreeSet};

use crate::moe_cache::policy::{Key, Policy};

/// What one layer's access did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerAccess {
    /// `(expert, slot)` of each needed expert already resident, ascending.
    pub hits: Vec<(u32, u32)>,
    /// `(expert, slot)` of each needed expert just given a slot (to upload),
    /// ascending by expert.
    pub misses: Vec<(u32, u32)>,
    /// Experts evicted to make room.
    pub evicted: Vec<Key>,
}

/// A run of uploads: experts `expert..expert + n` into slots `slot..slot + n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UploadRun {
    /// First expert.
    pub expert: u32,
    /// Its slot.
    pub slot: u32,
    /// Experts in the run.
    pub n: u32,
}

/// Merge misses (ascending by expert) whose experts and slots both follow
/// each other into runs, one ranged write each.
pub fn upload_runs(misses: &[(u32, u32)]) -> Vec<UploadRun> {
    let mut out: Vec<UploadRun> = Vec::new();
    for &(e, s) in misses {
        match out.last_mut() {
            Some(r) if r.expert + r.n == e && r.slot + r.n == s => r.n += 1,
            _ => out.push(UploadRun {
                expert: e,
                slot: s,
                n: 1,
            }),
        }
    }
    out
}

/// An access the bank cannot serve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BankError {
    /// The layer is not in this group.
    #[error("layer {0} is not cached in this group")]
    UnknownLayer(u32),
    /// An expert index outside the layer.
    #[error("expert {expert} of layer {layer} is out of range (the layer has {n_expert} experts)")]
    ExpertOutOfRange {
        /// Layer.
        layer: u32,
        /// Expert.
        expert: u32,
        /// Experts per layer.
        n_expert: u32,
    },
    /// More distinct experts than slots.
    #[error("layer {layer} needs {needed} experts at once but the group has {n_slots} slots")]
    TooFewSlots {
        /// Layer.
        layer: u32,
        /// Distinct experts needed.
        needed: usize,
        /// Slots of the group.
        n_slots: u32,
    },
    /// The policy named no victim (a policy bug).
    #[error("the {0} policy named no victim although unpinned experts are resident")]
    NoVictim(&'static str),
}

/// One group's slots, slot maps and policy.
pub struct SlotBank {
    n_slots: u32,
    n_expert: u32,
    owner: Vec<Option<Key>>,
    maps: BTreeMap<u32, Vec<i32>>,
    free: BTreeSet<u32>,
    policy: Box<dyn Policy>,
}

impl SlotBank {
    /// A bank of `n_slots` slots shared by `layers` of `n_expert` experts
    /// each, evicting by `policy`; every map starts at -1.
    pub fn new(
        layers: &[u32],
        n_expert: u32,
        n_slots: u32,
        mut policy: Box<dyn Policy>,
    ) -> SlotBank {
        let mut sorted = layers.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        policy.begin_group(&sorted, n_expert);
        SlotBank {
            n_slots,
            n_expert,
            owner: vec![None; n_slots as usize],
            maps: layers
                .iter()
                .map(|&l| (l, vec![-1; n_expert as usize]))
                .collect(),
            free: (0..n_slots).collect(),
            policy,
        }
    }

    /// Slots of the group.
    pub fn n_slots(&self) -> u32 {
        self.n_slots
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Layers of the group, ascending.
    pub fn layers(&self) -> impl Iterator<Item = u32> + '_ {
        self.maps.keys().copied()
    }

    /// The slot map of `layer` (`[n_expert]`, slot or -1).
    pub fn slot_map(&self, layer: u32) -> Option<&[i32]> {
        self.maps.get(&layer).map(|v| v.as_slice())
    }

    /// What slot `slot` holds.
    pub fn owner(&self, slot: u32) -> Option<Key> {
        self.owner.get(slot as usize).copied().flatten()
    }

    /// Experts resident.
    pub fn resident(&self) -> usize {
        self.owner.iter().filter(|o| o.is_some()).count()
    }

    /// A new ubatch of `n_tokens` tokens begins.
    pub fn begin_ubatch(&mut self, n_tokens: u32) {
        self.policy.begin_ubatch(n_tokens);
    }

    /// Whether every slot holds an expert.
    pub fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    /// Whether expert `e` of `layer` is resident (no policy update).
    pub fn is_resident(&self, layer: u32, e: u32) -> bool {
        self.maps
            .get(&layer)
            .and_then(|m| m.get(e as usize))
            .is_some_and(|&s| s >= 0)
    }

    /// Serve one layer's ubatch: `experts` are the ids the router picked
    /// (any order, repeats allowed).
    pub fn access(&mut self, layer: u32, experts: &[u32]) -> Result<LayerAccess, BankError> {
        self.access_with(layer, experts, &[], &[])
    }

    /// [`Self::access`], except that the misses in `skip` (ascending; the
    /// experts hybrid placement computes on the CPU) are neither given a
    /// slot nor inserted: the policy sees them needed, and they stay
    /// absent from the map.
    pub fn access_except(
        &mut self,
        layer: u32,
        experts: &[u32],
        skip: &[u32],
    ) -> Result<LayerAccess, BankError> {
        self.access_with(layer, experts, skip, &[])
    }

    /// [`SlotBank::access`] that also never evicts the keys in `protect`
    /// (the experts a split still computing reads: the decode prediction
    /// uploads while it runs).
    pub fn access_protecting(
        &mut self,
        layer: u32,
        experts: &[u32],
        protect: &[Key],
    ) -> Result<LayerAccess, BankError> {
        self.access_with(layer, experts, &[], protect)
    }

    /// [`Self::access_except`] and [`Self::access_protecting`] at once:
    /// misses in `skip` get no slot, keys in `protect` are never evicted.
    pub fn access_with(
        &mut self,
        layer: u32,
        experts: &[u32],
        skip: &[u32],
        protect: &[Key],
    ) -> Result<LayerAccess, BankError> {
        let n_expert = self.n_expert;
        if !self.maps.contains_key(&layer) {
            return Err(BankError::UnknownLayer(layer));
        }
        if let Some(&e) = experts.iter().find(|&&e| e >= n_expert) {
            return Err(BankError::ExpertOutOfRange {
                layer,
                expert: e,
                n_expert,
            });
        }
        let need: BTreeSet<u32> = experts.iter().copied().collect();
        let on_device = need
            .iter()
            .filter(|e| skip.binary_search(e).is_err())
            .count();
        if on_device > self.n_slots as usize {
            return Err(BankError::TooFewSlots {
                layer,
                needed: on_device,
                n_slots: self.n_slots,
            });
        }
        let need: Vec<u32> = need.into_iter().collect();
        self.policy.begin_layer(layer, &need);
        let mut acc = LayerAccess::default();
        let mut missing = Vec::new();
        {
            let map = &self.maps[&layer];
            for &e in &need {
                match map[e as usize] {
                    s if s >= 0 => acc.hits.push((e, s as u32)),
                    _ if skip.binary_search(&e).is_ok() => {}
                    _ => missing.push(e),
                }
            }
        }
        for &(e, _) in &acc.hits {
            self.policy.hit(Key::new(layer, e));
        }
        for e in missing {
            let slot = match self.free.pop_first() {
                Some(s) => s,
                None => {
                    let pinned = |k: Key| {
                        (k.layer == layer && need.binary_search(&k.expert).is_ok())
                            || protect.contains(&k)
                    };
                    let v = self
                        .policy
                        .victim(&pinned)
                        .ok_or(BankError::NoVictim(self.policy.name()))?;
                    let vmap = self
                        .maps
                        .get_mut(&v.layer)
                        .ok_or(BankError::NoVictim(self.policy.name()))?;
                    let s = vmap[v.expert as usize];
                    if s < 0 || pinned(v) {
                        return Err(BankError::NoVictim(self.policy.name()));
                    }
                    vmap[v.expert as usize] = -1;
                    self.owner[s as usize] = None;
                    acc.evicted.push(v);
                    s as u32
                }
            };
            if let Some(m) = self.maps.get_mut(&layer) {
                m[e as usize] = slot as i32;
            }
            self.owner[slot as usize] = Some(Key::new(layer, e));
            self.policy.insert(Key::new(layer, e));
            acc.misses.push((e, slot));
        }
        Ok(acc)
    }

    /// Check that the maps, the slot owners, the free list and the policy
    /// agree: each slot holds at most one expert, the map names it, free
    /// slots hold nothing, and the policy tracks exactly the residents.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for (&l, map) in &self.maps {
            for (e, &s) in map.iter().enumerate() {
                if s < 0 {
                    continue;
                }
                if s as u32 >= self.n_slots {
                    return Err(format!("layer {l} expert {e}: slot {s} out of range"));
                }
                if !seen.insert(s) {
                    return Err(format!("slot {s} named by two experts"));
                }
                if self.owner[s as usize] != Some(Key::new(l, e as u32)) {
                    return Err(format!(
                        "layer {l} expert {e} maps to slot {s}, which holds {:?}",
                        self.owner[s as usize]
                    ));
                }
            }
        }
        for (s, o) in self.owner.iter().enumerate() {
            let free = self.free.contains(&(s as u32));
            match o {
                Some(k) if free => return Err(format!("slot {s} is free but holds {k:?}")),
                Some(k) if !seen.contains(&(s as i32)) => {
                    return Err(format!("slot {s} holds {k:?} but no map names it"))
                }
                None if !free => return Err(format!("slot {s} is empty but not free")),
                _ => {}
            }
        }
        if self.policy.len() != seen.len() {
            return Err(format!(
                "the policy tracks {} experts, {} are resident",
                self.policy.len(),
                seen.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moe_cache::policy::PolicyKind;

    #[test]
    fn runs_merge_consecutive_experts_in_consecutive_slots() {
        let m = [(1, 0), (2, 1), (3, 2), (5, 3), (6, 7)];
        let r = upload_runs(&m);
        assert_eq!(
            r,
            vec![
                UploadRun {
                    expert: 1,
                    slot: 0,
                    n: 3
                },
                UploadRun {
                    expert: 5,
                    slot: 3,
                    n: 1
                },
                UploadRun {
                    expert: 6,
                    slot: 7,
                    n: 1
                },
            ]
        );
    }

    #[test]
    fn lru_evicts_the_oldest_and_never_a_needed_expert() {
        let mut b = SlotBank::new(&[0, 1], 8, 3, PolicyKind::Lru.build(3));
        b.begin_ubatch(1);
        let a = b.access(0, &[2, 1, 2]).unwrap();
        assert_eq!(a.misses, vec![(1, 0), (2, 1)]);
        let a = b.access(1, &[5]).unwrap();
        assert_eq!(a.misses, vec![(5, 2)]);
        b.begin_ubatch(1);
        // layer 0 needs 1 and 3: 1 hits; 3 evicts the oldest unpinned, (0, 2)
        let a = b.access(0, &[3, 1]).unwrap();
        assert_eq!(a.hits, vec![(1, 0)]);
        assert_eq!(a.evicted, vec![Key::new(0, 2)]);
        assert_eq!(a.misses, vec![(3, 1)]);
        b.check().unwrap();
        let e = b.access(0, &[0, 1, 2, 3]).unwrap_err();
        assert!(e.to_string().contains("needs 4 experts"), "{e}");
        assert!(matches!(
            b.access(0, &[8]),
            Err(BankError::ExpertOutOfRange { .. })
        ));
        assert!(matches!(b.access(7, &[0]), Err(BankError::UnknownLayer(7))));
    }

    #[test]
    fn skipped_misses_get_no_slot_and_hits_stay_hits() {
        let mut b = SlotBank::new(&[0], 8, 2, PolicyKind::Lru.build(2));
        b.begin_ubatch(1);
        b.access(0, &[1]).unwrap();
        // 1 hits, 4 is computed elsewhere, 6 takes the free slot
        let a = b.access_except(0, &[4, 1, 6], &[1, 4]).unwrap();
        assert_eq!(a.hits, vec![(1, 0)]);
        assert_eq!(a.misses, vec![(6, 1)]);
        assert!(!b.is_resident(0, 4) && b.is_resident(0, 6) && b.is_full());
        // three experts, two slots: fine when one is skipped
        let a = b.access_except(0, &[1, 2, 6], &[2]).unwrap();
        assert_eq!(a.hits.len(), 2);
        assert!(a.misses.is_empty());
        b.check().unwrap();
    }
}
