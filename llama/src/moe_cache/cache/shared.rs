//! The cache's state at run time, shared by the copy hook (owned by the
//! scheduler) and the context: the layout, each group's slot bank, the
//! counters, and hybrid experts' split of the misses.

use std::sync::Arc;

use super::bank::SlotBank;
use super::layout::{CacheLayout, ROLES};
use super::stats::{CacheStats, LayerCacheStats};
use crate::error::LlamaError;
use crate::moe_cache::hybrid::HybridShared;
use crate::moe_cache::policy::PolicyKind;

/// The cache's state, shared by the hook (owned by the scheduler) and the
/// context.
pub struct CacheShared {
    /// The buffers and the per-layer view.
    pub layout: Arc<CacheLayout>,
    /// Slot state per group (`None` for a group that falls back).
    pub banks: Vec<Option<SlotBank>>,
    /// Counters.
    pub stats: CacheStats,
    /// Hybrid experts, when on: the CPU maps and how misses are split.
    pub hybrid: Option<HybridShared>,
    policy: PolicyKind,
    n_tokens: u32,
    /// Per group: its banks' memory is lent to a compute graph
    /// ([`crate::moe_cache::alias`]).
    lent: Vec<bool>,
}

impl CacheShared {
    /// State for `layout`, every group evicting by `policy`.
    pub fn new(layout: Arc<CacheLayout>, policy: PolicyKind, budget_bytes: u64) -> CacheShared {
        let banks = layout
            .groups
            .iter()
            .map(|g| {
                (!g.fallback).then(|| {
                    SlotBank::new(
                        &g.layers,
                        g.n_expert,
                        g.n_slots,
                        policy.build(g.n_slots as usize),
                    )
                })
            })
            .collect();
        let mut stats = CacheStats {
            policy: policy.name().to_string(),
            budget_bytes,
            groups: layout.groups.clone(),
            ..CacheStats::default()
        };
        for l in layout.layers.iter().flatten() {
            stats.layers.insert(l.layer, LayerCacheStats::default());
        }
        let lent = vec![false; layout.groups.len()];
        CacheShared {
            lent,
            layout,
            banks,
            stats,
            hybrid: None,
            policy,
            n_tokens: 0,
        }
    }

    /// A copy of the counters now.
    pub fn counters(&self) -> CacheStats {
        self.stats.clone()
    }

    /// Tokens of the ubatch being computed.
    pub fn n_tokens(&self) -> u32 {
        self.n_tokens
    }

    /// A ubatch of `n_tokens` tokens is about to be computed.
    pub fn begin_ubatch(&mut self, n_tokens: usize) {
        self.n_tokens = n_tokens as u32;
        if !self.layout.any_cached() {
            return;
        }
        if n_tokens > self.layout.max_batch {
            self.stats.ubatches_over_max_batch += 1;
        } else {
            self.stats.ubatches += 1;
        }
        // time advances for every ubatch, served or not
        for b in self.banks.iter_mut().flatten() {
            b.begin_ubatch(n_tokens as u32);
        }
    }

    /// The graph just built reads the host experts of these cached layers:
    /// their ubatch was too large for their cache.
    pub fn note_bypassed(&mut self, layers: &[u32]) {
        for &l in layers {
            self.stats.layers.entry(l).or_default().bypassed += 1;
        }
    }

    /// Forget everything group `g` holds (after a failed upload, so that no
    /// map names a slot whose bytes did not arrive).
    pub fn reset_group(&mut self, g: usize) {
        if let (Some(slot), Some(info)) = (self.banks.get_mut(g), self.layout.groups.get(g)) {
            if slot.is_some() {
                *slot = Some(SlotBank::new(
                    &info.layers,
                    info.n_expert,
                    info.n_slots,
                    self.policy.build(info.n_slots as usize),
                ));
            }
        }
    }

    /// Lend group `g`'s banks' memory to a compute graph: what they hold
    /// is forgotten (the graph overwrites it), and the group serves no
    /// layer until [`CacheShared::return_group`]. False for a group without
    /// banks.
    pub fn lend_group(&mut self, g: usize) -> bool {
        let held = match self.banks.get(g) {
            Some(Some(b)) => b.resident() > 0,
            _ => return false,
        };
        if held {
            self.reset_group(g);
        }
        self.lent[g] = true;
        true
    }

    /// Group `g`'s banks are back from a compute graph (empty).
    pub fn return_group(&mut self, g: usize) {
        if let Some(l) = self.lent.get_mut(g) {
            *l = false;
        }
    }

    /// Whether group `g`'s banks are lent to a compute graph.
    pub fn is_lent(&self, g: usize) -> bool {
        self.lent.get(g).copied().unwrap_or(false)
    }

    /// Check every bank's invariants (tests).
    pub fn check(&self) -> Result<(), String> {
        for b in self.banks.iter().flatten() {
            b.check()?;
        }
        Ok(())
    }

    /// Check the cache's invariants: the slot maps, the slots' owners and
    /// the policy agree, and every resident expert's bytes in the device's
    /// banks equal the host expert's (reads the banks back: for tests).
    pub fn verify(&self) -> crate::error::Result<()> {
        self.check().map_err(LlamaError::Invalid)?;
        for (gi, bank) in self.banks.iter().enumerate() {
            let Some(bank) = bank else { continue };
            for slot in 0..bank.n_slots() {
                let Some(k) = bank.owner(slot) else { continue };
                let Some(lc) = self.layout.layers[k.layer as usize].as_ref() else {
                    return Err(LlamaError::Invalid(format!(
                        "slot {slot} of group {gi} holds uncached layer {}",
                        k.layer
                    )));
                };
                for (r, role) in ROLES.iter().enumerate() {
                    let eb = lc.expert_bytes[r];
                    let mut dev = vec![0u8; eb];
                    let b = &lc.banks[r].0;
                    b.buffer.read(b.offset + slot as usize * eb, &mut dev)?;
                    let mut host = vec![0u8; eb];
                    let h = &lc.host[r];
                    h.buffer
                        .read(h.offset + k.expert as usize * eb, &mut host)?;
                    if dev != host {
                        return Err(LlamaError::Invalid(format!(
                            "slot {slot} of group {gi} should hold layer {} expert {} ({}), but its bytes differ",
                            k.layer,
                            k.expert,
                            role
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}
