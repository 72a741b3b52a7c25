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
//! ubatch among three choices ([`auto`]): not staged,
//! staged whole, or staged *selectively*; `N > 0` stages every offered
//! expert tensor whole.
//!
//! The selective prefetch: under auto, the prompt graph predicts each MoE
//! layer's experts from the previous layer's hidden state through the
//! layer's router (the decode predictor's node, [`crate::moe_cache::predict::pred_name`],
//! here over every token of the ubatch). When the look-ahead offers one of
//! the layer's expert tensors after the split computing that guess was
//! queued, the hook reads the guess after that split's event
//! ([`PrefetchCtx::read_computed`]), claims a slot as a *partial* staging
//! ([`PrefetchCtx::stage_partial`]) and copies the byte ranges of the union
//! of the tokens' guessed experts, each at its own offset (so `mul_mat_id`
//! reads the slot as the whole tensor, with unchanged ids). When the
//! layer's split comes the scheduler offers the tensor again with the slot
//! as destination; the hook reads the real ids (as the selective copy does)
//! and copies only the experts the guess missed ([`Staging::complete`]), on
//! the copy stream, before the split computes. No byte crosses twice: the
//! late ranges are those of the guessed and needed experts less what was
//! staged, so a tensor never moves more than its bytes. After each ubatch
//! the context measures every layer's guess against its ids (precision and
//! recall, [`PrefetchStats`]), which auto's next decisions use.
//!
//! With several devices each device gets its own slots, for the layers
//! whose experts it computes (the same count on each, as many as fit in
//! its memory); a tensor is staged into a slot of the device of the split
//! that reads it.

pub mod auto;

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::ops::Range;
use std::sync::Arc;

use ggml_core::{Backend, BufferUsage, Graph, Op, TensorData, TensorId};
use ggml_sched::{HookCtx, HookError, PrefetchCtx};

use crate::diagnostics;
use crate::error::{LlamaError, Result};
use crate::model::Model;

use crate::expert_copy::ids;
use crate::expert_copy::runs::copy_ranges;
use crate::moe_cache::cache::layout::model_groups_on;
use crate::moe_cache::cost::CostModel;
use crate::moe_cache::predict::pred_name;
use auto::{AutoCounts, AutoPlan, Choice, Prediction, PredictionCounts};

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

/// How the prefill prefetch stages host expert tensors
/// (`--prefetch-experts-slots`: `0` off, `-1` auto, `N` slots).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrefetchSlots {
    /// No prefetch (`0`, the default).
    #[default]
    Off,
    /// [`AUTO_SLOTS`] slots (fewer when they do not fit); per tensor and
    /// ubatch not staged, staged whole or staged selectively, as the costs
    /// say (`-1`).
    Auto(AutoPrefetch),
    /// This many slots (fewer when they do not fit, or when the model has
    /// fewer host expert tensors); every offered tensor staged whole (`N`).
    Fixed(NonZeroUsize),
}

/// The options of [`PrefetchSlots::Auto`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoPrefetch {
    /// Whether auto may choose the selective prefetch of each layer's
    /// predicted experts on prompt ubatches (the prompt graph then
    /// predicts them; `--prefetch-selective`, on by default).
    pub selective: bool,
    /// Take this choice wherever possible instead of the cost model's
    /// (tests and measurements; `Selective` stages whole the layers without
    /// a guess; `None`, the default: the costs).
    pub force: Option<Choice>,
}

impl Default for AutoPrefetch {
    fn default() -> Self {
        AutoPrefetch {
            selective: true,
            force: None,
        }
    }
}

impl PrefetchSlots {
    /// The setting of a `--prefetch-experts-slots` count (`-1` auto with
    /// `auto`'s options, `0` off, `N` slots); an error names a count below
    /// `-1`.
    pub fn from_count(n: i64, auto: AutoPrefetch) -> Result<PrefetchSlots> {
        match n {
            -1 => Ok(PrefetchSlots::Auto(auto)),
            0 => Ok(PrefetchSlots::Off),
            n => usize::try_from(n)
                .ok()
                .and_then(NonZeroUsize::new)
                .map(PrefetchSlots::Fixed)
                .ok_or_else(|| {
                    LlamaError::Invalid(format!(
                        "--prefetch-experts-slots {n}: give a number of staging slots >= 0 (0 = off), or -1 for auto"
                    ))
                }),
        }
    }

