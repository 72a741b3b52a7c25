//! The host cache's state at run time, shared by its copy hook (owned by
//! the scheduler) and the context: the device cache's state
//! ([`CacheShared`]: layout, slot banks and policy, hit and miss counters)
//! over CPU banks, the model file's reader, and the disk's counters.

use std::sync::Arc;

use super::disk::{DiskReader, ReadDone};
use crate::moe_cache::{CacheLayout, CacheShared, CacheStats, PolicyKind};

/// Largest number of read latencies kept for the percentiles.
const MAX_LATENCIES: usize = 1 << 20;

/// The disk's side of the host cache: reads, bytes, latencies.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiskStats {
    /// Reads issued: pieces of at most `disk::PIECE_BYTES` of the merged
    /// runs of adjacent experts of one tensor.
    pub reads: u64,
    /// Bytes the disk transferred (aligned covers of the wanted ranges).
    pub bytes: u64,
    /// Seconds the reads took, summed (several are in flight at once).
    pub read_secs: f64,
    /// Wall seconds of the batches of reads (a layer's misses, read
    /// several at once): `bytes / batch_secs` is the rate the disk gave.
    pub batch_secs: f64,
    /// Each read's latency in seconds, in order (the first
    /// `MAX_LATENCIES`).
    pub latencies: Vec<f64>,
}

impl DiskStats {
    /// Count the reads of one batch, which took `wall_secs`.
    pub fn add(&mut self, done: &[ReadDone], wall_secs: f64) {
        self.batch_secs += wall_secs;
        for d in done {
            self.reads += 1;
            self.bytes += d.disk_bytes;
            self.read_secs += d.secs;
            if self.latencies.len() < MAX_LATENCIES {
                self.latencies.push(d.secs);
            }
        }
    }

    /// `self - base` (the latencies after the base's).
    pub fn since(&self, base: &DiskStats) -> DiskStats {
        DiskStats {
            reads: self.reads.saturating_sub(base.reads),
            bytes: self.bytes.saturating_sub(base.bytes),
            read_secs: (self.read_secs - base.read_secs).max(0.0),
            batch_secs: (self.batch_secs - base.batch_secs).max(0.0),
            latencies: self
                .latencies
                .get(base.latencies.len()..)
                .unwrap_or(&[])
                .to_vec(),
        }
    }

    /// The `q`-quantile of the read latencies in seconds (nearest rank;
    /// 0 without reads).
    pub fn latency_quantile(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let mut v = self.latencies.clone();
        v.sort_by(f64::total_cmp);
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    /// Bytes per second over the batches' wall time (0 without reads).
    pub fn read_rate(&self) -> f64 {
        if self.batch_secs > 0.0 {
            self.bytes as f64 / self.batch_secs
        } else {
            0.0
        }
    }
}

/// The host cache's counters: the cache's (hits, misses, bytes read into
/// the banks, per layer) and the disk's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostCacheStats {
    /// Hits and misses per layer, as the device cache counts them
    /// (`bytes_uploaded` is the bytes read from the file into the banks).
    pub cache: CacheStats,
    /// The disk's reads.
    pub disk: DiskStats,
    /// Whether the reads bypass the page cache (`O_DIRECT`).
    pub direct: bool,
}

impl HostCacheStats {
    /// `self - base`.
    pub fn since(&self, base: &HostCacheStats) -> HostCacheStats {
        HostCacheStats {
            cache: self.cache.since(&base.cache),
            disk: self.disk.since(&base.disk),
            direct: self.direct,
        }
    }

    /// Hit rate over every ubatch the cache served (0 without accesses).
    pub fn hit_rate(&self) -> f64 {
        self.cache.total().hit_rate()
    }
}

/// The host cache's state.
pub struct HostCache {
    /// Slots, policy and counters (the device cache's, over CPU banks).
    pub cache: CacheShared,
    /// The model file.
    pub disk: DiskReader,
    /// The disk's counters.
    pub disk_stats: DiskStats,
}

impl HostCache {
    /// State for `layout` (CPU banks), evicting by `policy`, reading from
    /// `disk`.
    pub fn new(
        layout: Arc<CacheLayout>,
        policy: PolicyKind,
        budget: u64,
        disk: DiskReader,
    ) -> HostCache {
        HostCache {
            cache: CacheShared::new(layout, policy, budget),
            disk,
            disk_stats: DiskStats::default(),
        }
    }

    /// A copy of the counters now.
    pub fn counters(&self) -> HostCacheStats {
        HostCacheStats {
            cache: self.cache.counters(),
            disk: self.disk_stats.clone(),
            direct: self.disk.is_direct(),
        }
    }
}
