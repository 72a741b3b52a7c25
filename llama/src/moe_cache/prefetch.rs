//! Prefill prefetch: the next splits' host expert tensors cross the link
//! into rotating staging slots while the current split computes (upstream's
//! `--prefetch-experts-slots`).
//!
//! A ubatch of more tokens than the cache's insert limit
//! (`--moe-cache-max-batch`, also without a cache) uses nearly every
//! expert, so its expert tensors are staged whole, before its router has
//! run: the scheduler's look-ahead ([`ggml_sched::prefetch`]) offers each
//! later split's host weights to the hook, which copies an expert tensor
//! (read only by `mul_mat_id`) into the next free slot on the copy stream.
//! The consuming split reads the slot and waits for the copy's event; a
//! slot is written again only after every split reading it was queued and
//! its event passed (the scheduler's rule, checked on the recorded
//! timeline by the tests).
//!
//! Slots are device compute memory allocated once per context, each as
//! large as the largest host expert tensor, and counted against the
//! device's memory with the compute buffers and the cache: when `N` slots
//! do not fit, fewer are made (see [`Staging::note`]), never more than fit.
//!
//! After each ubatch the context reads the ubatch's expert ids (graph
//! outputs) and splits the prefetched bytes into *used* (experts the ids
//! name) and *wasted* ([`PrefetchStats`]).
//!
//! `-1` (auto) makes [`AUTO_SLOTS`] slots and decides per tensor and
//! ubatch whether to stage it at all ([`super::prefetch_auto`]); `N > 0`
//! stages every offered expert tensor whole.
//!
//! With several devices each device gets its own slots, for the layers
//! whose experts it computes (the same count on each, as many as fit in
//! its memory); a tensor is staged into a slot of the device of the split
//! that reads it.

use std::collections::HashSet;
use std::sync::Arc;

use ggml_core::{Backend, BufferUsage, Graph, Op, TensorData, TensorId};
use ggml_sched::{HookError, PrefetchCtx};

use crate::error::{LlamaError, Result};
use crate::model::Model;

use super::cost::CostModel;
use super::layout::model_groups_on;
use super::prefetch_auto::{AutoCounts, AutoPlan};

/// Slots `--prefetch-experts-slots -1` (auto) asks for: one layer's gate,
/// up and down tensors (upstream's reviewers saw little gain past 3).
pub const AUTO_SLOTS: usize = 3;

/// Splits of look-ahead the context asks the scheduler for when slots are
/// on (the slots, not the look-ahead, bound how far ahead copies run).
pub const LOOKAHEAD_SPLITS: usize = 8;

/// Parse a `--prefetch-experts-slots` value: `-1` (auto), `0` (off) or a
/// count of slots.
pub fn parse_slots(s: &str) -> std::result::Result<i32, String> {
    match s.trim().parse::<i64>() {
        Ok(v) if v >= -1 && v <= i64::from(i32::MAX) => Ok(v as i32),
        Ok(v) => Err(format!(
            "{v} is not a slot count: give a number of staging slots >= 0 (0 = off), or -1 for auto"
        )),
        Err(_) => Err(format!(
            "'{s}' is not a slot count: give a number of staging slots >= 0 (0 = off), or -1 for auto"
        )),
    }
}

/// Counters of the prefill prefetch, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefetchStats {
    /// Bytes copied early into staging slots.
    pub bytes: u64,
    /// Of those, bytes of the experts the ubatch's ids named.
    pub bytes_used: u64,
    /// Of those, bytes of experts no token of the ubatch used.
    pub bytes_wasted: u64,
    /// Expert tensors staged.
    pub inputs: u64,
    /// Experts staged (each tensor's expert count).
    pub experts: u64,
    /// Auto: tensors (per ubatch) it chose to prefetch whole.
    pub auto_whole: u64,
    /// Auto: tensors (per ubatch) it left to the selective copy.
    pub auto_none: u64,
}