    /// `n` slots (`0`: off).
    pub fn fixed(n: usize) -> PrefetchSlots {
        NonZeroUsize::new(n).map_or(PrefetchSlots::Off, PrefetchSlots::Fixed)
    }

    /// The flag's count: `0`, `-1` or `N`.
    pub fn count(&self) -> i64 {
        match self {
            PrefetchSlots::Off => 0,
            PrefetchSlots::Auto(_) => -1,
            PrefetchSlots::Fixed(n) => n.get() as i64,
        }
    }

    /// Whether the prefetch is on (auto or a count).
    pub fn is_on(&self) -> bool {
        *self != PrefetchSlots::Off
    }
}

impl std::fmt::Display for PrefetchSlots {
    /// The flag's spelling (`0`, `-1`, `N`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.count())
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
    /// Auto: tensors (per ubatch) it prefetched selectively (the predicted
    /// experts early, the missed ones at the split).
    pub auto_selective: u64,
    /// Selective prefetch: bytes copied at the consuming split for the
    /// experts the guess missed (on the critical path; not in `bytes`).
    pub selective_late_bytes: u64,
    /// Layers (per ubatch) whose prompt guess was measured.
    pub predicted_layers: u64,
    /// Distinct experts those layers' ids named.
    pub predicted_experts_needed: u64,
    /// Distinct experts guessed for them.
    pub predicted_experts: u64,
    /// Of those, experts the ids named.
    pub predicted_experts_correct: u64,
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
            auto_selective: self.auto_selective - b.auto_selective,
            selective_late_bytes: self.selective_late_bytes - b.selective_late_bytes,
            predicted_layers: self.predicted_layers - b.predicted_layers,
            predicted_experts_needed: self.predicted_experts_needed - b.predicted_experts_needed,
            predicted_experts: self.predicted_experts - b.predicted_experts,
            predicted_experts_correct: self.predicted_experts_correct - b.predicted_experts_correct,
        }
    }

    /// The prompt guesses' counts over the measured layers.
    fn prediction_counts(&self) -> PredictionCounts {
        PredictionCounts {
            needed: self.predicted_experts_needed,
            predicted: self.predicted_experts,
            correct: self.predicted_experts_correct,
        }
    }

    /// Of the experts the measured layers needed, the fraction guessed.
    pub fn prediction_recall(&self) -> Option<f64> {
        self.prediction_counts().recall()
    }

    /// Of the experts guessed, the fraction needed.
    pub fn prediction_precision(&self) -> Option<f64> {
        self.prediction_counts().precision()
    }
}

/// A tensor staged selectively, waiting for its completion.
#[derive(Clone, Debug)]
struct PartialStaged {
    name: String,
    /// The experts staged.
    staged: Vec<bool>,
    /// The byte ranges copied early.
    ranges: Vec<Range<usize>>,
    expert_bytes: usize,
    bytes: u64,
}

/// The MoE layer of an expert tensor named `blk.{il}.…`.
fn layer_of(name: &str) -> Option<u32> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// `want` less `have` (both sorted, disjoint byte ranges).
fn subtract(want: &[Range<usize>], have: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for w in want {
        let mut start = w.start;
        for h in have {
            if h.end <= start || h.start >= w.end {
                continue;
            }
            if h.start > start {
                out.push(start..h.start);
            }
            start = start.max(h.end);
        }
        if start < w.end {
            out.push(start..w.end);
        }
    }
    out
}

