//! The sweep: a routing trace replayed through every policy at every size,
//! with the live cache's rules, plus Belady's optimum.

use anyhow::{bail, Result};
use llama::moe_cache::cache::layout::{split_budget, GroupShape};
use llama::moe_cache::cache::replay::{belady_steps, replay, TraceUbatch};
use llama::moe_cache::policy::belady::Belady;
use llama::moe_cache::{LayerCacheStats, Policy, PolicyKind, Trace};
use serde::Serialize;

/// A policy of the sweep: one of the cache's, or Belady's optimum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepPolicy {
    /// A policy the live cache can use.
    Live(PolicyKind),
    /// Belady's optimum (knows the future).
    Belady,
}

impl SweepPolicy {
    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            SweepPolicy::Live(k) => k.name(),
            SweepPolicy::Belady => "belady",
        }
    }
}

/// One cache size: slots per group and the device bytes of the banks.
#[derive(Clone, Debug, PartialEq)]
pub struct Size {
    /// Slots of each group, in the trace's group order.
    pub slots: Vec<u32>,
    /// Device MiB of the banks (what `--moe-cache-mib` must give).
    pub mib: f64,
    /// The `--moe-cache-mib` value the user gave, when sized by MiB.
    pub budget_mib: Option<f64>,
}

/// What one (policy, size) replay counted: the JSON object of `--json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// `lru`, ..., `belady`.
    pub policy: String,
    /// Slots per group (the first group's when there are several).
    pub slots: u32,
    /// Device MiB of the banks.
    pub mib: f64,
    /// Hits over the whole trace.
    pub hits: u64,
    /// Misses over the whole trace.
    pub misses: u64,
    /// `hits / (hits + misses)`.
    pub hit_rate: f64,
    /// Bytes uploaded per decoded token (over every token when the trace
    /// has no decode ubatch).
    pub bytes_per_token: f64,
    /// Hit rate of decode ubatches (what llama-run prints as hit rate).
    #[serde(skip)]
    pub hit_rate_decode: f64,
}

/// Sizes of `slots` slots per group (`--sizes`); 0 or fewer than the
/// router picks per token is refused.
pub fn sizes_from_slots(groups: &[GroupShape], list: &[u32]) -> Result<Vec<Size>> {
    list.iter()
        .map(|&n| {
            if let Some(g) = groups.iter().find(|g| n < g.n_used) {
                bail!(
                    "--sizes {n}: fewer slots than the {} experts the router picks per token",
                    g.n_used
                );
            }
            let slots: Vec<u32> = groups.iter().map(|_| n).collect();
            Ok(Size {
                mib: bank_mib(groups, &slots),
                slots,
                budget_mib: None,
            })
        })
        .collect()
}

/// Sizes of budgets in MiB (`--mib`), split over the groups as the live
/// cache splits `--moe-cache-mib`.
pub fn sizes_from_mib(groups: &[GroupShape], list: &[f64]) -> Result<Vec<Size>> {
    list.iter()
        .map(|&m| {
            let bytes = (m * 1048576.0) as u64;
            let slots = split_budget(groups, bytes);
            if let Some((g, &s)) = groups.iter().zip(&slots).find(|(g, &s)| s < g.n_used) {
                bail!(
                    "--mib {m}: {s} slots for layers {:?}, fewer than the {} experts the router picks per token (the live cache would not cache them)",
                    g.layers,
                    g.n_used
                );
            }
            Ok(Size {
                mib: bank_mib(groups, &slots),
                slots,
                budget_mib: Some(m),
            })
        })
        .collect()
}

/// The default sizes: from `n_used` to `n_expert` slots per layer.
pub fn default_sizes(groups: &[GroupShape]) -> Vec<Size> {
    let (Some(lo), Some(hi)) = (
        groups.iter().map(|g| g.n_used).max(),
        groups.iter().map(|g| g.n_expert).min(),
    ) else {
        return Vec::new();
    };
    (lo..=hi)
        .map(|k| {
            let slots: Vec<u32> = groups.iter().map(|g| k * g.layers.len() as u32).collect();
            Size {
                mib: bank_mib(groups, &slots),
                slots,
                budget_mib: None,
            }
        })
        .collect()
}