impl PrefetchStats {
    /// `self - earlier`, field by field.
    pub fn since(&self, b: &PrefetchStats) -> PrefetchStats {
        PrefetchStats {
            bytes: self.bytes - b.bytes,
            bytes_used: self.bytes_used - b.bytes_used,
            bytes_wasted: self.bytes_wasted - b.bytes_wasted,
            inputs: self.inputs - b.inputs,
            experts: self.experts - b.experts,
            auto_whole: self.auto_whole - b.auto_whole,
            auto_none: self.auto_none - b.auto_none,
        }
    }
}

/// A staged expert tensor whose use is not counted yet.
#[derive(Clone, Debug)]
struct Pending {
    src: TensorId,
    name: String,
    bytes: u64,
    expert_bytes: u64,
    n_expert: usize,
}

/// The staging slots and their state, shared by the hook and the context.
pub struct Staging {
    /// Each slot: the device it is on (an index into `devices`) and its memory.
    slots: Vec<(usize, TensorData)>,
    /// The devices' names.
    devices: Vec<String>,
    slot_bytes: usize,
    /// Per device, the slot to try first.
    next: Vec<usize>,
    min_tokens: usize,
    n_tokens: usize,
    pending: Vec<Pending>,
    /// Counters.
    pub stats: PrefetchStats,
    /// The slot count asked for (`-1`: auto).
    pub requested: i32,
    /// Why fewer slots than asked for were made, when that happened.
    pub note: Option<String>,
    /// Auto's decisions (`-1` only).
    auto: Option<AutoPlan>,
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

impl Staging {
    /// Slots for `model` on each of its devices: `requested` (`-1` auto,
    /// `0` none), as many as fit in `free[d]` bytes of device `d`'s memory
    /// (`None`, or no entry: unlimited) after `reserve[d]` bytes for other
    /// users of it (no entry: 0). Ubatches of more than `min_tokens` tokens
    /// are prefetched.
    pub fn new(
        model: &Model,
        requested: i32,
        free: &[Option<u64>],
        reserve: &[u64],
        min_tokens: usize,
    ) -> Result<Staging> {
        let mut st = Staging {
            slots: Vec::new(),
            devices: model.devices.iter().map(|d| d.name().to_string()).collect(),
            slot_bytes: 0,
            next: vec![0; model.devices.len()],
            min_tokens,
            n_tokens: 0,
            pending: Vec::new(),
            stats: PrefetchStats::default(),
            requested,
            note: None,
            auto: None,
        };
        if requested < -1 {
            return Err(LlamaError::Invalid(format!(
                "--prefetch-experts-slots {requested}: give a number of staging slots >= 0 (0 = off), or -1 for auto"
            )));
        }
        for (di, dev) in model.devices.iter().enumerate() {
            let groups = model_groups_on(model, Some(di));
            st.add_device_slots(
                di,
                dev,
                &groups,
                free.get(di).copied().flatten(),
                reserve.get(di).copied().unwrap_or(0),
            );
        }
        Ok(st)
    }