/// Distinct experts named by raw i32 ids, as a mask over `n_expert`; an id
/// out of range is an error naming `what`.
fn id_mask(raw: &[u8], n_expert: usize, what: &str) -> std::result::Result<Vec<bool>, String> {
    let mut m = vec![false; n_expert];
    for (i, id) in ids::decode_i32(raw).into_iter().enumerate() {
        m[ids::expert_index(id, i, n_expert, what)?] = true;
    }
    Ok(m)
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
    /// The slots asked for.
    pub requested: PrefetchSlots,
    /// Why fewer slots than asked for were made, when that happened.
    pub note: Option<String>,
    /// Auto's decisions (`-1` only).
    auto: Option<AutoPlan>,
    /// Auto: whether the prompt graph predicts each layer's experts.
    predict: bool,
    /// Auto: take this choice instead of the costs' (tests, measurements).
    force: Option<Choice>,
    /// This ubatch: each layer's guess once read (`None`: not computed yet
    /// when last asked).
    guesses: HashMap<u32, Vec<bool>>,
    /// This ubatch: each MoE layer's ids tensor (its experts' consumers').
    layer_ids: HashMap<u32, TensorId>,
    /// This ubatch: tensors staged selectively, not completed yet.
    partial: HashMap<TensorId, PartialStaged>,
    /// Auto on a sim device: its clock (device busy time per ubatch).
    clock: Option<Arc<ggml_core::SimClock>>,
    /// This ubatch: the device's busy time when it began, and the expert
    /// tensors offered.
    busy0: u64,
    offered: HashSet<TensorId>,
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

impl Staging {
    /// Slots for `model` on each of its devices: `requested`, as many as
    /// fit in `free[d]` bytes of device `d`'s memory (`None`, or no entry:
    /// unlimited) after `reserve[d]` bytes for other users of it (no entry:
    /// 0). Ubatches of more than `min_tokens` tokens are prefetched.
    pub fn new(
        model: &Model,
        requested: PrefetchSlots,
        free: &[Option<u64>],
        reserve: &[u64],
        min_tokens: usize,
    ) -> Staging {
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
            predict: true,
            force: None,
            guesses: HashMap::new(),
            layer_ids: HashMap::new(),
            partial: HashMap::new(),
            clock: None,
            busy0: 0,
            offered: HashSet::new(),
        };
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
        if let PrefetchSlots::Auto(a) = requested {
            st.set_auto_options(a.selective, a.force);
        }
        st
    }

    /// Make device `di`'s slots for the host expert tensors of `groups`.
    fn add_device_slots(
        &mut self,
        di: usize,
        dev: &Arc<dyn Backend>,
        groups: &[crate::moe_cache::cache::layout::GroupShape],
        free: Option<u64>,
        reserve: u64,
    ) {
        let requested = self.requested;
        let st = self;
        if requested == PrefetchSlots::Off
            || groups.is_empty()
            || dev.is_host()
            || dev.n_copy_streams() == 0
        {
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
        let want = match requested {
            PrefetchSlots::Off => 0,
            PrefetchSlots::Auto(_) => AUTO_SLOTS,
            PrefetchSlots::Fixed(n) => n.get(),
        };
        let mut n = want.min(n_tensors.max(1));
        if n < want && matches!(requested, PrefetchSlots::Fixed(_)) {
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
        if matches!(requested, PrefetchSlots::Auto(_)) && st.auto.is_none() {
            st.clock = ggml_core::SimClock::of(dev.as_ref());
            let cost = match &st.clock {
                Some(c) => CostModel::from_sim(c.profile()),
                None => CostModel::calibrate(dev),
            };
            let n_used = groups.iter().map(|g| g.n_used as usize).max().unwrap_or(1);
            let mut a = AutoPlan::new(cost, n_used);
            a.force = st.force;
            st.auto = Some(a);
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

    /// A copy of the counters now.
    pub fn counters(&self) -> PrefetchStats {
        self.stats
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

    /// Auto: whether the selective prefetch may be chosen (the prompt
    /// graph then predicts each layer's experts; on by default), and a
    /// choice to take wherever possible instead of the costs' (`None`:
    /// decide by the costs).
    fn set_auto_options(&mut self, selective: bool, force: Option<Choice>) {
        self.predict = selective || force == Some(Choice::Selective);
        self.force = force;
        if let Some(a) = &mut self.auto {
            a.force = force;
            a.selective = self.predict;
        }
    }

    /// Whether a ubatch of `n_tokens` tokens predicts each MoE layer's
    /// experts in its graph (auto, with the selective prefetch possible,
    /// on a ubatch that prefetches).
    pub fn predicts(&self, n_tokens: usize) -> bool {
        self.auto.is_some() && self.predict && !self.slots.is_empty() && n_tokens > self.min_tokens
    }

    /// A ubatch of `n_tokens` tokens is about to be computed.
    pub fn begin_ubatch(&mut self, n_tokens: usize) {
        self.n_tokens = n_tokens;
        self.pending.clear();
        self.guesses.clear();
        self.layer_ids.clear();
        self.offered.clear();
        self.busy0 = self.clock.as_ref().map_or(0, |c| c.totals().device_busy_ns);
        for (_, p) in self.partial.drain() {
            // staged by a graph that failed before completing it
            self.stats.bytes_wasted += p.bytes;
        }
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

    /// The look-ahead offers a host weight: under auto, decide it (none,
    /// whole or selective); stage an expert tensor whole, or its guessed
    /// experts, into the next free slot.
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
        let n_expert = src.ne[2] as usize;
        let expert_bytes = src.nb[2];
        let layer = layer_of(&src.name);
        self.offered.insert(cx.src());
        if let (Some(l), Some(&c)) = (layer, consumers.first()) {
            self.layer_ids.entry(l).or_insert(g.tensor(c).src[2]);
        }
        let mut choice = Choice::Whole;
        let mut staged: Option<Vec<bool>> = None;
        if self.auto.is_some() {
            // (a tensor already decided otherwise needs no guess: no read)
            let settled = self
                .auto
                .as_ref()
                .and_then(|a| a.decided(&src.name))
                .is_some_and(|d| d != Choice::Selective);
            let guess = match layer {
                Some(l) if self.predict && !settled => self.guess(cx, l, n_expert)?,
                _ => None,
            };
            let pred = match &guess {
                Some(Some(m)) => Prediction::Ready {
                    staged_bytes: copy_ranges(m, expert_bytes, len, cx.read_overhang())
                        .iter()
                        .map(|r| r.len())
                        .sum(),
                },
                Some(None) => Prediction::Pending,
                None => Prediction::Absent,
            };
            let Some(a) = self.auto.as_mut() else {
                return Ok(false);
            };
            let mut n = AutoCounts::default();
            let d = a.decide(
                &src.name,
                layer.unwrap_or(u32::MAX),
                len,
                n_expert,
                [src.ne[0], src.ne[1]],
                pred,
                &mut n,
            );
            self.stats.auto_whole += n.whole;
            self.stats.auto_none += n.none;
            self.stats.auto_selective += n.selective;
            match d {
                Some(Choice::Whole) => {}
                Some(Choice::Selective) => match guess {
                    Some(Some(m)) => {
                        choice = Choice::Selective;
                        staged = Some(m);
                    }
                    _ => return Ok(false),
                },
                _ => return Ok(false),
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
            let slot = self.slots[mine[j]].1.clone();
            let claimed = match choice {
                Choice::Selective => cx.stage_partial(slot)?,
                _ => cx.stage(slot)?,
            };
            if !claimed {
                continue;
            }
            self.next[di] = (j + 1) % n;
            match staged {
                Some(m) => {
                    let ranges = copy_ranges(&m, expert_bytes, len, cx.read_overhang());
                    for r in &ranges {
                        cx.copy_range(r.start, r.len())?;
                    }
                    let bytes = cx.bytes_written();
                    self.stats.bytes += bytes;
                    self.stats.inputs += 1;
                    self.stats.experts += m.iter().filter(|&&u| u).count() as u64;
                    self.partial.insert(
                        cx.src(),
                        PartialStaged {
                            name: src.name.clone(),
                            staged: m,
                            ranges,
                            expert_bytes,
                            bytes,
                        },
                    );
                }
                None => {
                    cx.copy_range(0, len)?;
                    self.stats.bytes += len as u64;
                    self.stats.inputs += 1;
                    self.stats.experts += n_expert as u64;
                    self.pending.push(Pending {
                        src: cx.src(),
                        name: src.name.clone(),
                        bytes: len as u64,
                        expert_bytes: expert_bytes as u64,
                        n_expert,
                    });
                }
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Layer `layer`'s guess this ubatch: `None` when the graph has no
    /// guess for it, `Some(None)` when the split computing it is not
    /// queued yet, else the guessed experts (read once per ubatch).
    fn guess(
        &mut self,
        cx: &PrefetchCtx<'_>,
        layer: u32,
        n_expert: usize,
    ) -> std::result::Result<Option<Option<Vec<bool>>>, HookError> {
        if let Some(m) = self.guesses.get(&layer) {
            return Ok(Some(Some(m.clone())));
        }
        let g = cx.graph();
        let name = pred_name(layer as usize);
        let Some(pred) = g
            .nodes()
            .iter()
            .copied()
            .find(|&n| g.tensor(n).name == name)
        else {
            return Ok(None);
        };
        // a guess computed on another device (several devices): none here
        let here = g
            .data_of(pred)
            .is_some_and(|d| !d.buffer.is_host() && cx.backend().can_use_buffer(d.buffer.as_ref()));
        if !here {
            return Ok(None);
        }
        let Some(raw) = cx.read_computed(pred)? else {
            return Ok(Some(None));
        };
        diagnostics::count_id_read(cx.backend());
        let m = id_mask(&raw, n_expert, &name).map_err(HookError::msg)?;
        self.guesses.insert(layer, m.clone());
        Ok(Some(Some(m)))
    }

    /// The scheduler offers a tensor staged selectively again, at its
    /// split (`cx.completes_staging()`), with the slot as destination:
    /// copy the experts `used` names (the consumers' ids, `None` when the
    /// input is not an expert matmul's) that were not staged, without
    /// copying any byte twice. `Ok(false)` (the scheduler then copies the
    /// tensor whole into the slot) when the tensor was not staged here or
    /// its use is unknown.
    pub fn complete(
        &mut self,
        cx: &mut HookCtx<'_>,
        used: Option<&[bool]>,
    ) -> std::result::Result<bool, HookError> {
        let Some(p) = self.partial.remove(&cx.src()) else {
            return Ok(false);
        };
        let Some(used) = used.filter(|u| u.len() == p.staged.len()) else {
            self.stats.bytes_wasted += p.bytes;
            return Ok(false);
        };
        let total = cx.nbytes();
        let overhang = cx.read_overhang();
        let union: Vec<bool> = used.iter().zip(&p.staged).map(|(&u, &s)| u || s).collect();
        let want = copy_ranges(&union, p.expert_bytes, total, overhang);
        for r in subtract(&want, &p.ranges) {
            cx.copy_range(r.start, r.len())?;
        }
        let late = cx.bytes_written();
        self.stats.selective_late_bytes += late;
        let missed = used
            .iter()
            .zip(&p.staged)
            .filter(|(&u, &s)| u && !s)
            .count();
        self.stats.experts += missed as u64;
        let hit = used.iter().zip(&p.staged).filter(|(&u, &s)| u && s).count();
        let b = (hit as u64 * p.expert_bytes as u64).min(p.bytes);
        self.stats.bytes_used += b;
        self.stats.bytes_wasted += p.bytes - b;
        if let Some(a) = &mut self.auto {
            let need: usize = copy_ranges(used, p.expert_bytes, total, overhang)
                .iter()
                .map(|r| r.len())
                .sum();
            a.observe(&p.name, need as f64 / total.max(1) as f64);
        }
        Ok(true)
    }

    /// After the ubatch's graph computed: read the ids of every staged
    /// tensor's `mul_mat_id` (graph outputs, still in memory) and count the
    /// staged bytes used and wasted; measure each layer's guess against its
    /// ids (auto's recall, and the prediction counters).
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
        for (_, p) in self.partial.drain() {
            // staged, never completed (its split did not run)
            self.stats.bytes_wasted += p.bytes;
        }
        let active = self.active();
        if let (Some(c), Some(a), true) = (&self.clock, &mut self.auto, active) {
            let busy = c.totals().device_busy_ns.saturating_sub(self.busy0);
            a.observe_device_time(busy as f64 / 1e9, self.offered.len(), self.n_tokens);
        }
        if !self.predict || self.auto.is_none() || !self.active() {
            return Ok(());
        }
        // every layer's guess against its ids
        let preds: HashMap<u32, TensorId> = g
            .nodes()
            .iter()
            .filter_map(|&n| {
                let l = g
                    .tensor(n)
                    .name
                    .strip_prefix("ffn_moe_pred-")?
                    .parse()
                    .ok()?;
                Some((l, n))
            })
            .collect();
        let mut layers: Vec<(u32, TensorId)> =
            self.layer_ids.iter().map(|(&l, &i)| (l, i)).collect();
        layers.sort_unstable();
        for (l, ids) in layers {
            let Some(&pred) = preds.get(&l) else {
                continue;
            };
            let n_expert = self.n_expert_of(g, ids, pred);
            let need = id_mask(&g.read_bytes(ids)?, n_expert, &g.tensor(ids).name)
                .map_err(LlamaError::Invalid)?;
            let guess = id_mask(&g.read_bytes(pred)?, n_expert, &g.tensor(pred).name)
                .map_err(LlamaError::Invalid)?;
            let c = PredictionCounts {
                needed: need.iter().filter(|&&u| u).count() as u64,
                predicted: guess.iter().filter(|&&u| u).count() as u64,
                correct: need.iter().zip(&guess).filter(|(&a, &b)| a && b).count() as u64,
            };
            self.stats.predicted_layers += 1;
            self.stats.predicted_experts_needed += c.needed;
            self.stats.predicted_experts += c.predicted;
            self.stats.predicted_experts_correct += c.correct;
            if let Some(a) = &mut self.auto {
                a.observe_prediction(l, c);
            }
        }
        Ok(())
    }

    /// The expert count of the layer whose ids are `ids`: the first
    /// expert tensor a `mul_mat_id` reads with them (else the router's
    /// width, the guess's source).
    fn n_expert_of(&self, g: &Graph, ids: TensorId, pred: TensorId) -> usize {
        let by_matmul = g.nodes().iter().find_map(|&n| {
            let t = g.tensor(n);
            (t.op == Op::MulMatId && t.src[2] == ids)
                .then(|| g.tensor(t.src[0]).ne[2].max(0) as usize)
        });
        by_matmul.unwrap_or_else(|| {
            let logits = g.tensor(pred).src[0];
            g.tensor(logits).ne[0].max(0) as usize
        })
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
    fn slot_counts_become_settings_or_errors_naming_the_count() {
        let auto = AutoPrefetch {
            selective: false,
            force: Some(Choice::Whole),
        };
        assert_eq!(
            PrefetchSlots::from_count(0, auto).ok(),
            Some(PrefetchSlots::Off)
        );
        assert_eq!(
            PrefetchSlots::from_count(-1, auto).ok(),
            Some(PrefetchSlots::Auto(auto))
        );
        assert_eq!(
            PrefetchSlots::from_count(3, auto).ok(),
            Some(PrefetchSlots::fixed(3))
        );
        assert_eq!(PrefetchSlots::fixed(0), PrefetchSlots::Off);
        for n in [-1, 0, 1, 7] {
            let p = PrefetchSlots::from_count(n, auto).expect("a count");
            assert_eq!(p.count(), n);
            assert_eq!(p.to_string(), n.to_string());
            assert_eq!(p.is_on(), n != 0);
        }
        for n in [-2, -7, i64::MIN] {
            let e = PrefetchSlots::from_count(n, auto).expect_err("below -1");
            let m = e.to_string();
            assert!(
                m.contains(&format!("--prefetch-experts-slots {n}")) && m.contains("-1 for auto"),
                "{m}"
            );
        }
    }

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
