//! The MoE features' states, one submodule each, and the copy hook that
//! drives them (upstream llama.cpp's MoE cache and prefetch, on this
//! project's scheduler hook). [`crate::moe_runtime::MoeRuntime`] builds
//! them and owns them with the context; their graph parts are in
//! [`crate::graph::moe`].
//!
//! When a model's expert tensors live in host memory and a device computes
//! with them, every token would copy its experts again. The cache keeps
//! recently used experts in device memory instead:
//!
//! - [`cache`]: the cache proper. **Groups and banks**
//!   ([`cache::layout`]): the cached layers of a device whose expert
//!   tensors share type, shape and expert stride form a group; each group
//!   has one bank per role (gate, up, down) shaped `[ne0, ne1, n_slots]`
//!   in a device weights buffer (plus one pad slot, for kernels that read
//!   past the last expert). All layers of a group share the slots and one
//!   eviction policy keyed by `(layer, expert)` ([`cache::bank`]).
//!   **Slot maps**: each cached layer has an I32 map `[n_expert]` (slot of
//!   each expert, or -1) in a host weights buffer. The graph computes
//!   `slots = get_rows(slot_map, ids)` on the device, then the unmodified
//!   `mul_mat_id(bank, x, slots)` ([`crate::graph::moe::cache`]): no new
//!   op, no new kernel. Its run-time state ([`cache::shared`]), counters
//!   ([`cache::stats`]) and a trace-driven replay ([`cache::replay`]).
//! - [`hook`]: because the map is a host weight, the scheduler offers it to
//!   the copy hook. The hook reads the layer's ids (computed by an earlier
//!   split: the lookup heads its split), plans hits and misses with the
//!   group's [`cache::bank::SlotBank`], uploads the misses in merged runs
//!   straight into the banks, and writes the map last; every other host
//!   expert tensor goes to the selective copy ([`crate::expert_copy`]).
//! - [`policy`]: eviction policies, pure functions of the access sequence,
//!   so a routing-trace replay runs this very code.
//! - [`prefetch`]: the prefill prefetch of whole (or predicted) expert
//!   tensors into staging slots through the scheduler's look-ahead
//!   ([`prefetch::auto`] decides per tensor and ubatch).
//! - [`predict`]: decode prediction, the next layer's experts guessed
//!   (through its router, or from the routing seen so far,
//!   [`predict::history`]) and uploaded early; [`predict::replay`] runs it
//!   on a trace.
//! - [`host`]: the host expert cache, one tier below: the same layout,
//!   banks, policies and graph with the CPU as the cache's home, its
//!   misses read from the model file with `O_DIRECT` (models larger than
//!   RAM, CPU only for now).
//! - [`hybrid`]: a miss computed on the CPU from host memory instead of
//!   uploaded; the hook decides per layer per ubatch, from a cost model
//!   ([`cost`], which the prefetch's auto reads too) or a fixed share.
//! - [`alias`]: the compute alias (`--moe-cache-alias`): the cache lends
//!   its banks to the compute memory of the prompt ubatches that bypass it,
//!   so that it gets the memory a compute reserve would have held.
//! - [`trace`]: recorded routing in a small binary file, synthetic routing
//!   (random, Zipf, or topic-shaped like a trained model's,
//!   [`trace::synthetic`]), and forced routing by a trace
//!   (`--expert-trace-in`, [`trace::forced`]).
//!
//! Ubatches of more than `max_batch` tokens do not use the cache (their
//! expert matmuls take the selective copy, or the CPU); a group with fewer
//! slots than the router picks per token falls back to the selective copy.

pub mod alias;
pub mod cache;
pub mod cost;
pub mod hook;
pub mod host;
pub mod hybrid;
pub mod policy;
pub mod predict;
pub mod prefetch;
pub mod trace;

use std::fmt;
use std::str::FromStr;

