//! Every MoE counter of a context in one snapshot ([`MoeStats`]): the
//! selective copy's, the cache's, the prefetch's and the prediction's. The
//! runtime keeps one snapshot as its reset baseline and reports the
//! difference ([`MoeStats::since`]), so a counter added to any of those
//! states reaches [`crate::Context::moe_stats`] with no change here.

use std::collections::BTreeMap;

use crate::expert_copy::ExpertCopyStats;
use crate::moe_cache::host::HostCacheStats;
use crate::moe_cache::predict::PredictStats;
use crate::moe_cache::prefetch::PrefetchStats;
use crate::moe_cache::CacheStats;
use crate::transfer_stats::TransferStats;

/// The MoE counters of a context (cumulative, or since a baseline).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MoeStats {
    /// The selective expert copy's counters.
    pub expert_copy: ExpertCopyStats,
    /// Expert bytes uploaded to each device backend (by name), by every
    /// path of the hook: selective copies, cache uploads, prefetch and
    /// prediction.
    pub bytes_by_backend: BTreeMap<String, u64>,
    /// The expert cache's counters; `None` without a cache (off, no
    /// device, or no experts in host memory).
    pub cache: Option<CacheStats>,
    /// The prefill prefetch's counters; `None` when it is off or has
    /// nothing to do (no device, or no experts in host memory).
    pub prefetch: Option<PrefetchStats>,
    /// The decode prediction's counters; `None` when `--moe-predict` is
    /// off or there is no cache.
    pub predict: Option<PredictStats>,
    /// The host expert cache's counters; `None` without one.
    pub host_cache: Option<HostCacheStats>,
}

impl MoeStats {
    /// `self - base`: each counter less its baseline (a part the baseline
    /// lacks counts from zero; a cache baseline taken before the cache
    /// existed leaves the cache's counters as they are).
    pub fn since(&self, base: &MoeStats) -> MoeStats {
        MoeStats {
            expert_copy: self.expert_copy.since(&base.expert_copy),
            bytes_by_backend: self
                .bytes_by_backend
                .iter()
                .map(|(name, &b)| {
                    let b0 = base.bytes_by_backend.get(name).copied().unwrap_or(0);
                    (name.clone(), b.saturating_sub(b0))
                })
                .collect(),
            cache: cache_since(self.cache.as_ref(), base.cache.as_ref()),
            prefetch: self
                .prefetch
                .as_ref()
                .map(|p| p.since(base.prefetch.as_ref().unwrap_or(&PrefetchStats::default()))),
            predict: self
                .predict
                .as_ref()
                .map(|p| p.since(base.predict.as_ref().unwrap_or(&PredictStats::default()))),
            host_cache: self.host_cache.as_ref().map(|h| match &base.host_cache {
                Some(b) => h.since(b),
                None => h.clone(),
            }),
        }
    }

    /// Add the expert traffic of every MoE path to `t`'s expert fields
    /// (replacing them): the selective copy's, the prefetch's, the
    /// prediction's and the cache's uploads. A cached layer's ubatch
    /// counts as a full copy of its experts would (so the ratio to full
    /// copies stays meaningful).
    pub fn expert_traffic(&self, t: &mut TransferStats) {
        let e = &self.expert_copy;
        t.h2d_bytes_experts = e.bytes;
        t.h2d_bytes_full_copy = e.full_bytes;
        t.experts_copied = e.experts_copied;
        t.experts_full_copy = e.experts_full;
        if let Some(p) = &self.prefetch {
            t.h2d_bytes_experts += p.bytes + p.selective_late_bytes;
            t.h2d_bytes_full_copy += p.bytes + p.selective_late_bytes;
            t.experts_copied += p.experts;
            t.experts_full_copy += p.experts;
        }
        if let Some(p) = &self.predict {
            t.h2d_bytes_experts += p.bytes;
        }
        if let Some(cs) = &self.cache {
            for (l, s) in &cs.layers {
                let Some(g) = cs.groups.iter().find(|g| g.layers.contains(l)) else {
                    continue;
                };
                t.h2d_bytes_experts += s.bytes_uploaded;
                t.h2d_bytes_full_copy += s.id_reads * g.n_expert as u64 * g.slot_bytes;
                t.experts_copied += s.misses() * 3;
                t.experts_full_copy += s.id_reads * g.n_expert as u64 * 3;
            }
        }
    }
}

/// The cache's counters since `base` (none yet: as they are).
pub(super) fn cache_since(
    now: Option<&CacheStats>,
    base: Option<&CacheStats>,
) -> Option<CacheStats> {
    let now = now?;
    Some(match base {
        Some(b) => now.since(b),
        None => now.clone(),
    })
}

/// Bytes in MiB.
pub(super) fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moe_cache::LayerCacheStats;

    fn stats(n: u64) -> MoeStats {
        let mut cache = CacheStats::default();
        cache.layers.insert(
            1,
            LayerCacheStats {
                hits_decode: 2 * n,
                ..Default::default()
            },
        );
        MoeStats {
            expert_copy: ExpertCopyStats {
                bytes: 10 * n,
                experts_copied: n,
                ..Default::default()
            },
            bytes_by_backend: [("SIM0".to_string(), 100 * n)].into_iter().collect(),
            cache: Some(cache),
            prefetch: Some(PrefetchStats {
                bytes: 3 * n,
                ..Default::default()
            }),
            predict: Some(PredictStats {
                bytes: 5 * n,
                ..Default::default()
            }),
            host_cache: None,
        }
    }

    #[test]
    fn since_a_baseline_subtracts_every_part_and_a_missing_part_counts_from_zero() {
        let d = stats(5).since(&stats(2));
        assert_eq!(d.expert_copy.bytes, 30);
        assert_eq!(d.expert_copy.experts_copied, 3);
        assert_eq!(d.bytes_by_backend.get("SIM0"), Some(&300));
        assert_eq!(d.cache.as_ref().map(|c| c.layers[&1].hits_decode), Some(6));
        assert_eq!(d.prefetch.map(|p| p.bytes), Some(9));
        assert_eq!(d.predict.map(|p| p.bytes), Some(15));
        // the zero baseline (a context never reset) changes nothing
        assert_eq!(stats(4).since(&MoeStats::default()), stats(4));
        // a part the context lacks stays absent
        let none = MoeStats::default().since(&stats(1));
        assert_eq!(
            (none.cache, none.prefetch, none.predict),
            (None, None, None)
        );
        assert!(none.bytes_by_backend.is_empty());
    }

    #[test]
    fn expert_traffic_adds_every_path_and_keeps_the_other_fields() {
        let mut t = TransferStats {
            h2d_bytes_other: 7,
            graphs: 2,
            ..Default::default()
        };
        let mut s = stats(1);
        s.cache = None;
        s.expert_traffic(&mut t);
        // copies 10 + prefetch 3 + prediction 5; full copies: 0 + prefetch 3
        assert_eq!(t.h2d_bytes_experts, 18);
        assert_eq!(t.h2d_bytes_full_copy, 3);
        assert_eq!(t.experts_copied, 1);
        assert_eq!((t.h2d_bytes_other, t.graphs), (7, 2));
    }
}
