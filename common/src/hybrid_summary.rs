//! Where the expert cache's experts were computed (hybrid experts), for
//! `llama-run`'s summary and `--stats-out`: on the CPU from host memory,
//! on the device from the cache, on the device after an upload; in all
//! and per ubatch kind (prompt, decode).

use llama::moe_cache::LayerCacheStats;
use serde::Serialize;

/// The counts; field names are `--stats-out` keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HybridCounts {
    /// Misses computed on the CPU from host memory.
    pub experts_cpu: u64,
    /// Hits: computed on the device from the cache.
    pub experts_device_cached: u64,
    /// Misses computed on the device after an upload.
    pub experts_device_uploaded: u64,
    /// `experts_cpu` of prompt ubatches.
    pub experts_cpu_prompt: u64,
    /// `experts_device_cached` of prompt ubatches.
    pub experts_device_cached_prompt: u64,
    /// `experts_device_uploaded` of prompt ubatches.
    pub experts_device_uploaded_prompt: u64,
    /// `experts_cpu` of decode ubatches.
    pub experts_cpu_decode: u64,
    /// `experts_device_cached` of decode ubatches.
    pub experts_device_cached_decode: u64,
    /// `experts_device_uploaded` of decode ubatches.
    pub experts_device_uploaded_decode: u64,
}

impl HybridCounts {
    /// The counts of a cache's total.
    pub fn of(t: &LayerCacheStats) -> HybridCounts {
        HybridCounts {
            experts_cpu: t.cpu(),
            experts_device_cached: t.hits(),
            experts_device_uploaded: t.misses(),
            experts_cpu_prompt: t.cpu_prompt,
            experts_device_cached_prompt: t.hits_prompt,
            experts_device_uploaded_prompt: t.misses_prompt,
            experts_cpu_decode: t.cpu_decode,
            experts_device_cached_decode: t.hits_decode,
            experts_device_uploaded_decode: t.misses_decode,
        }
    }

    /// The summary's line.
    pub fn to_text(&self, device: &str) -> String {
        format!(
            "moe experts   = decode: {} on the CPU, {} on {device} from the cache, {} on {device} after upload; prompt: {} / {} / {}\n",
            self.experts_cpu_decode,
            self.experts_device_cached_decode,
            self.experts_device_uploaded_decode,
            self.experts_cpu_prompt,
            self.experts_device_cached_prompt,
            self.experts_device_uploaded_prompt,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sum_the_kinds_and_serialize_under_the_exact_keys() {
        let t = LayerCacheStats {
            hits_decode: 5,
            misses_decode: 2,
            cpu_decode: 3,
            hits_prompt: 7,
            misses_prompt: 11,
            cpu_prompt: 1,
            ..Default::default()
        };
        let c = HybridCounts::of(&t);
        assert_eq!(
            (
                c.experts_cpu,
                c.experts_device_cached,
                c.experts_device_uploaded
            ),
            (4, 12, 13)
        );
        let v = serde_json::to_value(c).unwrap();
        for k in [
            "experts_cpu",
            "experts_device_cached",
            "experts_device_uploaded",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["experts_cpu_decode"], 3);
        let line = c.to_text("SIM0");
        assert!(
            line.contains("3 on the CPU") && line.contains("5 on SIM0 from the cache"),
            "{line}"
        );
    }
}
