//! Hybrid experts: each miss of a cached layer is computed where it
//! finishes first, on the device after an upload or on the CPU from host
//! memory.
//!
//! The graph of a cached layer computes two partial expert outputs: the
//! device's `mul_mat_id` over the banks (slots of CPU-chosen misses are -1
//! in the slot map, so the device skips them) and the CPU's `mul_mat_id`
//! over the host expert tensors with ids from the layer's **CPU map**
//! (`[n_expert]`: the expert itself where the CPU computes it, -1
//! elsewhere), read by a CPU `get_rows` of the router's ids
//! ([`crate::graph::moe::hybrid`]). A skipped slot is an exact zero,
//! so the sum of the two outputs, taken before the expert weights apply,
//! is bit for bit the output of one `mul_mat_id`.
//!
//! The hook decides when it serves the layer's slot map (the CPU split
//! runs after the device split is queued, so the decision is made before
//! the CPU reads its map): with `--moe-cache-cpu-share auto` from the
//! [`CostModel`], with a number `F` (upstream's fixed share) the share `F`
//! of the misses (fewest tokens first); both only once the group's cache is
//! full (until then every miss is uploaded into a free slot, where it may
//! hit later).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use ggml_core::{Backend, Buffer, BufferUsage, TensorData};

use crate::error::Result;
use crate::moe_cache::cache::bank::SlotBank;
use crate::moe_cache::cache::layout::{CacheLayout, GroupShape, ALIGN};
use crate::moe_cache::cost::{CostModel, ExpertCost};

/// How many of a cached layer's misses the CPU computes
/// (`--moe-cache-cpu-share auto|F`).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum CpuShare {
    /// The cost model decides, per layer per ubatch.
    #[default]
    Auto,
    /// This share of the misses (0..=1), once the cache is full.
    Fixed(f64),
}

impl fmt::Display for CpuShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuShare::Auto => f.write_str("auto"),
            CpuShare::Fixed(v) => write!(f, "{v}"),
        }
    }
}

impl FromStr for CpuShare {
    type Err = String;
    /// `auto`, or a share from 0 to 1.
    fn from_str(s: &str) -> std::result::Result<CpuShare, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(CpuShare::Auto);
        }
        match t.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(CpuShare::Fixed(v)),
            Ok(_) => Err(format!(
                "'{s}' is outside 0..1: give the share of the misses the CPU computes, from 0 to 1, or auto"
            )),
            Err(_) => Err(format!(
                "'{s}' is not a number: give the share of the misses the CPU computes, from 0 to 1, or auto"
            )),
        }
    }
}

/// `--moe-hybrid`: `on` or `off` (also `1`/`0`, `true`/`false`).
pub fn parse_switch(s: &str) -> std::result::Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" => Ok(true),
        "off" | "0" | "false" => Ok(false),
        _ => Err(format!("'{s}' is neither on nor off")),
    }
}

/// The CPU maps of the cached layers: I32 `[n_expert]` each, in a host
/// weights buffer the CPU reads directly.
pub struct CpuMaps {
    /// Per model layer: its CPU map, when the layer is cached.
    pub layers: Vec<Option<TensorData>>,
    buffer: Arc<dyn Buffer>,
}

impl CpuMaps {
    /// Maps for every cached layer of `layout`, in `host` memory, all -1.
    pub fn new(layout: &CacheLayout, host: &Arc<dyn Backend>, n_expert: usize) -> Result<CpuMaps> {
        let stride = (n_expert * 4).next_multiple_of(ALIGN);
        let n = layout.layers.len().max(1);
        let buffer = host.alloc_buffer(stride * n, BufferUsage::Weights)?;
        let minus_one: Vec<u8> = (0..n_expert).flat_map(|_| (-1i32).to_le_bytes()).collect();
        let mut layers = Vec::with_capacity(layout.layers.len());
        for (il, l) in layout.layers.iter().enumerate() {
            if l.is_some() {
                buffer.write(il * stride, &minus_one)?;
                layers.push(Some(TensorData {
                    buffer: Arc::clone(&buffer),
                    offset: il * stride,
                }));
            } else {
                layers.push(None);
            }
        }
        Ok(CpuMaps { layers, buffer })
    }

    /// Write layer `il`'s map: `cpu` (ascending experts) to the CPU, every
    /// other expert of the layer's `n_expert` to -1.
    pub fn write(&self, il: usize, n_expert: u32, cpu: &[u32]) -> Result<()> {
        let Some(Some(d)) = self.layers.get(il) else {
            return Ok(());
        };
        let mut map = vec![-1i32; n_expert as usize];
        for &e in cpu {
            if let Some(m) = map.get_mut(e as usize) {
                *m = e as i32;
            }
        }
        let bytes: Vec<u8> = map.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.buffer.write(d.offset, &bytes)?;
        Ok(())
    }
}

/// The hybrid state the hook holds next to the cache.
pub struct HybridShared {
    /// The share setting.
    pub share: CpuShare,
    /// The cost model (`auto`).
    pub cost: CostModel,
    /// The CPU maps.
    pub maps: Arc<CpuMaps>,
}