    /// Make device `di`'s slots for the host expert tensors of `groups`.
    fn add_device_slots(
        &mut self,
        di: usize,
        dev: &Arc<dyn Backend>,
        groups: &[super::layout::GroupShape],
        free: Option<u64>,
        reserve: u64,
    ) {
        let requested = self.requested;
        let st = self;
        if requested == 0 || groups.is_empty() || dev.is_host() || dev.n_copy_streams() == 0 {
            return;
        }
        let tensor_bytes = groups
            .iter()
            .flat_map(|g| {
                g.roles
                    .iter()
                    .map(move |r| r.expert_bytes * g.n_expert as usize)
            })
            .max()
            .unwrap_or(0);
        let n_tensors: usize = groups.iter().map(|g| 3 * g.layers.len()).sum();
        let slot_bytes = tensor_bytes + dev.read_overhang();
        let want = if requested < 0 {
            AUTO_SLOTS
        } else {
            requested as usize
        };
        let mut n = want.min(n_tensors.max(1));
        if n < want && requested > 0 {
            st.note = Some(format!(
                "--prefetch-experts-slots {requested}: the model has {n_tensors} host expert tensors; using {n} slots"
            ));
        }
        if let Some(free) = free {
            let avail = free.saturating_sub(reserve);
            let fit = (avail / slot_bytes.max(1) as u64) as usize;
            if fit < n {
                st.note = Some(format!(
                    "--prefetch-experts-slots {requested}: {n} staging slots of {:.2} MiB do not fit in {}'s memory ({:.2} MiB free for them); using {fit}",
                    mib(slot_bytes as u64),
                    dev.name(),
                    mib(avail)
                ));
                n = fit;
            }
        }
        st.slot_bytes = st.slot_bytes.max(tensor_bytes);
        if requested < 0 && st.auto.is_none() {
            let cost = match ggml_core::SimClock::of(dev.as_ref()) {
                Some(c) => CostModel::from_sim(c.profile()),
                None => CostModel::calibrate(dev),
            };
            let n_used = groups.iter().map(|g| g.n_used as usize).max().unwrap_or(1);
            st.auto = Some(AutoPlan::new(cost, n_used));
        }
        for _ in 0..n {
            match dev.alloc_buffer(slot_bytes, BufferUsage::Compute) {
                Ok(b) => st.slots.push((
                    di,
                    TensorData {
                        buffer: b,
                        offset: 0,
                    },
                )),
                Err(e) => {
                    st.note = Some(format!(
                        "--prefetch-experts-slots {requested}: slot {} of {:.2} MiB could not be allocated on {} ({e}); using {}",
                        st.slots.len() + 1,
                        mib(slot_bytes as u64),
                        dev.name(),
                        st.slots.iter().filter(|s| s.0 == di).count()
                    ));
                    break;
                }
            }
        }
    }

