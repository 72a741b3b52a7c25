//! The compute alias (`--moe-cache-alias on|off`): the expert cache lends
//! its banks' memory to the compute memory of prompt graphs.
//!
//! A ubatch of more tokens than `--moe-cache-max-batch` does not use the
//! cache (its expert matmuls copy what they need), so the banks sit idle
//! while it computes. With the alias the context reserves no compute memory
//! apart for such ubatches: the cache gets that memory too, and lends it
//! back while a prompt graph runs. The scheduler asks the cache for each
//! device's compute memory through its lender interface
//! ([`ggml_sched::ComputeLender`]); [`CacheLender`] answers from the
//! cache's state: while the ubatch being computed is larger than every
//! cached layer serves ([`crate::moe_cache::CacheLayout::served_tokens`]:
//! such a graph reads no layer through the cache, not even its last, whose
//! rows are only the outputs), a
//! group's bank buffer is lent (what it held is forgotten: the graph
//! writes over it), else nothing is, and the scheduler uses its own small
//! buffer (planned for the ubatches the cache serves).
//!
//! The ubatch is fitted to the lendable memory when the context is made
//! ([`choose_ubatch`]): the worst-case graph of `-ub` tokens (over the
//! whole context) must fit in each device's bank buffer (one per device, holding all its groups);
//! else the ubatch halves, down to [`MIN_UBATCH`]; when even that graph
//! does not fit, the alias drops out and the compute memory is reserved
//! apart as without it. Nothing is ever allocated behind the cache's back:
//! the device's memory holds the weights, the KV cache, the cache's banks
//! and the scheduler's buffer for the cached ubatches, and no more.
//!
//! The prefill prefetch's staging slots (`--prefetch-experts-slots`) keep
//! their own memory: they are not lent.
//!
//! [`AliasReport`] says what was decided and why; the tools print it.

use std::sync::Arc;

use parking_lot::Mutex;

use ggml_core::Buffer;
use ggml_sched::{ComputeLender, Loan};

use super::cache::shared::CacheShared;

/// The smallest ubatch the alias shrinks a prompt's ubatch to (the fork's).
pub const MIN_UBATCH: usize = 512;

/// Parse `--moe-cache-alias`: `on` or `off`.
pub fn parse_alias(s: &str) -> std::result::Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("'{s}' is neither on nor off")),
    }
}

/// What the context decided about the alias, for the run's summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AliasReport {
    /// Whether prompt graphs compute in the cache's memory.
    pub on: bool,
    /// The ubatch asked for (`-ub`, at most `-b`).
    pub requested_ubatch: usize,
    /// The ubatch prompts are cut into.
    pub ubatch: usize,
    /// Device compute memory of the worst-case graph of `ubatch` tokens
    /// (the most on one device), bytes; 0 when not planned.
    pub graph_bytes: u64,
    /// The lendable memory (each device's bank buffer, summed over the
    /// devices), bytes.
    pub lendable_bytes: u64,
    /// Why, in a few words (one clause of the summary's line).
    pub reason: String,
}

impl AliasReport {
    /// The summary's line (without the tool's prefix).
    pub fn line(&self) -> String {
        let mib = |b: u64| b as f64 / 1048576.0;
        if self.on {
            format!(
                "compute alias: on, ubatch {}{}: {}; the worst-case graph needs {:.2} MiB of the cache's {:.2} MiB lendable",
                self.ubatch,
                if self.ubatch != self.requested_ubatch {
                    format!(" (-ub {})", self.requested_ubatch)
                } else {
                    String::new()
                },
                self.reason,
                mib(self.graph_bytes),
                mib(self.lendable_bytes)
            )
        } else {
            format!(
                "compute alias: off, ubatch {}: {}",
                self.ubatch, self.reason
            )
        }
    }
}

/// The outcome of [`choose_ubatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UbatchChoice {
    /// The worst-case graph of this many tokens fits in the lendable
    /// memory, needing this many bytes (the most on one device); the
    /// sizes that did not fit, each with its need, before it.
    Fits {
        /// The ubatch.
        ubatch: usize,
        /// Its graph's bytes.
        graph_bytes: u64,
        /// Larger ubatches tried, with their graphs' bytes.
        too_big: Vec<(usize, u64)>,
    },
    /// Not even the smallest ubatch tried fits: `(ubatch, bytes)` of each.
    DropsOut(Vec<(usize, u64)>),
}

/// Halve `requested` (down to [`MIN_UBATCH`], never below `floor + 1`
/// where `floor` is the largest ubatch the cache serves) until `need`
/// (each device's compute bytes of the worst-case graph of that many
/// tokens) fits in `lendable` (each device's lendable bytes) on every
/// device.
pub fn choose_ubatch<E>(
    requested: usize,
    floor: usize,
    lendable: &[u64],
    mut need: impl FnMut(usize) -> Result<Vec<u64>, E>,
) -> Result<UbatchChoice, E> {
    let low = MIN_UBATCH.max(floor + 1).min(requested);
    let mut u = requested;
    let mut tried = Vec::new();
    loop {
        let n = need(u)?;
        let fits = n
            .iter()
            .enumerate()
            .all(|(d, &b)| b == 0 || lendable.get(d).is_some_and(|&l| b <= l));
        let worst = n.iter().copied().max().unwrap_or(0);
        if fits {
            return Ok(UbatchChoice::Fits {
                ubatch: u,
                graph_bytes: worst,
                too_big: tried,
            });
        }
        tried.push((u, worst));
        if u <= low {
            return Ok(UbatchChoice::DropsOut(tried));
        }
        u = (u / 2).max(low);
    }
}