fn bank_mib(groups: &[GroupShape], slots: &[u32]) -> f64 {
    groups
        .iter()
        .zip(slots)
        .map(|(g, &s)| g.bank_bytes(s))
        .sum::<u64>() as f64
        / 1048576.0
}

/// The part of `trace` the bank of `g` with `n_slots` slots sees: its
/// layers, and nothing of a layer that routes more tokens than the cache
/// serves (time still advances for its ubatch, as in the live cache).
pub fn group_view(
    trace: &Trace,
    g: &GroupShape,
    n_slots: u32,
    max_batch: usize,
    tier: Tier,
) -> Vec<TraceUbatch> {
    // the device cache serves a ubatch whose tokens' experts fit its slots;
    // the host cache, holding every expert, serves every ubatch
    let max_tokens = if tier == Tier::Host && n_slots >= g.n_expert {
        max_batch
    } else {
        max_batch.min((n_slots / g.n_used.max(1)) as usize)
    };
    trace
        .ubatches
        .iter()
        .map(|u| TraceUbatch {
            n_tokens: u.n_tokens,
            // a layer is served when the tokens it routes fit (the last
            // layer of a prompt ubatch routes only its output rows)
            layers: u
                .layers
                .iter()
                .filter(|(l, ids)| {
                    g.layers.contains(l) && ids.len() / g.n_used.max(1) as usize <= max_tokens
                })
                .cloned()
                .collect(),
        })
        .collect()
}

/// Which cache a replay models (`--tier`): the device's expert cache
/// (`--moe-cache-mib`) or the host expert cache (`--moe-host-cache-mib`,
/// which serves every ubatch, cut to what its slots hold).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tier {
    /// The device cache.
    #[default]
    Device,
    /// The host cache.
    Host,
}

impl std::str::FromStr for Tier {
    type Err = String;
    fn from_str(s: &str) -> Result<Tier, String> {
        match s {
            "device" => Ok(Tier::Device),
            "host" => Ok(Tier::Host),
            _ => Err(format!("unknown tier '{s}' (device, host)")),
        }
    }
}

/// Replay `trace` through `policy` at `size` with ubatches of at most
/// `max_batch` tokens cached, as the cache of `tier` serves them.
pub fn run(
    trace: &Trace,
    groups: &[GroupShape],
    size: &Size,
    policy: SweepPolicy,
    max_batch: usize,
    tier: Tier,
) -> Result<Row> {
    let mut total = LayerCacheStats::default();
    let mut bytes_decode = 0u64;
    let mut bytes_all = 0u64;
    for (g, &n_slots) in groups.iter().zip(&size.slots) {
        let view = group_view(trace, g, n_slots, max_batch, tier);
        let p: Box<dyn Policy> = match policy {
            SweepPolicy::Live(k) => k.build(n_slots as usize),
            SweepPolicy::Belady => Box::new(Belady::new(&belady_steps(&g.layers, &view))),
        };
        let st = replay(&g.layers, trace.header.n_expert, n_slots, p, &view)?;
        for s in st.values() {
            total.add(s);
            bytes_decode += s.misses_decode * g.slot_bytes();
            bytes_all += s.misses() * g.slot_bytes();
        }
    }
    let (n_all, n_dec) = trace.token_counts();
    let bytes_per_token = if n_dec > 0 {
        bytes_decode as f64 / n_dec as f64
    } else {
        bytes_all as f64 / n_all.max(1) as f64
    };
    Ok(Row {
        policy: policy.name().to_string(),
        slots: size.slots.first().copied().unwrap_or(0),
        mib: size.mib,
        hits: total.hits(),
        misses: total.misses(),
        hit_rate: total.hit_rate(),
        bytes_per_token,
        hit_rate_decode: if n_dec > 0 {
            total.hit_rate_decode()
        } else {
            total.hit_rate()
        },
    })
}