    /// Number of slots made.
    pub fn n_slots(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of one slot (the largest host expert tensor).
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Device memory the slots hold.
    pub fn bytes(&self) -> u64 {
        self.slots.iter().map(|s| s.1.buffer.size() as u64).sum()
    }

    /// A ubatch of `n_tokens` tokens is about to be computed.
    pub fn begin_ubatch(&mut self, n_tokens: usize) {
        self.n_tokens = n_tokens;
        self.pending.clear();
        if let Some(a) = &mut self.auto {
            a.begin_ubatch(n_tokens);
        }
    }

    /// Whether the slot count was `-1` (auto).
    pub fn is_auto(&self) -> bool {
        self.auto.is_some()
    }

    /// Auto: the selective copy of `src` (not staged) moved `written` of
    /// its `nbytes` bytes this ubatch; remembered as its use fraction.
    pub fn observe_copy(&mut self, g: &Graph, src: TensorId, nbytes: usize, written: u64) {
        if !self.active() || nbytes == 0 {
            return;
        }
        let t = g.tensor(src);
        if t.ne[2] <= 1 || t.ne[3] != 1 {
            return;
        }
        if let Some(a) = &mut self.auto {
            a.observe(&t.name, written as f64 / nbytes as f64);
        }
    }

    /// Whether this ubatch prefetches (slots exist and it is larger than
    /// the cache's insert limit).
    pub fn active(&self) -> bool {
        !self.slots.is_empty() && self.n_tokens > self.min_tokens
    }

    /// The look-ahead offers a host weight: stage an expert tensor whole
    /// into the next free slot.
    pub fn offer(&mut self, cx: &mut PrefetchCtx<'_>) -> std::result::Result<bool, HookError> {
        if !self.active() {
            return Ok(false);
        }
        let g = cx.graph();
        let src = g.tensor(cx.src());
        let consumers = cx.consumers();
        let expert_matmul = src.ne[2] > 1
            && src.ne[3] == 1
            && !consumers.is_empty()
            && consumers.iter().all(|&c| {
                let t = g.tensor(c);
                t.op == Op::MulMatId && t.src[0] == cx.dst()
            });
        let len = cx.nbytes();
        if !expert_matmul || len > self.slot_bytes {
            return Ok(false);
        }
        if let Some(a) = &mut self.auto {
            let mut n = AutoCounts::default();
            let d = a.decide(
                &src.name,
                len,
                src.ne[2] as usize,
                [src.ne[0], src.ne[1]],
                &mut n,
            );
            self.stats.auto_whole += n.whole;
            self.stats.auto_none += n.none;
            if d != Some(true) {
                return Ok(false);
            }
        }
        // the slots of the device whose split reads the tensor
        let Some(di) = self.devices.iter().position(|d| d == cx.backend().name()) else {
            return Ok(false);
        };
        let mine: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].0 == di)
            .collect();
        let n = mine.len();
        for k in 0..n {
            let j = (self.next[di] + k) % n;
            if cx.stage(self.slots[mine[j]].1.clone())? {
                self.next[di] = (j + 1) % n;
                cx.copy_range(0, len)?;
                self.stats.bytes += len as u64;
                self.stats.inputs += 1;
                self.stats.experts += src.ne[2] as u64;
                self.pending.push(Pending {
                    src: cx.src(),
                    name: src.name.clone(),
                    bytes: len as u64,
                    expert_bytes: src.nb[2] as u64,
                    n_expert: src.ne[2] as usize,
                });
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// After the ubatch's graph computed: read the ids of every staged
    /// tensor's `mul_mat_id` (graph outputs, still in memory) and count the
    /// staged bytes used and wasted.
    pub fn settle(&mut self, g: &Graph) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let mut read: Vec<(TensorId, HashSet<i32>)> = Vec::new();
        for p in pending {
            let mut used = vec![false; p.n_expert];
            for &n in g.nodes() {
                let t = g.tensor(n);
                if t.op != Op::MulMatId || t.src[0] != p.src {
                    continue;
                }
                let ids = t.src[2];
                let set = match read.iter().find(|(i, _)| *i == ids) {
                    Some((_, s)) => s.clone(),
                    None => {
                        let raw = g.read_bytes(ids)?;
                        let s: HashSet<i32> = raw
                            .chunks_exact(4)
                            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                            .collect();
                        read.push((ids, s.clone()));
                        s
                    }
                };
                for id in set {
                    if let Some(u) = usize::try_from(id).ok().and_then(|i| used.get_mut(i)) {
                        *u = true;
                    }
                }
            }
            let n_used = used.iter().filter(|&&u| u).count() as u64;
            let b = (n_used * p.expert_bytes).min(p.bytes);
            if let Some(a) = &mut self.auto {
                a.observe(&p.name, b as f64 / p.bytes.max(1) as f64);
            }
            self.stats.bytes_used += b;
            self.stats.bytes_wasted += p.bytes - b;
        }
        Ok(())
    }
}

/// The device memory free for staging slots: what the device reports free
/// now (after the graph's compute memory), `None` when unlimited.
pub fn free_memory(dev: &Arc<dyn Backend>) -> Option<u64> {
    dev.memory().map(|(free, _)| free as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_counts_parse_or_fail_naming_the_value() {
        assert_eq!(parse_slots("-1"), Ok(-1));
        assert_eq!(parse_slots("0"), Ok(0));
        assert_eq!(parse_slots(" 3 "), Ok(3));
        let e = parse_slots("-7").unwrap_err();
        assert!(
            e.contains("-7") && e.contains(">= 0") && e.contains("-1"),
            "{e}"
        );
        let e = parse_slots("x").unwrap_err();
        assert!(e.contains("'x'"), "{e}");
        assert!(parse_slots("99999999999").is_err());
    }
}