/// The cache as the scheduler's source of compute memory: see the module
/// docs.
pub struct CacheLender {
    cache: Arc<Mutex<CacheShared>>,
    /// Per scheduler backend: the groups whose banks (one buffer) it may
    /// borrow.
    groups_of: Vec<Vec<usize>>,
    /// Per scheduler backend: whether its groups are lent now.
    lent: Vec<bool>,
    counters: Arc<Mutex<AliasCounters>>,
}

/// What the lender did, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AliasCounters {
    /// Loans made (one per device per graph allocation).
    pub loans: u64,
    /// The largest loan, bytes.
    pub max_lent_bytes: u64,
    /// Allocations the lender refused because the ubatch uses the cache.
    pub refused: u64,
}

impl CacheLender {
    /// A lender over `cache`: backend `b` of the scheduler (device `b` of
    /// the model) borrows the bank buffer of the groups `groups_of[b]`
    /// (the device's, all in one buffer).
    pub fn new(
        cache: Arc<Mutex<CacheShared>>,
        groups_of: Vec<Vec<usize>>,
        counters: Arc<Mutex<AliasCounters>>,
    ) -> CacheLender {
        let n = groups_of.len();
        CacheLender {
            cache,
            groups_of,
            lent: vec![false; n],
            counters,
        }
    }
}

impl ComputeLender for CacheLender {
    fn lend(&mut self, backend: usize, bytes: usize) -> Option<Loan> {
        let groups = self.groups_of.get(backend)?;
        let first = *groups.first()?;
        let mut c = self.cache.lock();
        if c.n_tokens() as usize <= c.layout.served_tokens() {
            self.counters.lock().refused += 1;
            return None;
        }
        let buffer: Arc<dyn Buffer> = Arc::clone(c.layout.group_buffer(first)?);
        if bytes > buffer.size() {
            return None;
        }
        for &g in groups {
            c.lend_group(g);
        }
        self.lent[backend] = true;
        let mut k = self.counters.lock();
        k.loans += 1;
        k.max_lent_bytes = k.max_lent_bytes.max(bytes as u64);
        Some(Loan {
            buffer,
            offset: 0,
            size: bytes,
        })
    }

    fn give_back(&mut self, backend: usize) {
        if self.lent.get_mut(backend).is_some_and(std::mem::take) {
            let mut c = self.cache.lock();
            for &g in &self.groups_of[backend] {
                c.return_group(g);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ubatch_halves_until_its_graph_fits() {
        // 1 MiB per token
        let need = |u: usize| Ok::<_, ()>(vec![(u as u64) << 20]);
        let c = choose_ubatch(4096, 32, &[1500 << 20], need).unwrap();
        assert_eq!(
            c,
            UbatchChoice::Fits {
                ubatch: 1024,
                graph_bytes: 1024 << 20,
                too_big: vec![(4096, 4096 << 20), (2048, 2048 << 20)],
            }
        );
        let c = choose_ubatch(4096, 32, &[8192 << 20], need).unwrap();
        assert!(matches!(c, UbatchChoice::Fits { ubatch: 4096, .. }));
    }

    #[test]
    fn below_the_smallest_ubatch_the_alias_drops_out() {
        let need = |u: usize| Ok::<_, ()>(vec![(u as u64) << 20]);
        let c = choose_ubatch(3000, 32, &[100 << 20], need).unwrap();
        assert_eq!(
            c,
            UbatchChoice::DropsOut(vec![
                (3000, 3000 << 20),
                (1500, 1500 << 20),
                (750, 750 << 20),
                (512, 512 << 20)
            ])
        );
        // a -ub below 512 is tried as given, once
        let c = choose_ubatch(256, 32, &[100 << 20], need).unwrap();
        assert_eq!(c, UbatchChoice::DropsOut(vec![(256, 256 << 20)]));
    }

    #[test]
    fn a_device_without_lendable_memory_that_needs_some_does_not_fit() {
        let need = |_: usize| Ok::<_, ()>(vec![1 << 20, 1 << 20]);
        let c = choose_ubatch(512, 32, &[1 << 30], need).unwrap();
        assert!(matches!(c, UbatchChoice::DropsOut(_)), "{c:?}");
        let need0 = |_: usize| Ok::<_, ()>(vec![1 << 20, 0]);
        let c = choose_ubatch(512, 32, &[1 << 30], need0).unwrap();
        assert!(matches!(c, UbatchChoice::Fits { .. }), "{c:?}");
    }

    #[test]
    fn switch_values_parse_or_fail_naming_the_value() {
        assert_eq!(parse_alias("on"), Ok(true));
        assert_eq!(parse_alias("OFF"), Ok(false));
        let e = parse_alias("maybe").unwrap_err();
        assert!(e.contains("'maybe'") && e.contains("on nor off"), "{e}");
    }
}
