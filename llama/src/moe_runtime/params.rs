//! A context's MoE settings in one typed struct ([`MoeParams`], the `moe`
//! field of [`crate::ContextParams`]): which of the MoE features are on
//! and how, with llama.cpp's and upstream's flag names in the docs.

use std::sync::Arc;

use crate::moe_cache::host::HostCacheParams;
use crate::moe_cache::hybrid::CpuShare;
use crate::moe_cache::predict::MoePredict;
use crate::moe_cache::prefetch::PrefetchSlots;
use crate::moe_cache::trace::forced::ForcedRouting;
use crate::moe_cache::{CacheSize, MoeCacheParams};

/// The MoE features of a context. The default is the library's: the
/// selective expert copy on, every other feature off (the tools turn the
/// cache and hybrid experts on).
#[derive(Clone, Debug)]
pub struct MoeParams {
    /// Copy only the experts the router picked when a device computes with
    /// host experts (`false`: full copies, for comparison;
    /// `--no-expert-copy`).
    pub expert_copy: bool,
    /// The device cache of host experts (`--moe-cache-mib`, ...); off by
    /// default in the library (the tools default to `auto`). With several
    /// devices each has a cache of this size ([`crate::moe_cache::cache::layout`]).
    pub cache: MoeCacheParams,
    /// One cache size per device (`--moe-cache-mib A,B`), in
    /// [`crate::Model::devices`] order; empty (the default): `cache.size`
    /// for every device.
    pub cache_sizes: Vec<CacheSize>,
    /// Hybrid experts (`--moe-cache-cpu-share`, `--moe-hybrid off`): with a
    /// cache, each miss is computed on the CPU or uploaded as this share
    /// says ([`crate::moe_cache::hybrid`]); `None` (the library's default)
    /// uploads every miss.
    pub hybrid: Option<CpuShare>,
    /// The prefill prefetch of host expert tensors into staging slots
    /// (`--prefetch-experts-slots`, `--prefetch-selective`; off by default,
    /// [`crate::moe_cache::prefetch`]).
    pub prefetch: PrefetchSlots,
    /// Predict the next cached layer's experts and upload them early
    /// (`--moe-predict router|history`; needs the expert cache; off by
    /// default, [`crate::moe_cache::predict`]).
    pub predict: MoePredict,
    /// Route every MoE layer by a trace's expert ids instead of its router's
    /// (`--expert-trace-in`, [`crate::moe_cache::trace::forced`]); `None` (the
    /// default): the model's own routing.
    pub forced_routing: Option<Arc<ForcedRouting>>,
    /// Read back each layer's selected experts after every ubatch
    /// ([`crate::Context::last_expert_ids`]); off by default, since on a
    /// device it costs a read per layer per token.
    pub record_expert_ids: bool,
    /// The compute alias (`--moe-cache-alias on|off`): with a device
    /// cache, prompt ubatches that bypass it compute in its banks' memory,
    /// and no compute memory is reserved apart for them
    /// ([`crate::moe_cache::alias`]). Off in the library's default (the
    /// tools turn it on, with the cache).
    pub cache_alias: bool,
    /// The host expert cache (`--moe-host-cache-mib`,
    /// `--moe-host-cache-policy`; CPU-only runs; off by default,
    /// [`crate::moe_cache::host`]).
    pub host_cache: HostCacheParams,
}

impl Default for MoeParams {
    fn default() -> Self {
        MoeParams {
            expert_copy: true,
            cache: MoeCacheParams::default(),
            cache_sizes: Vec::new(),
            hybrid: None,
            prefetch: PrefetchSlots::Off,
            predict: MoePredict::Off,
            forced_routing: None,
            record_expert_ids: false,
            cache_alias: false,
            host_cache: HostCacheParams::default(),
        }
    }
}

impl MoeParams {
    /// The cache size of device `d` (in [`crate::Model::devices`] order).
    pub fn cache_size_of(&self, d: usize) -> CacheSize {
        self.cache_sizes.get(d).copied().unwrap_or(self.cache.size)
    }
}