impl HybridShared {
    /// Hybrid state for `layout`'s cached layers: CPU maps in `host`
    /// memory; the cost model from `device`'s simulated clock, or a
    /// calibration of a real device (`auto` only).
    pub fn new(
        share: CpuShare,
        layout: &CacheLayout,
        device: &Arc<dyn Backend>,
        host: &Arc<dyn Backend>,
        n_expert: usize,
    ) -> Result<HybridShared> {
        let cost = match (share, ggml_core::SimClock::of(device.as_ref())) {
            (_, Some(c)) => CostModel::from_sim(c.profile()),
            (CpuShare::Auto, None) => CostModel::calibrate(device),
            (CpuShare::Fixed(_), None) => CostModel::default(),
        };
        Ok(HybridShared {
            share,
            cost,
            maps: Arc::new(CpuMaps::new(layout, host, n_expert)?),
        })
    }

    /// The misses (`(expert, tokens)`) that the CPU computes, ascending:
    /// `full` says whether the group's cache has no free slot.
    pub fn choose(
        &self,
        e: &ExpertCost,
        n_tokens: u32,
        hits: &[(u32, u32)],
        misses: &[(u32, u32)],
        full: bool,
    ) -> Vec<u32> {
        match self.share {
            // while the cache has free slots an upload also fills one that
            // later hits; a miss computed on the CPU leaves it empty
            CpuShare::Auto if !full => Vec::new(),
            CpuShare::Auto => self.cost.plan(e, n_tokens, hits, misses),
            CpuShare::Fixed(f) => fixed_share(f, misses, full),
        }
    }
}

/// Upstream's fixed share: once the cache is full, `round(f * misses)` of
/// the misses, fewest tokens first (then by expert), go to the CPU.
pub fn fixed_share(f: f64, misses: &[(u32, u32)], full: bool) -> Vec<u32> {
    if !full || misses.is_empty() {
        return Vec::new();
    }
    let k = ((f * misses.len() as f64).round() as usize).min(misses.len());
    let mut order = misses.to_vec();
    order.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut out: Vec<u32> = order[..k].iter().map(|m| m.0).collect();
    out.sort_unstable();
    out
}

/// The cost model's view of one expert of a group.
pub fn expert_cost(shape: &GroupShape) -> ExpertCost {
    let n_embd = shape.roles[0].ne01[0] as f64;
    ExpertCost {
        role_bytes: shape.roles.map(|r| r.expert_bytes as f64),
        role_flops: shape
            .roles
            .map(|r| 2.0 * r.ne01[0] as f64 * r.ne01[1] as f64),
        io_bytes_per_token: 4.0 * n_embd * (1.0 + shape.n_used as f64),
    }
}

/// The misses of one layer's access (`experts`: the router's ids) that
/// the CPU computes, ascending; the bank is not changed.
pub fn split_misses(
    h: &HybridShared,
    shape: &GroupShape,
    bank: &SlotBank,
    layer: u32,
    experts: &[u32],
) -> Vec<u32> {
    let (mut hits, mut misses) = (Vec::new(), Vec::new());
    for (e, t) in token_counts(experts) {
        if bank.is_resident(layer, e) {
            hits.push((e, t));
        } else {
            misses.push((e, t));
        }
    }
    let n_tokens = (experts.len() / shape.n_used.max(1) as usize).max(1) as u32;
    h.choose(
        &expert_cost(shape),
        n_tokens,
        &hits,
        &misses,
        bank.is_full(),
    )
}

/// `(expert, tokens routed to it)` for each distinct expert of `ids`.
pub fn token_counts(ids: &[u32]) -> std::collections::BTreeMap<u32, u32> {
    let mut m = std::collections::BTreeMap::new();
    for &e in ids {
        *m.entry(e).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_parse_or_fail_naming_the_value() {
        assert_eq!("auto".parse::<CpuShare>(), Ok(CpuShare::Auto));
        assert_eq!("0.25".parse::<CpuShare>(), Ok(CpuShare::Fixed(0.25)));
        assert_eq!("1".parse::<CpuShare>(), Ok(CpuShare::Fixed(1.0)));
        assert_eq!("0".parse::<CpuShare>(), Ok(CpuShare::Fixed(0.0)));
        for bad in ["1.5", "-0.1"] {
            let e = bad.parse::<CpuShare>().unwrap_err();
            assert!(e.contains(&format!("'{bad}'")) && e.contains("0..1"), "{e}");
        }
        let e = "abc".parse::<CpuShare>().unwrap_err();
        assert!(e.contains("'abc'") && e.contains("not a number"), "{e}");
        assert!("NaN".parse::<CpuShare>().is_err());
        assert_eq!(parse_switch("off"), Ok(false));
        assert_eq!(parse_switch("ON"), Ok(true));
        assert!(parse_switch("maybe").unwrap_err().contains("'maybe'"));
    }

    #[test]
    fn a_fixed_share_takes_the_fewest_token_misses_once_full() {
        let m = [(3, 2), (5, 1), (8, 1), (9, 4)];
        assert!(fixed_share(0.5, &m, false).is_empty());
        assert_eq!(fixed_share(0.5, &m, true), vec![5, 8]);
        assert_eq!(fixed_share(0.25, &m, true), vec![5]);
        assert_eq!(fixed_share(1.0, &m, true), vec![3, 5, 8, 9]);
        assert!(fixed_share(0.0, &m, true).is_empty());
    }
}
