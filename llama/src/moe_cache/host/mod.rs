//! The host expert cache: one tier below the device cache, for models
//! larger than RAM (disk → host cache → compute).
//!
//! A CPU-only run with `--moe-host-cache-mib` keeps the `_exps` tensors in
//! the file (the mapping is never touched for them) and a cache of expert
//! slices in host memory, laid out and driven as the device cache is: the
//! same groups, banks and slot maps with the CPU as their home
//! ([`layout`]), the same slot banks and policy set
//! (`--moe-host-cache-policy`, any [`crate::moe_cache::PolicyKind`]), the
//! same graph (`get_rows(slot_map, ids)` then `mul_mat_id(bank, ...)`).
//! Data flow per cached layer: the router computes; the scheduler offers
//! the layer's slot map to the copy hook ([`hook`]); the hook plans hits
//! and misses and reads the misses from the file with `O_DIRECT`, merged
//! per tensor and several in flight ([`disk`]); the lookup and the experts'
//! matmuls read the banks. Counters: [`state::HostCacheStats`].
//!
//! A ubatch with more distinct experts than a layer's slots hold (a long
//! prompt in a small cache) reads that layer's `_exps` tensors through
//! the file's mapping instead, as without the cache.

pub mod disk;
pub mod hook;
pub mod layout;
pub mod state;

use std::sync::Arc;

use parking_lot::Mutex;

use ggml_core::Backend;

pub use state::{DiskStats, HostCache, HostCacheStats};

use crate::error::{LlamaError, Result};
use crate::model::Model;
use crate::moe_cache::cache::layout::{bytes_for_all, model_groups_on};
use crate::moe_cache::{CacheSize, PolicyKind};

/// The host cache's settings (`--moe-host-cache-mib`,
/// `--moe-host-cache-policy`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostCacheParams {
    /// Its size: off, `auto` (what `MemAvailable` leaves after a margin),
    /// or bytes.
    pub size: CacheSize,
    /// Eviction policy.
    pub policy: PolicyKind,
}

impl Default for HostCacheParams {
    /// Off, evicting by the device cache's default policy.
    fn default() -> Self {
        HostCacheParams {
            size: CacheSize::Off,
            policy: PolicyKind::default(),
        }
    }
}

/// Bytes of `model`'s file outside its cached expert tensors (what the
/// mapping still reads), estimated as the file less every expert's bytes.
pub fn non_expert_bytes(model: &Model) -> u64 {
    let exps = bytes_for_all(&model_groups_on(model, None));
    (model.file.bytes().len() as u64).saturating_sub(exps)
}

/// Whether a file of `file_bytes` does not fit in `available` bytes of
/// memory with room for everything else (the margin of
/// [`auto_budget`]): where the default turns the host cache on.
pub fn does_not_fit(file_bytes: u64, available: u64) -> bool {
    file_bytes.saturating_add(margin(available)) > available
}

fn margin(available: u64) -> u64 {
    (available / 8).max(64 << 20)
}

/// The budget `auto` gives for `available` bytes of memory: what is left
/// after the weights the mapping reads and a margin of an eighth (at
/// least 64 MiB), capped at every expert.
pub fn auto_budget(model: &Model, available: u64) -> u64 {
    let all = bytes_for_all(&model_groups_on(model, None));
    available
        .saturating_sub(non_expert_bytes(model))
        .saturating_sub(margin(available))
        .min(all)
}

/// The host cache `params` asks for, on a CPU-only `model` loaded from a
/// file, for ubatches of up to `n_ubatch` tokens; `None` when off. With a
/// device, or a model not loaded from a file, a clear error.
pub fn build(
    model: &Model,
    params: &HostCacheParams,
    n_ubatch: usize,
    cpu: &Arc<dyn Backend>,
) -> Result<Option<Arc<Mutex<HostCache>>>> {
    let what = format!("--moe-host-cache-mib {}", params.size);
    let budget = match params.size {
        CacheSize::Off => return Ok(None),
        CacheSize::Bytes(b) => b,
        CacheSize::Auto => auto_budget(
            model,
            crate::moe_cache::host::available_memory().unwrap_or(u64::MAX),
        ),
    };
    if !model.devices.is_empty() {
        return Err(LlamaError::Invalid(format!(
            "{what}: the host expert cache serves CPU-only runs for now (a device's misses are not yet served from it); drop --device or the flag"
        )));
    }
    let Some(path) = &model.path else {
        return Err(LlamaError::Invalid(format!(
            "{what}: the model was not loaded from a file, so there is no file to read experts from"
        )));
    };
    if model_groups_on(model, None).is_empty() {
        return Ok(None);
    }
    let layout = layout::host_layout(model, budget, cpu, n_ubatch, &what)?;
    let disk = disk::DiskReader::open(path).map_err(|e| {
        LlamaError::Invalid(format!("{what}: cannot open '{}': {e}", path.display()))
    })?;
    Ok(Some(Arc::new(Mutex::new(HostCache::new(
        Arc::new(layout),
        params.policy,
        budget,
        disk,
    )))))
}

/// Memory this process may still use: `MemAvailable`, or less where a
/// memory cgroup's limit leaves less ([`ggml_core::gguf::available_memory`]).
pub fn available_memory() -> Option<u64> {
    ggml_core::gguf::available_memory()
}
