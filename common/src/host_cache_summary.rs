//! The host expert cache's part of `llama-run`'s summary and `--stats-out`
//! (`moe_host_cache_*` keys, present only when the run had a host cache):
//! its hit rate, the bytes it read from disk (in all and per generated
//! token), the rate and latency of those reads.

use llama::moe_cache::host::HostCacheStats;
use serde::Serialize;

use crate::cli::fmt_bytes;

/// The host cache's figures of a run. Field names are `--stats-out` keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostCacheSummary {
    /// The host cache's eviction policy (`--moe-host-cache-policy`).
    pub moe_host_cache_policy: String,
    /// Its budget in MiB (what `--moe-host-cache-mib` resolved to).
    pub moe_host_cache_mib: f64,
    /// Needed experts found in the host cache (every ubatch).
    pub moe_host_cache_hits: u64,
    /// Needed experts read from disk into it (every ubatch).
    pub moe_host_cache_misses: u64,
    /// Hit rate over every ubatch.
    pub moe_host_cache_hit_rate: f64,
    /// Hit rate of decode (one-token) ubatches.
    pub moe_host_cache_hit_rate_decode: f64,
    /// Reads issued to the disk (one per run of adjacent experts of one
    /// tensor).
    pub moe_host_cache_disk_reads: u64,
    /// Bytes read from disk by the host cache, the whole run (the reads'
    /// aligned covers).
    pub moe_host_cache_disk_bytes: u64,
    /// Bytes read from disk per generated-token decode (generation only).
    pub moe_host_cache_disk_bytes_per_token: f64,
    /// Bytes per second over the wall time of the batches of reads.
    pub moe_host_cache_disk_read_rate: f64,
    /// Median latency of one read, milliseconds.
    pub moe_host_cache_read_p50_ms: f64,
    /// 99th percentile of the latency of one read, milliseconds.
    pub moe_host_cache_read_p99_ms: f64,
    /// Whether the reads bypass the page cache (`O_DIRECT`; false: the
    /// filesystem refused it and reads are buffered).
    pub moe_host_cache_direct: bool,
}

impl HostCacheSummary {
    /// The figures from the whole run's counters (`total`), those at the
    /// end of the prompt (`at_prompt`: generation is the difference) and
    /// the generated-token decodes.
    pub fn of(
        total: &HostCacheStats,
        at_prompt: Option<&HostCacheStats>,
        gen_decodes: usize,
    ) -> HostCacheSummary {
        let t = total.cache.total();
        let gen_bytes = match at_prompt {
            Some(p) => total.disk.bytes.saturating_sub(p.disk.bytes),
            None => total.disk.bytes,
        };
        HostCacheSummary {
            moe_host_cache_policy: total.cache.policy.clone(),
            moe_host_cache_mib: total.cache.budget_bytes as f64 / 1048576.0,
            moe_host_cache_hits: t.hits(),
            moe_host_cache_misses: t.misses(),
            moe_host_cache_hit_rate: total.hit_rate(),
            moe_host_cache_hit_rate_decode: t.hit_rate_decode(),
            moe_host_cache_disk_reads: total.disk.reads,
            moe_host_cache_disk_bytes: total.disk.bytes,
            moe_host_cache_disk_bytes_per_token: if gen_decodes > 0 {
                gen_bytes as f64 / gen_decodes as f64
            } else {
                0.0
            },
            moe_host_cache_disk_read_rate: total.disk.read_rate(),
            moe_host_cache_read_p50_ms: total.disk.latency_quantile(0.5) * 1e3,
            moe_host_cache_read_p99_ms: total.disk.latency_quantile(0.99) * 1e3,
            moe_host_cache_direct: total.direct,
        }
    }

    /// The summary's line.
    pub fn to_text(&self) -> String {
        let accesses = self.moe_host_cache_hits + self.moe_host_cache_misses;
        format!(
            "host cache    = {:.2} MiB ({}), hit rate {:.1}% of {} expert accesses (decode {:.1}%); disk {} in {} reads{} ({} per generated token), {}/s, read latency p50 {:.2} ms, p99 {:.2} ms\n",
            self.moe_host_cache_mib,
            self.moe_host_cache_policy,
            100.0 * self.moe_host_cache_hit_rate,
            accesses,
            100.0 * self.moe_host_cache_hit_rate_decode,
            fmt_bytes(self.moe_host_cache_disk_bytes as f64),
            self.moe_host_cache_disk_reads,
            if self.moe_host_cache_direct {
                " (O_DIRECT)"
            } else {
                " (buffered)"
            },
            fmt_bytes(self.moe_host_cache_disk_bytes_per_token),
            fmt_bytes(self.moe_host_cache_disk_read_rate),
            self.moe_host_cache_read_p50_ms,
            self.moe_host_cache_read_p99_ms,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use llama::moe_cache::host::DiskStats;
    use llama::moe_cache::{CacheStats, LayerCacheStats};

    fn stats(hits_d: u64, misses_d: u64, misses_p: u64, bytes: u64) -> HostCacheStats {
        let mut c = CacheStats {
            policy: "hlfu".into(),
            budget_bytes: 64 << 20,
            ..CacheStats::default()
        };
        c.layers.insert(
            0,
            LayerCacheStats {
                hits_decode: hits_d,
                misses_decode: misses_d,
                misses_prompt: misses_p,
                ..LayerCacheStats::default()
            },
        );
        HostCacheStats {
            cache: c,
            disk: DiskStats {
                reads: 4,
                bytes,
                read_secs: 0.004,
                batch_secs: 0.002,
                latencies: vec![0.001, 0.001, 0.001, 0.004],
            },
            direct: true,
        }
    }

    #[test]
    fn figures_of_a_run() {
        let prompt = stats(0, 0, 8, 1000);
        let total = stats(6, 2, 8, 5000);
        let s = HostCacheSummary::of(&total, Some(&prompt), 2);
        assert_eq!(s.moe_host_cache_hits, 6);
        assert_eq!(s.moe_host_cache_misses, 10);
        assert!((s.moe_host_cache_hit_rate - 6.0 / 16.0).abs() < 1e-12);
        assert!((s.moe_host_cache_hit_rate_decode - 0.75).abs() < 1e-12);
        // generation read 4000 bytes over 2 decodes
        assert_eq!(s.moe_host_cache_disk_bytes_per_token, 2000.0);
        assert_eq!(s.moe_host_cache_disk_read_rate, 2_500_000.0);
        assert_eq!(s.moe_host_cache_read_p50_ms, 1.0);
        assert_eq!(s.moe_host_cache_read_p99_ms, 4.0);
        assert_eq!(s.moe_host_cache_mib, 64.0);
        let t = s.to_text();
        assert!(
            t.starts_with("host cache    = 64.00 MiB (hlfu), hit rate 37.5%"),
            "{t}"
        );
        assert!(t.contains("(O_DIRECT)"), "{t}");
        // every key is the host cache's
        let v = serde_json::to_value(&s).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert!(
            keys.iter().all(|k| k.starts_with("moe_host_cache_")),
            "{keys:?}"
        );
        assert_eq!(keys.len(), 13);
    }
}