pub use cache::bank::{upload_runs, BankError, LayerAccess, SlotBank, UploadRun};
pub use cache::layout::{CacheLayout, GroupShape, LayerCache};
pub use cache::shared::CacheShared;
pub use cache::stats::{CacheStats, GroupInfo, LayerCacheStats};
pub use hook::MoeCacheHook;
pub use policy::{Key, Policy, PolicyKind};
pub use trace::{Trace, TraceError, TraceHeader};

/// Default largest ubatch that uses (and fills) the cache (upstream: 32).
pub const DEFAULT_MAX_BATCH: usize = 32;

/// How big the cache is, per device (`--moe-cache-mib`).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum CacheSize {
    /// No cache (`0`).
    #[default]
    Off,
    /// The device's free memory after the graph's (`auto`); every expert
    /// when the device's memory is unknown or unlimited.
    Auto,
    /// A budget in bytes.
    Bytes(u64),
}

impl CacheSize {
    /// A budget of `mib` MiB (0 = off).
    pub fn mib(mib: f64) -> CacheSize {
        let b = (mib * 1024.0 * 1024.0) as u64;
        if b == 0 {
            CacheSize::Off
        } else {
            CacheSize::Bytes(b)
        }
    }
}

impl fmt::Display for CacheSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheSize::Off => f.write_str("0"),
            CacheSize::Auto => f.write_str("auto"),
            CacheSize::Bytes(b) => {
                // the shortest decimal that parses back to these bytes (what
                // the user typed, as `0.3`, not `0.29999923706054688`)
                let mib = *b as f64 / (1024.0 * 1024.0);
                for digits in 0..=9 {
                    let s = format!("{mib:.digits$}");
                    if s.parse::<f64>().map(CacheSize::mib) == Ok(*self) {
                        return f.write_str(&s);
                    }
                }
                write!(f, "{mib}")
            }
        }
    }
}

impl FromStr for CacheSize {
    type Err = String;
    /// `auto`, `0`, or a size in MiB (a non-negative number, fractions allowed).
    fn from_str(s: &str) -> Result<CacheSize, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(CacheSize::Auto);
        }
        match t.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(CacheSize::mib(v)),
            Ok(_) => Err(format!(
                "'{s}' is not a cache size: give MiB as a number >= 0, or auto"
            )),
            Err(_) => Err(format!(
                "'{s}' is not a number of MiB (give a number >= 0, or auto)"
            )),
        }
    }
}

/// The cache's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeCacheParams {
    /// Budget per device (`--moe-cache-mib`).
    pub size: CacheSize,
    /// Eviction policy (`--moe-cache-policy`).
    pub policy: PolicyKind,
    /// Largest ubatch that uses the cache (`--moe-cache-max-batch`).
    pub max_batch: usize,
}

impl Default for MoeCacheParams {
    /// Off (the library's default; the tools default to `auto`).
    fn default() -> Self {
        MoeCacheParams {
            size: CacheSize::Off,
            policy: PolicyKind::default(),
            max_batch: DEFAULT_MAX_BATCH,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_or_fail_naming_the_value() {
        assert_eq!("auto".parse::<CacheSize>(), Ok(CacheSize::Auto));
        assert_eq!("0".parse::<CacheSize>(), Ok(CacheSize::Off));
        assert_eq!("8".parse::<CacheSize>(), Ok(CacheSize::Bytes(8 << 20)));
        assert_eq!("0.5".parse::<CacheSize>(), Ok(CacheSize::Bytes(1 << 19)));
        let e = "-3".parse::<CacheSize>().unwrap_err();
        assert!(e.contains("'-3'") && e.contains(">= 0"), "{e}");
        let e = "abc".parse::<CacheSize>().unwrap_err();
        assert!(e.contains("'abc'") && e.contains("not a number"), "{e}");
        assert_eq!(CacheSize::Bytes(8 << 20).to_string(), "8");
        // as typed, though the bytes are not a whole fraction of a MiB
        for typed in ["0.3", "0.001", "0.6", "1.25", "3000.7"] {
            let size: CacheSize = typed.parse().expect("size");
            assert_eq!(size.to_string(), typed);
        }
    }
}
