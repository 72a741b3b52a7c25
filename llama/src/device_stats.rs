//! Per-device counters of a context over several devices (`--stats-out`
//! key `devices`): each device's layers, its expert cache's budget and
//! decode hit rate, and the expert bytes uploaded to it.

/// One device's counters. With the `serde` feature it serializes as its
/// field names (the keys of each object of `--stats-out`'s `devices`).
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DeviceStats {
    /// The device's name (`SIM0`, `CUDA1`).
    pub name: String,
    /// How many of the model's layers (the output head not counted) the
    /// device holds.
    pub layers: usize,
    /// Its expert cache's budget in MiB (0: no cache on it).
    pub moe_cache_mib: f64,
    /// Its cache's hit rate in decode (one-token) ubatches, over the layers
    /// it caches (0 without a cache or decodes).
    pub moe_cache_hit_rate: f64,
    /// Expert bytes uploaded to it from host memory: selective copies,
    /// cache uploads, prefetch and prediction (the devices' values sum to
    /// the context's `h2d_bytes_experts`).
    pub h2d_bytes_experts: u64,
}
