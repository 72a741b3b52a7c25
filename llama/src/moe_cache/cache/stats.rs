//! Counters of the expert cache: per layer and in total, decode ubatches
//! (one token) and prompt ubatches (more) apart.

use std::collections::BTreeMap;

/// One layer's counters (or a sum of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayerCacheStats {
    /// Needed experts found in the bank, in decode ubatches.
    pub hits_decode: u64,
    /// Needed experts uploaded, in decode ubatches (misses computed on the
    /// device after an upload).
    pub misses_decode: u64,
    /// Needed experts found in the bank, in prompt ubatches.
    pub hits_prompt: u64,
    /// Needed experts uploaded, in prompt ubatches.
    pub misses_prompt: u64,
    /// Expert bytes uploaded into the banks (every role).
    pub bytes_uploaded: u64,
    /// Expert bytes served from the banks (every role): hits, and the
    /// bank reads of too-large ubatches.
    pub bytes_from_bank: u64,
    /// Experts evicted to make room for this layer's misses.
    pub evictions: u64,
    /// Reads of the router's ids (one per ubatch).
    pub id_reads: u64,
    /// Ranged writes into the banks (merged runs, per role).
    pub writes: u64,
    /// Ubatches too large for this layer's cache (more tokens than
    /// `--moe-cache-max-batch`, or than its slots hold at once), which took
    /// the selective copy.
    pub bypassed: u64,
    /// Experts such a too-large ubatch read from the bank (device to
    /// device) instead of from host memory; not inserted, not counted as
    /// hits, the policy does not see them.
    pub bypass_reads: u64,
    /// Misses computed on the CPU from host memory (hybrid experts), in
    /// decode ubatches: not uploaded, not inserted.
    pub cpu_decode: u64,
    /// Misses computed on the CPU, in prompt ubatches.
    pub cpu_prompt: u64,
}

impl LayerCacheStats {
    /// Hits of both kinds.
    pub fn hits(&self) -> u64 {
        self.hits_decode + self.hits_prompt
    }

    /// Uploaded misses of both kinds.
    pub fn misses(&self) -> u64 {
        self.misses_decode + self.misses_prompt
    }

    /// Misses computed on the CPU, of both kinds.
    pub fn cpu(&self) -> u64 {
        self.cpu_decode + self.cpu_prompt
    }

    /// Hit rate of decode ubatches (0 when there were none); misses the
    /// CPU computed count as misses.
    pub fn hit_rate_decode(&self) -> f64 {
        rate(self.hits_decode, self.misses_decode + self.cpu_decode)
    }

    /// Hit rate of prompt ubatches (0 when there were none).
    pub fn hit_rate_prompt(&self) -> f64 {
        rate(self.hits_prompt, self.misses_prompt + self.cpu_prompt)
    }

    /// Hit rate of every ubatch.
    pub fn hit_rate(&self) -> f64 {
        rate(self.hits(), self.misses() + self.cpu())
    }

    /// Add `o` to these counters.
    pub fn add(&mut self, o: &LayerCacheStats) {
        self.hits_decode += o.hits_decode;
        self.misses_decode += o.misses_decode;
        self.hits_prompt += o.hits_prompt;
        self.misses_prompt += o.misses_prompt;
        self.bytes_uploaded += o.bytes_uploaded;
        self.bytes_from_bank += o.bytes_from_bank;
        self.evictions += o.evictions;
        self.id_reads += o.id_reads;
        self.writes += o.writes;
        self.bypassed += o.bypassed;
        self.bypass_reads += o.bypass_reads;
        self.cpu_decode += o.cpu_decode;
        self.cpu_prompt += o.cpu_prompt;
    }

    /// `self - base`, field by field (saturating).
    pub fn since(&self, base: &LayerCacheStats) -> LayerCacheStats {
        LayerCacheStats {
            hits_decode: self.hits_decode.saturating_sub(base.hits_decode),
            misses_decode: self.misses_decode.saturating_sub(base.misses_decode),
            hits_prompt: self.hits_prompt.saturating_sub(base.hits_prompt),
            misses_prompt: self.misses_prompt.saturating_sub(base.misses_prompt),
            bytes_uploaded: self.bytes_uploaded.saturating_sub(base.bytes_uploaded),
            bytes_from_bank: self.bytes_from_bank.saturating_sub(base.bytes_from_bank),
            evictions: self.evictions.saturating_sub(base.evictions),
            id_reads: self.id_reads.saturating_sub(base.id_reads),
            writes: self.writes.saturating_sub(base.writes),
            bypassed: self.bypassed.saturating_sub(base.bypassed),
            bypass_reads: self.bypass_reads.saturating_sub(base.bypass_reads),
            cpu_decode: self.cpu_decode.saturating_sub(base.cpu_decode),
            cpu_prompt: self.cpu_prompt.saturating_sub(base.cpu_prompt),
        }
    }
}

fn rate(h: u64, m: u64) -> f64 {
    if h + m == 0 {
        0.0
    } else {
        h as f64 / (h + m) as f64
    }
}

/// One group as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// Layers of the group, ascending.
    pub layers: Vec<u32>,
    /// Slots (0 when the group falls back to the selective copy).
    pub n_slots: u32,
    /// Experts per layer.
    pub n_expert: u32,
    /// Experts the router picks per token.
    pub n_used: u32,
    /// Bytes of one slot over every role (gate, up, down).
    pub slot_bytes: u64,
    /// Device bytes of the group's banks (pad slots included).
    pub bank_bytes: u64,
    /// Whether the group has too few slots for one ubatch and uses the
    /// selective copy instead.
    pub fallback: bool,
}

/// Everything the cache counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheStats {
    /// The eviction policy.
    pub policy: String,
    /// Budget in bytes per device (what `--moe-cache-mib` resolved to).
    pub budget_bytes: u64,
    /// The groups.
    pub groups: Vec<GroupInfo>,
    /// Per cached layer.
    pub layers: BTreeMap<u32, LayerCacheStats>,
    /// Ubatches larger than `--moe-cache-max-batch`, which used the
    /// selective copy instead of the cache.
    pub ubatches_over_max_batch: u64,
    /// Ubatches served by the cache.
    pub ubatches: u64,
}

impl CacheStats {
    /// The sum over layers.
    pub fn total(&self) -> LayerCacheStats {
        let mut t = LayerCacheStats::default();
        for s in self.layers.values() {
            t.add(s);
        }
        t
    }

    /// The sum over the layers of group `g`.
    pub fn group_total(&self, g: usize) -> LayerCacheStats {
        let mut t = LayerCacheStats::default();
        if let Some(gi) = self.groups.get(g) {
            for l in &gi.layers {
                if let Some(s) = self.layers.get(l) {
                    t.add(s);
                }
            }
        }
        t
    }

    /// The counters since `base` (an earlier snapshot of the same cache).
    pub fn since(&self, base: &CacheStats) -> CacheStats {
        let layers = self
            .layers
            .iter()
            .map(|(l, s)| (*l, base.layers.get(l).map_or(*s, |b| s.since(b))))
            .collect();
        CacheStats {
            layers,
            ubatches_over_max_batch: self
                .ubatches_over_max_batch
                .saturating_sub(base.ubatches_over_max_batch),
            ubatches: self.ubatches.saturating_sub(base.ubatches),
            ..self.clone()
        }
    }
}
