//! `--fit`: plan where a MoE model's memory goes before loading it, from
//! each device's free memory (llama.cpp's `--fit`, made aware of experts).
//!
//! The planner is a pure function ([`plan`]) of
//! - the model's tensor sizes by name and its shape ([`FitModel`], read from
//!   the GGUF header by [`FitModel::from_gguf`] without loading a weight),
//! - each device's free memory ([`FitDevice`]),
//! - the settings that cost device memory and the placements already given
//!   ([`FitParams`]: `-c`, `-ub`, K/V types, `--cpu-moe`, `--n-cpu-moe`,
//!   `-ot` rules, `-ts`, prefetch staging slots, the margin).
//!
//! Placements already given are kept: a tensor an `-ot` rule matches goes
//! where the rule says, `--cpu-moe` keeps every expert tensor in host
//! memory, `--n-cpu-moe N` those of layers `0..N`; a given `-ts` keeps its
//! layer split. The rest is planned, in llama.cpp's order:
//!
//! 1. every device keeps a **margin** free: `--fit-target` MiB when given,
//!    else [`DEFAULT_MARGIN`] (1024 MiB, llama.cpp's default) but at most
//!    1/[`MARGIN_DIV`] of the device's free memory, so that a small device
//!    is not all margin;
//! 2. each device reserves its **compute memory** (an upper bound of what the
//!    scheduler allocates for the largest graph: see [`compute_bytes`]) and,
//!    when it will compute with experts in host memory, the prefetch
//!    **staging slots**;
//! 3. the **dense weights** (attention, norms, routers, shared experts, the
//!    output head on the last device) and the **KV cache** for `-c` cells
//!    are split into contiguous layer ranges, in proportion to what each
//!    device has left (the layer split, written as per-device layer counts:
//!    the `-ts` that gives it);
//! 4. **experts** go on their layer's device from its last layer down while
//!    they fit; the first layer whose experts do not fit, and every layer
//!    before it on that device, keeps its experts in host memory;
//! 5. what is left on a device that computes with host experts becomes its
//!    **expert cache** (less the cache's own lookup buffer).
//!
//! When the dense weights, KV cache and compute memory do not fit, the
//! error says how many MiB are missing on which device.

use std::fmt::Write as _;

use ggml_core::gguf::GgufFile;
use ggml_core::GgmlType;
use regex::Regex;

use crate::error::{LlamaError, Result};
use crate::hparams::HParams;
use crate::placement::{OverrideRule, Placement, SplitMode, EXPERT_PATTERN};

/// The margin every device keeps free when `--fit-target` is not given:
/// llama.cpp's default, 1024 MiB ...
pub const DEFAULT_MARGIN: u64 = 1024 << 20;

/// ... but at most this fraction (1/16) of the device's free memory.
pub const MARGIN_DIV: u64 = 16;

/// Alignment of each weight in a device's weight buffer (as
/// [`crate::model::Model`] lays them out).
const WEIGHT_ALIGN: u64 = 64;

/// Alignment of the expert cache's buffers.
const CACHE_ALIGN: u64 = crate::moe_cache::cache::layout::ALIGN as u64;

/// The cache budgets are multiples of this (1/64 MiB): their MiB values,
/// as `--moe-cache-mib` takes them, are exact decimals.
const CACHE_QUANTUM: u64 = 1 << 14;

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// One tensor of the model, as the planner sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct FitTensor {
    /// GGUF name.
    pub name: String,
    /// Bytes of its data.
    pub bytes: u64,
}

/// What the compute memory estimate needs of the model's shape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FitShape {
    /// Embedding width.
    pub n_embd: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head width of keys and queries.
    pub head_k: usize,
    /// Head width of values.
    pub head_v: usize,
    /// Widest dense or shared-expert FFN.
    pub n_ff: usize,
    /// Width of one expert's FFN.
    pub n_ff_exp: usize,
    /// Experts per layer.
    pub n_expert: usize,
    /// Experts used per token.
    pub n_expert_used: usize,
    /// Vocabulary size (rows of the output head).
    pub n_vocab: usize,
}

/// The model as the planner sees it: tensor sizes by name and shape.
#[derive(Clone, Debug, PartialEq)]
pub struct FitModel {
    /// Decoder layers.
    pub n_layer: usize,
    /// Training context (what `-c 0` means).
    pub n_ctx_train: usize,
    /// Every tensor.
    pub tensors: Vec<FitTensor>,
    /// KV cache bytes of one cell of each layer (K and V).
    pub kv_cell_bytes: Vec<u64>,
    /// The shape, for the compute memory estimate.
    pub shape: FitShape,
}

impl FitModel {
    /// Read the tensor sizes and hyper-parameters from the file's header
    /// (no weight is read), with the KV cache's K and V types.
    pub fn from_gguf(file: &GgufFile, type_k: GgmlType, type_v: GgmlType) -> Result<FitModel> {
        let hp = HParams::from_gguf(file)?;
        let tensors = file
            .tensors()
            .iter()
            .map(|t| FitTensor {
                name: t.name.clone(),
                bytes: t.size as u64,
            })
            .collect();
        let (ek, ev) = (hp.n_embd_k_gqa() as u64, hp.n_embd_v_gqa() as u64);
        let row = |ty: GgmlType, n: u64| -> Result<u64> {
            Ok(if n == 0 {
                0
            } else {
                ty.row_size(n).ok_or_else(|| {
                    LlamaError::Invalid(format!(
                        "--fit: KV cache type {ty} cannot store rows of {n} values"
                    ))
                })? as u64
            })
        };
        let cell = row(type_k, ek)? + if hp.is_mla() { 0 } else { row(type_v, ev)? };
        let (head_k, head_v) = if hp.is_mla() {
            (
                hp.n_embd_head_k_mla.max(hp.n_lora_kv),
                hp.n_embd_head_v_mla.max(hp.n_lora_kv),
            )
        } else {
            (hp.n_embd_head_k, hp.n_embd_head_v)
        };
        Ok(FitModel {
            n_layer: hp.n_layer,
            n_ctx_train: hp.n_ctx_train,
            tensors,
            kv_cell_bytes: vec![cell; hp.n_layer],
            shape: FitShape {
                n_embd: hp.n_embd,
                n_head: hp.n_head,
                n_head_kv: hp.n_head_kv,
                head_k,
                head_v,
                n_ff: hp.n_ff.max(hp.n_ff_shexp),
                n_ff_exp: hp.n_ff_exp,
                n_expert: hp.n_expert,
                n_expert_used: hp.n_expert_used,
                n_vocab: hp.n_vocab,
            },
        })
    }
}

/// One device and its free memory.
#[derive(Clone, Debug, PartialEq)]
pub struct FitDevice {
    /// Name (`SIM0`, `CUDA1`).
    pub name: String,
    /// Free bytes before anything of the model is loaded.
    pub free: u64,
}

/// The settings that cost device memory, and the placements already given.
#[derive(Clone, Debug)]
pub struct FitParams {
    /// KV cells (`-c`).
    pub n_ctx: usize,
    /// Largest ubatch (`-ub`, at most `-b`).
    pub n_ubatch: usize,
    /// The margin each device keeps free (`--fit-target`, bytes); `None`:
    /// [`DEFAULT_MARGIN`], at most 1/[`MARGIN_DIV`] of the device.
    pub margin: Option<u64>,
    /// `-ot` rules given (kept).
    pub overrides: Vec<OverrideRule>,
    /// `--cpu-moe` given.
    pub cpu_moe: bool,
    /// `--n-cpu-moe N` given.
    pub n_cpu_moe: usize,
    /// `-ts` given (kept): a proportion per device.
    pub tensor_split: Option<Vec<f32>>,
    /// `-sm none` given (kept): every layer on this device (`-mg`).
    pub split_none: Option<usize>,
    /// Staging slots of the prefill prefetch (`--prefetch-experts-slots`;
    /// `-1` = auto).
    pub prefetch_slots: i32,
    /// Whether an expert cache is wanted (`--moe-cache-mib` other than 0).
    pub cache: bool,
    /// Largest ubatch that uses the cache (`--moe-cache-max-batch`).
    pub cache_max_batch: usize,
    /// Smallest batch for which the device runs an op whose weights are in
    /// host memory (`-nomb`).
    pub offload_min_batch: usize,
    /// The compute alias (`--moe-cache-alias on`): where a device caches
    /// host experts, the prompt graphs borrow the cache's banks, so the
    /// compute memory reserved apart is only the cached ubatches' and the
    /// cache gets the rest ([`crate::moe_cache::alias`]).
    pub cache_alias: bool,
}

impl Default for FitParams {
    fn default() -> Self {
        FitParams {
            n_ctx: 4096,
            n_ubatch: 512,
            margin: None,
            overrides: Vec::new(),
            cpu_moe: false,
            n_cpu_moe: 0,
            tensor_split: None,
            split_none: None,
            prefetch_slots: 0,
            cache: true,
            cache_max_batch: crate::moe_cache::DEFAULT_MAX_BATCH,
            offload_min_batch: 32,
            cache_alias: false,
        }
    }
}

/// One device's share of the plan (bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct DevicePlan {
    /// Name.
    pub name: String,
    /// Free memory before loading.
    pub free: u64,
    /// Kept free.
    pub margin: u64,
    /// First layer on the device.
    pub first_layer: usize,
    /// Layers on the device (`first_layer..first_layer + n_layers`).
    pub n_layers: usize,
    /// Whether the output head is on the device.
    pub output: bool,
    /// Dense weights (everything but experts) on the device.
    pub dense: u64,
    /// Expert weights on the device.
    pub experts: u64,
    /// KV cache of its layers.
    pub kv: u64,
    /// Compute memory reserved (the largest graph).
    pub compute: u64,
    /// Prefetch staging slots.
    pub staging: u64,
    /// Expert cache budget (`--moe-cache-mib` of this device).
    pub cache: u64,
    /// The cache's lookup buffer, beside the budget.
    pub cache_overhead: u64,
    /// Layers of the device whose experts stay in host memory.
    pub host_expert_layers: Vec<usize>,
    /// With the compute alias: the prompt ubatch whose worst-case graph
    /// fits in the cache (`-ub`, or halved down to 512) and that graph's
    /// compute bytes, which the cache lends (not counted in `compute`).
    pub alias: Option<(usize, u64)>,
}

impl DevicePlan {
    /// Everything planned on the device, margin excluded.
    pub fn total(&self) -> u64 {
        self.dense
            + self.experts
            + self.kv
            + self.compute
            + self.staging
            + self.cache
            + self.cache_overhead
    }
}

/// The plan.
#[derive(Clone, Debug, PartialEq)]
pub struct FitPlan {
    /// Decoder layers.
    pub n_layer: usize,
    /// Each device's share, in device order.
    pub devices: Vec<DevicePlan>,
    /// Layers whose experts stay in host memory (given or planned), sorted.
    pub host_expert_layers: Vec<usize>,
    /// Expert bytes that stay in host memory.
    pub host_expert_bytes: u64,
}

impl FitPlan {
    /// The layer split as `-ts` proportions: each device's layer count, the
    /// output head counted on its device (the placement splits the layers
    /// and the head, `n_layer + 1` in all, by these shares).
    pub fn tensor_split(&self) -> Vec<f32> {
        self.devices
            .iter()
            .map(|d| (d.n_layers + usize::from(d.output)) as f32)
            .collect()
    }

    /// `Some(N)` when the host expert layers are exactly `0..N`
    /// (`--n-cpu-moe N` says it).
    pub fn n_cpu_moe(&self) -> Option<usize> {
        let n = self.host_expert_layers.len();
        self.host_expert_layers
            .iter()
            .enumerate()
            .all(|(i, &l)| i == l)
            .then_some(n)
    }

    /// The host expert layers as one `-ot` rule text (`None` when there are
    /// none): `blk\.(0|1|5)\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU`.
    pub fn override_text(&self) -> Option<String> {
        if self.host_expert_layers.is_empty() {
            return None;
        }
        let alts: Vec<String> = self
            .host_expert_layers
            .iter()
            .map(|l| l.to_string())
            .collect();
        Some(format!(r"blk\.({}){EXPERT_PATTERN}=CPU", alts.join("|")))
    }

    /// The host expert layers as an `-ot` rule for [`crate::placement`].
    pub fn override_rule(&self) -> Option<OverrideRule> {
        let text = self.override_text()?;
        let (pat, _) = text.rsplit_once('=')?;
        Some(OverrideRule {
            pattern: Regex::new(pat).ok()?,
            backend: "CPU".into(),
        })
    }

    /// Each device's cache budget in MiB (exact: a multiple of 1/64 MiB),
    /// `--moe-cache-mib`'s values in device order.
    pub fn cache_mib(&self) -> Vec<f64> {
        self.devices.iter().map(|d| mib(d.cache)).collect()
    }

    /// The plan as a table (the tools print it on stderr before loading).
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "fit: {:<8} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "device",
            "layers",
            "host-x",
            "free",
            "dense",
            "experts",
            "kv",
            "compute",
            "staging",
            "cache",
            "margin"
        );
        for d in &self.devices {
            let layers = if d.n_layers == 0 {
                "-".to_string()
            } else {
                format!(
                    "{}-{}{}",
                    d.first_layer,
                    d.first_layer + d.n_layers - 1,
                    if d.output { "+o" } else { "" }
                )
            };
            let _ = writeln!(
                s,
                "fit: {:<8} {:>9} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                d.name,
                layers,
                d.host_expert_layers.len(),
                mib(d.free),
                mib(d.dense),
                mib(d.experts),
                mib(d.kv),
                mib(d.compute),
                mib(d.staging),
                mib(d.cache + d.cache_overhead),
                mib(d.margin)
            );
        }
        for d in &self.devices {
            if let Some((u, g)) = d.alias {
                let _ = writeln!(
                    s,
                    "fit: {}: compute alias: prompt ubatches of {u} tokens compute in the cache's {:.2} MiB (their graph: {:.2} MiB); compute memory apart {:.2} MiB (the cached ubatches')",
                    d.name,
                    mib(d.cache),
                    mib(g),
                    mib(d.compute)
                );
            }
        }
        let _ = writeln!(
            s,
            "fit: MiB; layers a-b (+o: output head); host-x: layers whose experts stay in host memory ({:.2} MiB of experts in host memory)",
            mib(self.host_expert_bytes)
        );
        let cache: Vec<String> = self.cache_mib().iter().map(|c| c.to_string()).collect();
        let mut flags = String::from("fit: as flags:");
        if self.devices.len() > 1 {
            let ts: Vec<String> = self.tensor_split().iter().map(|v| v.to_string()).collect();
            let _ = write!(flags, " -ts {}", ts.join(","));
        }
        let _ = write!(flags, " --moe-cache-mib {}", cache.join(","));
        match (self.n_cpu_moe(), self.override_text()) {
            (_, None) => {}
            (Some(n), _) => {
                let _ = write!(flags, " --n-cpu-moe {n}");
            }
            (None, Some(ot)) => {
                let _ = write!(flags, " -ot '{ot}'");
            }
        }
        s.push_str(&flags);
        s.push('\n');
        s
    }
}

/// Where a tensor belongs: its layer (`n_layer` for the output head and
/// its norm), or `None` (the token embedding: host memory).
fn tensor_layer(name: &str, n_layer: usize) -> Option<usize> {
    if let Some(rest) = name.strip_prefix("blk.") {
        rest.split('.').next().and_then(|n| n.parse().ok())
    } else if name.starts_with("output") {
        Some(n_layer)
    } else {
        None
    }
}

/// An upper bound of the compute memory the scheduler allocates on a
/// device for the largest graph: a ubatch of `n_tokens` attending over
/// `n_kv` cells. The live set of one layer is bounded by the sum of the
/// layer's intermediates (hidden states, Q/K/V, the attention scores and
/// their softmax, the mask, the router's outputs, the experts' and the
/// dense FFN's intermediates), plus a quarter for the allocator's reuse
/// holes and the residual stream carried between layers; then the output
/// head's logits when the device holds it, and `host_copies` (destinations
/// of expert tensors copied in from host memory).
pub fn compute_bytes(
    s: &FitShape,
    n_tokens: usize,
    n_kv: usize,
    output: bool,
    host_copies: u64,
) -> u64 {
    let n = n_tokens as u64;
    let f = 4u64; // F32 activations
    let hidden = 8 * n * s.n_embd as u64 * f;
    let qkv = n
        * (s.n_head * s.head_k + s.n_head_kv * (s.head_k + s.head_v) + s.n_head * s.head_v) as u64
        * f;
    let scores = 2 * n * n_kv as u64 * s.n_head as u64 * f;
    let kv_views = 2 * n_kv as u64 * (s.n_head_kv * (s.head_k + s.head_v)) as u64 * f;
    let mask = n * n_kv as u64 * f;
    let router = 4 * n * s.n_expert as u64 * f;
    let experts = n * s.n_expert_used as u64 * (3 * s.n_ff_exp + 2 * s.n_embd) as u64 * f;
    let dense = 3 * n * s.n_ff as u64 * f;
    let layer = hidden + qkv + scores + kv_views + mask + router + experts + dense;
    let residual = 2 * n * s.n_embd as u64 * f;
    let head = if output {
        n * (s.n_vocab + 2 * s.n_embd) as u64 * f
    } else {
        0
    };
    layer + layer / 4 + residual + head + host_copies + (256 << 10)
}

/// Plan the model's memory over `devices` (see the module doc).
pub fn plan(model: &FitModel, devices: &[FitDevice], p: &FitParams) -> Result<FitPlan> {
    if devices.is_empty() {
        return Err(LlamaError::Invalid(
            "--fit: no device to plan for (give --device)".into(),
        ));
    }
    if p.n_ctx == 0 || p.n_ubatch == 0 {
        return Err(LlamaError::Invalid(
            "--fit: -c and -ub must be at least 1".into(),
        ));
    }
    let nl = model.n_layer;
    let expert_re = Regex::new(EXPERT_PATTERN).expect("built-in expert pattern compiles");
    // per layer (0..=nl, nl = output): dense bytes on the device, expert
    // bytes that may move, expert bytes pinned to host, pinned to the device
    let mut dense = vec![0u64; nl + 1];
    let mut free_experts = vec![0u64; nl + 1];
    let mut host_pinned = vec![0u64; nl + 1];
    let mut largest_expert = vec![0u64; nl + 1];
    for t in &model.tensors {
        let Some(il) = tensor_layer(&t.name, nl).filter(|&l| l <= nl) else {
            continue;
        };
        let bytes = t.bytes.next_multiple_of(WEIGHT_ALIGN);
        let given = p.overrides.iter().find(|r| r.pattern.is_match(&t.name));
        let is_expert = expert_re.is_match(&t.name);
        let to_host = match given {
            Some(r) => r.backend.eq_ignore_ascii_case("CPU"),
            None => is_expert && (p.cpu_moe || il < p.n_cpu_moe),
        };
        match (is_expert, to_host) {
            (true, true) => {
                host_pinned[il] += t.bytes;
                largest_expert[il] = largest_expert[il].max(t.bytes);
            }
            (false, true) => {}
            (true, false) if given.is_none() => {
                free_experts[il] += bytes;
                largest_expert[il] = largest_expert[il].max(t.bytes);
            }
            _ => dense[il] += bytes,
        }
    }
    let kv: Vec<u64> = (0..=nl)
        .map(|il| model.kv_cell_bytes.get(il).copied().unwrap_or(0) * p.n_ctx as u64)
        .collect();
    let n_tok = p.n_ubatch.min(p.n_ctx).max(1);
    // the attention of the last ubatch covers every cell
    let n_kv = p.n_ctx;
    let has_experts = (0..=nl).any(|l| free_experts[l] + host_pinned[l] > 0);
    // what a device computing with host experts reserves besides: the copy
    // destinations of one layer's expert tensors when a ubatch that large
    // runs on the device (each expert tensor heads its own split, and a
    // split's copies are issued while the previous split computes: at most
    // the gate, up and down copies of one layer are live at once), and the
    // staging slots
    let max_expert_tensor = largest_expert.iter().copied().max().unwrap_or(0);
    let max_layer_experts = (0..=nl)
        .map(|l| free_experts[l] + host_pinned[l])
        .max()
        .unwrap_or(0);
    let copies = if has_experts && n_tok >= p.offload_min_batch {
        max_layer_experts
    } else {
        0
    };
    let slots = match p.prefetch_slots {
        0 => 0,
        n if n < 0 => crate::moe_cache::prefetch::AUTO_SLOTS as u64,
        n => n as u64,
    };
    let staging = slots * (max_expert_tensor + 4096);
    let cache_overhead = if p.cache && has_experts {
        (nl as u64)
            * (model.shape.n_expert_used.max(1) as u64
                * p.cache_max_batch.min(p.n_ubatch).max(1) as u64
                * 4)
            .next_multiple_of(CACHE_ALIGN)
            + 4 * CACHE_ALIGN
    } else {
        0
    };
    let nd = devices.len();
    let margins: Vec<u64> = devices
        .iter()
        .map(|d| p.margin.unwrap_or(DEFAULT_MARGIN.min(d.free / MARGIN_DIV)))
        .collect();
    let compute_full =
        |output: bool| -> u64 { compute_bytes(&model.shape, n_tok, n_kv, output, copies) };
    // room for layers once the fixed costs are reserved (the worst case:
    // host experts on every device)
    // a split given (-ts, -sm none) is kept, as the placement applies it
    let given = match (&p.tensor_split, p.split_none) {
        (None, None) => None,
        (ts, main) => Some(given_split(ts.as_deref().unwrap_or(&[]), main, nd, nl)?),
    };
    let out_dev = given.as_ref().map_or(nd - 1, |g| g.1);
    let fixed: Vec<u64> = (0..nd)
        .map(|i| {
            margins[i]
                + compute_full(i == out_dev)
                + if has_experts {
                    staging + cache_overhead
                } else {
                    0
                }
        })
        .collect();
    let room: Vec<u64> = devices
        .iter()
        .zip(&fixed)
        .map(|(d, &f)| d.free.saturating_sub(f))
        .collect();
    let cost: Vec<u64> = (0..=nl).map(|l| dense[l] + kv[l]).collect();
    // first the whole model on the devices, no expert in host memory: the
    // smaller compute memory, no staging, no cache
    if !host_pinned.iter().any(|&b| b > 0) {
        let lean_room: Vec<u64> = devices
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let c = compute_bytes(&model.shape, n_tok, n_kv, i == out_dev, 0);
                d.free.saturating_sub(margins[i] + c)
            })
            .collect();
        let whole: Vec<u64> = (0..=nl).map(|l| cost[l] + free_experts[l]).collect();
        let counts = match &given {
            Some((c, _)) => c.clone(),
            None => {
                let c = split_by_room(&whole[..nl], whole[nl], &lean_room);
                if fits_rooms(&c, &whole, &lean_room) {
                    c
                } else {
                    fill_in_order(&whole, &lean_room).unwrap_or(c)
                }
            }
        };
        let mut first = 0;
        let mut plans = Vec::with_capacity(nd);
        for (i, &c) in counts.iter().enumerate() {
            let r = first..first + c;
            first += c;
            let last = i + 1 == nd;
            let sum =
                |v: &[u64]| r.clone().map(|l| v[l]).sum::<u64>() + if last { v[nl] } else { 0 };
            plans.push(DevicePlan {
                name: devices[i].name.clone(),
                free: devices[i].free,
                margin: margins[i],
                first_layer: r.start,
                n_layers: c,
                output: last,
                dense: sum(&dense),
                experts: sum(&free_experts),
                kv: sum(&kv),
                compute: compute_bytes(&model.shape, n_tok, n_kv, last, 0),
                staging: 0,
                cache: 0,
                cache_overhead: 0,
                host_expert_layers: Vec::new(),
                alias: None,
            });
        }
        if plans.iter().all(|d| d.total() + d.margin <= d.free) {
            return Ok(FitPlan {
                n_layer: nl,
                devices: plans,
                host_expert_layers: Vec::new(),
                host_expert_bytes: 0,
            });
        }
    }
    // then the dense part split by what is left once the worst case
    // (host experts on every device) is reserved
    let counts = match &given {
        Some((c, _)) => c.clone(),
        None => {
            let c = split_by_room(&cost[..nl], cost[nl], &room);
            if fits_rooms(&c, &cost, &room) {
                c
            } else {
                // a layer boundary overfilled a device: fill them in order
                fill_in_order(&cost, &room).unwrap_or(c)
            }
        }
    };
    // check the dense part fits on each device
    let mut first = 0;
    let mut ranges = Vec::with_capacity(nd);
    for &c in &counts {
        ranges.push(first..first + c);
        first += c;
    }
    let mut missing = Vec::new();
    for (i, r) in ranges.iter().enumerate() {
        let mut need: u64 = r.clone().map(|l| cost[l]).sum();
        if i == out_dev {
            need += cost[nl];
        }
        if need + fixed[i] > devices[i].free {
            missing.push((i, need + fixed[i] - devices[i].free));
        }
    }
    if !missing.is_empty() {
        let parts: Vec<String> = missing
            .iter()
            .map(|&(i, m)| format!("{:.2} MiB on {}", mib(m), devices[i].name))
            .collect();
        let detail: Vec<String> = missing
            .iter()
            .map(|&(i, _)| {
                let r = &ranges[i];
                format!(
                    "{}: {:.2} MiB free, layers {}..{} need {:.2} MiB of dense weights and KV cache (-c {}), {:.2} MiB of compute memory (-ub {}), {:.2} MiB of margin",
                    devices[i].name,
                    mib(devices[i].free),
                    r.start,
                    r.end,
                    mib(r.clone().map(|l| cost[l]).sum::<u64>() + if i == out_dev { cost[nl] } else { 0 }),
                    p.n_ctx,
                    mib(compute_full(i == out_dev)),
                    n_tok,
                    mib(margins[i])
                )
            })
            .collect();
        return Err(LlamaError::Invalid(format!(
            "--fit: the model does not fit: {} missing ({}); lower -c or -ub, keep experts in host memory (--cpu-moe), or add a device",
            parts.join(", "),
            detail.join("; ")
        )));
    }
    // experts from each device's last layer down, while they fit
    let mut plans = Vec::with_capacity(nd);
    let mut host_layers = Vec::new();
    let mut host_expert_bytes = 0u64;
    for (i, r) in ranges.iter().enumerate() {
        let last = i == out_dev;
        let dense_d: u64 =
            r.clone().map(|l| dense[l]).sum::<u64>() + if last { dense[nl] } else { 0 };
        let kv_d: u64 = r.clone().map(|l| kv[l]).sum();
        let pinned_host = r.clone().any(|l| host_pinned[l] > 0);
        let all_experts: u64 = r.clone().map(|l| free_experts[l]).sum();
        // everything on the device, with no host experts: the smaller
        // compute memory, no staging, no cache
        let lean = compute_bytes(&model.shape, n_tok, n_kv, last, 0);
        let avail = devices[i].free.saturating_sub(margins[i]);
        let mut dp = DevicePlan {
            name: devices[i].name.clone(),
            free: devices[i].free,
            margin: margins[i],
            first_layer: r.start,
            n_layers: r.len(),
            output: last,
            dense: dense_d,
            experts: 0,
            kv: kv_d,
            compute: lean,
            staging: 0,
            cache: 0,
            cache_overhead: 0,
            host_expert_layers: Vec::new(),
            alias: None,
        };
        if !pinned_host && dense_d + kv_d + all_experts + lean <= avail {
            dp.experts = all_experts;
            plans.push(dp);
            continue;
        }
        dp.compute = compute_full(last);
        dp.staging = staging;
        dp.cache_overhead = if p.cache { cache_overhead } else { 0 };
        let mut spare =
            avail.saturating_sub(dense_d + kv_d + dp.compute + dp.staging + dp.cache_overhead);
        let mut stopped = false;
        for l in r.clone().rev() {
            if free_experts[l] == 0 {
                if host_pinned[l] > 0 {
                    dp.host_expert_layers.push(l);
                }
                continue;
            }
            if !stopped && free_experts[l] <= spare {
                spare -= free_experts[l];
                dp.experts += free_experts[l];
            } else {
                stopped = true;
                dp.host_expert_layers.push(l);
            }
        }
        dp.host_expert_layers.sort_unstable();
        if p.cache && !dp.host_expert_layers.is_empty() {
            // rounded down to 1/64 MiB, so that its MiB value is exact
            dp.cache = spare & !(CACHE_QUANTUM - 1);
            if p.cache_alias && n_tok > p.cache_max_batch {
                // the compute alias: only the cached ubatches' graph is
                // reserved apart, the cache gets the rest of the reserve
                // and lends it to the prompt graphs; the ubatch halves
                // (down to 512) until its graph fits in the cache
                let small = compute_bytes(
                    &model.shape,
                    p.cache_max_batch.min(n_tok).max(1),
                    n_kv,
                    last,
                    0,
                );
                let grown = (spare + dp.compute.saturating_sub(small)) & !(CACHE_QUANTUM - 1);
                let low = crate::moe_cache::alias::MIN_UBATCH
                    .max(p.cache_max_batch + 1)
                    .min(n_tok);
                let mut u = n_tok;
                loop {
                    let copies_u = if has_experts && u >= p.offload_min_batch {
                        max_layer_experts
                    } else {
                        0
                    };
                    let g = compute_bytes(&model.shape, u, n_kv, last, copies_u);
                    if g <= grown {
                        dp.alias = Some((u, g));
                        dp.compute = small;
                        dp.cache = grown;
                        break;
                    }
                    if u <= low {
                        break;
                    }
                    u = (u / 2).max(low);
                }
            }
        } else {
            dp.cache_overhead = 0;
        }
        plans.push(dp);
    }
    for dp in &plans {
        for &l in &dp.host_expert_layers {
            host_layers.push(l);
            host_expert_bytes += host_pinned[l] + free_experts[l];
        }
    }
    host_layers.sort_unstable();
    host_layers.dedup();
    Ok(FitPlan {
        n_layer: nl,
        devices: plans,
        host_expert_layers: host_layers,
        host_expert_bytes,
    })
}

/// The layer counts of a given split and the device of the output head,
/// by [`Placement::layer_device`] (the rule the load applies): `-ts`
/// proportions, or every layer on `main` (`-sm none`).
fn given_split(
    ts: &[f32],
    main: Option<usize>,
    nd: usize,
    nl: usize,
) -> Result<(Vec<usize>, usize)> {
    let pl = Placement {
        devices: (0..nd).map(|i| format!("DEV{i}")).collect(),
        split_mode: if main.is_some() {
            SplitMode::None
        } else {
            SplitMode::Layer
        },
        tensor_split: ts.to_vec(),
        main_gpu: main.unwrap_or(0),
        ..Placement::default()
    };
    pl.check()
        .map_err(|e| LlamaError::Invalid(format!("--fit: {e}")))?;
    let mut counts = vec![0usize; nd];
    for il in 0..nl {
        counts[pl.layer_device(il, nl).unwrap_or(nd - 1)] += 1;
    }
    Ok((counts, pl.layer_device(nl, nl).unwrap_or(nd - 1)))
}

/// Whether contiguous `counts` (the last device taking the head,
/// `cost[n_layer]`) fit each device's `room`.
fn fits_rooms(counts: &[usize], cost: &[u64], room: &[u64]) -> bool {
    let nl = cost.len() - 1;
    let mut first = 0;
    counts.iter().enumerate().all(|(i, &c)| {
        let mut need: u64 = cost[first..first + c].iter().sum();
        first += c;
        if i + 1 == counts.len() {
            need += cost[nl];
        }
        need <= room[i]
    })
}

/// Contiguous layer counts filling each device in order as far as its
/// `room` holds (the last device also taking the head), when they all fit.
fn fill_in_order(cost: &[u64], room: &[u64]) -> Option<Vec<usize>> {
    let nl = cost.len() - 1;
    let nd = room.len();
    let mut counts = vec![0usize; nd];
    let mut il = 0;
    for (i, &r) in room.iter().enumerate() {
        let mut used = if i + 1 == nd { cost[nl] } else { 0 };
        if i + 1 == nd {
            // the last device takes every layer left
            counts[i] = nl - il;
            used += cost[il..nl].iter().sum::<u64>();
            return (used <= r).then_some(counts);
        }
        while il < nl && used + cost[il] <= r {
            used += cost[il];
            il += 1;
            counts[i] += 1;
        }
    }
    None
}

/// Contiguous layer counts so that each device's share of the layers'
/// cost (`cost`, the last device also taking `tail`, the output head) is
/// in proportion to its `room`; a layer goes to the device whose range of
/// the cumulative room holds the layer's midpoint.
fn split_by_room(cost: &[u64], tail: u64, room: &[u64]) -> Vec<usize> {
    let nd = room.len();
    let nl = cost.len();
    let mut counts = vec![0usize; nd];
    if nd == 1 {
        counts[0] = nl;
        return counts;
    }
    let total_cost: f64 = cost.iter().sum::<u64>() as f64 + tail as f64;
    let total_room: f64 = room.iter().sum::<u64>() as f64;
    let shares: Vec<f64> = if total_room > 0.0 {
        room.iter().map(|&r| r as f64 / total_room).collect()
    } else {
        vec![1.0 / nd as f64; nd]
    };
    // the device bounds on the cumulative cost axis
    let mut bounds = Vec::with_capacity(nd);
    let mut acc = 0.0;
    for s in &shares {
        acc += s * total_cost;
        bounds.push(acc);
    }
    let mut at = 0.0;
    for &c in cost {
        let mid = at + c as f64 / 2.0;
        at += c as f64;
        let d = bounds.iter().position(|&b| mid < b).unwrap_or(nd - 1);
        counts[d] += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// `nl` layers of `dense` MiB of dense weights and `exps` MiB of
    /// experts (three tensors), an output head of `head` MiB.
    fn model(nl: usize, dense: u64, exps: u64, head: u64) -> FitModel {
        let mut tensors = vec![FitTensor {
            name: "token_embd.weight".into(),
            bytes: 10 * MIB,
        }];
        for l in 0..nl {
            tensors.push(FitTensor {
                name: format!("blk.{l}.attn_q.weight"),
                bytes: dense * MIB,
            });
            for r in ["gate", "up", "down"] {
                tensors.push(FitTensor {
                    name: format!("blk.{l}.ffn_{r}_exps.weight"),
                    bytes: exps * MIB / 3,
                });
            }
        }
        tensors.push(FitTensor {
            name: "output.weight".into(),
            bytes: head * MIB,
        });
        FitModel {
            n_layer: nl,
            n_ctx_train: 4096,
            tensors,
            kv_cell_bytes: vec![1024; nl],
            shape: FitShape {
                n_embd: 256,
                n_head: 4,
                n_head_kv: 2,
                head_k: 64,
                head_v: 64,
                n_ff: 0,
                n_ff_exp: 256,
                n_expert: 16,
                n_expert_used: 4,
                n_vocab: 1000,
            },
        }
    }

    fn dev(name: &str, mib: u64) -> FitDevice {
        FitDevice {
            name: name.into(),
            free: mib * MIB,
        }
    }

    fn params() -> FitParams {
        FitParams {
            n_ctx: 256,
            n_ubatch: 64,
            ..FitParams::default()
        }
    }

    #[test]
    fn everything_fits_on_a_large_device() {
        let m = model(4, 10, 30, 5);
        let pl = plan(&m, &[dev("SIM0", 4096)], &params()).unwrap();
        let d = &pl.devices[0];
        assert_eq!(d.n_layers, 4);
        assert!(pl.host_expert_layers.is_empty());
        assert_eq!(d.cache, 0);
        assert!(d.experts >= 120 * MIB - 64);
        assert!(d.total() + d.margin <= d.free);
        assert!(pl.table().contains("SIM0"));
        assert_eq!(pl.n_cpu_moe(), Some(0));
        assert!(pl.override_text().is_none());
    }

    #[test]
    fn experts_of_the_first_layers_stay_on_host_and_leftover_is_cache() {
        let m = model(4, 10, 30, 5);
        // dense 45 MiB + KV; experts 120 MiB do not all fit
        let pl = plan(&m, &[dev("SIM0", 180)], &params()).unwrap();
        let d = &pl.devices[0];
        assert!(!pl.host_expert_layers.is_empty());
        // host layers are a prefix: n_cpu_moe says it
        let n = pl.n_cpu_moe().expect("a prefix");
        assert_eq!(pl.host_expert_layers, (0..n).collect::<Vec<_>>());
        assert!(n < 4, "some experts on the device");
        assert!(d.cache > 0, "the leftover is cache");
        assert!(d.total() + d.margin <= d.free, "{}", pl.table());
        let ot = pl.override_text().unwrap();
        assert!(ot.starts_with(r"blk\.(0"), "{ot}");
        assert!(pl
            .override_rule()
            .unwrap()
            .pattern
            .is_match("blk.0.ffn_up_exps.weight"));
    }

    #[test]
    fn given_placements_are_kept() {
        let m = model(4, 10, 30, 5);
        let p = FitParams {
            cpu_moe: true,
            ..params()
        };
        let pl = plan(&m, &[dev("SIM0", 4096)], &p).unwrap();
        assert_eq!(pl.host_expert_layers, vec![0, 1, 2, 3]);
        assert_eq!(pl.devices[0].experts, 0);
        assert!(pl.devices[0].cache > 0);
        // -ot sending layer 3's experts to the device keeps them there
        let p = FitParams {
            overrides: crate::placement::Placement::parse_overrides(r"blk\.3\.ffn_.*_exps=SIM0")
                .unwrap(),
            n_cpu_moe: 1,
            ..params()
        };
        let pl = plan(&m, &[dev("SIM0", 200)], &p).unwrap();
        assert!(pl.host_expert_layers.contains(&0));
        assert!(!pl.host_expert_layers.contains(&3));
    }

    #[test]
    fn two_devices_split_the_layers_by_room() {
        let m = model(8, 10, 30, 5);
        let pl = plan(&m, &[dev("SIM0", 300), dev("SIM1", 100)], &params()).unwrap();
        let (a, b) = (&pl.devices[0], &pl.devices[1]);
        assert_eq!(a.n_layers + b.n_layers, 8);
        assert!(a.n_layers > b.n_layers, "{}", pl.table());
        assert_eq!(b.first_layer, a.n_layers);
        assert!(b.output && !a.output);
        for d in &pl.devices {
            assert!(d.total() + d.margin <= d.free, "{}", pl.table());
        }
        assert_eq!(
            pl.tensor_split(),
            vec![a.n_layers as f32, b.n_layers as f32 + 1.0]
        );
        assert_same_split(&pl);
        // a given -ts is kept, split as the placement splits it
        let p = FitParams {
            tensor_split: Some(vec![1.0, 1.0]),
            ..params()
        };
        let pl = plan(&m, &[dev("SIM0", 300), dev("SIM1", 300)], &p).unwrap();
        assert_eq!(pl.tensor_split(), vec![5.0, 4.0]);
        assert_same_split(&pl);
        // -sm none: every layer on -mg
        let p = FitParams {
            split_none: Some(1),
            ..params()
        };
        let pl = plan(&m, &[dev("SIM0", 300), dev("SIM1", 600)], &p).unwrap();
        assert_eq!(pl.tensor_split(), vec![0.0, 9.0]);
        assert!(pl.devices[1].output);
    }

    #[test]
    fn with_the_alias_the_cache_gets_the_compute_reserve() {
        let m = model(4, 10, 30, 5);
        let p = FitParams {
            cpu_moe: true,
            n_ctx: 2048,
            n_ubatch: 1024,
            ..params()
        };
        let off = plan(&m, &[dev("SIM0", 600)], &p).unwrap();
        let on = plan(
            &m,
            &[dev("SIM0", 600)],
            &FitParams {
                cache_alias: true,
                ..p.clone()
            },
        )
        .unwrap();
        let (a, b) = (&off.devices[0], &on.devices[0]);
        assert!(a.alias.is_none() && !off.table().contains("compute alias"));
        let (u, g) = b.alias.expect("the alias is planned");
        assert_eq!(u, 1024);
        // the cache holds the worst-case graph it lends, and what the
        // reserve had went to it
        assert!(g <= b.cache, "{}", on.table());
        assert!(b.compute < a.compute);
        assert!(b.cache >= a.cache + (a.compute - b.compute) - CACHE_QUANTUM);
        assert_eq!(
            b.total(),
            a.total() - a.cache - a.compute + b.cache + b.compute
        );
        assert!(b.total() + b.margin <= b.free, "{}", on.table());
        let t = on.table();
        assert!(
            t.contains("fit: SIM0: compute alias: prompt ubatches of 1024 tokens"),
            "{t}"
        );
        // a device with room for the -ub graph and next to no cache: the
        // cache (what is left and the reserve less the cached ubatches'
        // graph) is smaller than the 1024-token graph, the ubatch halves
        let small = plan(
            &m,
            &[dev("SIM0", 242)],
            &FitParams {
                cache_alias: true,
                ..p.clone()
            },
        )
        .unwrap();
        let d = &small.devices[0];
        let (u, g) = d.alias.unwrap_or_else(|| panic!("{}", small.table()));
        assert_eq!(u, 512, "{}", small.table());
        assert!(g <= d.cache, "{}", small.table());
        assert!(d.total() + d.margin <= d.free, "{}", small.table());
        // ubatches the cache serves need no alias
        let served = plan(
            &m,
            &[dev("SIM0", 600)],
            &FitParams {
                cache_alias: true,
                n_ubatch: 32,
                ..p
            },
        )
        .unwrap();
        assert!(served.devices[0].alias.is_none());
    }

    #[test]
    fn a_split_that_overfills_a_device_is_filled_in_order() {
        // room for 2 layers on the first device, 1 and the head on the
        // second: the proportional split gives the first 3
        let cost = [10, 10, 10, 5];
        assert!(!fits_rooms(&[3, 0], &cost, &[25, 20]));
        assert_eq!(fill_in_order(&cost, &[25, 20]), Some(vec![2, 1]));
        assert!(fits_rooms(&[2, 1], &cost, &[25, 20]));
        assert_eq!(fill_in_order(&cost, &[25, 10]), None);
    }

    /// The plan's `-ts`, applied by the placement, puts every layer and the
    /// head where the plan counted them.
    fn assert_same_split(pl: &FitPlan) {
        let placement = Placement {
            devices: pl.devices.iter().map(|d| d.name.clone()).collect(),
            tensor_split: pl.tensor_split(),
            ..Placement::default()
        };
        for (i, d) in pl.devices.iter().enumerate() {
            for il in d.first_layer..d.first_layer + d.n_layers {
                assert_eq!(
                    placement.layer_device(il, pl.n_layer),
                    Some(i),
                    "layer {il}"
                );
            }
            if d.output {
                assert_eq!(placement.layer_device(pl.n_layer, pl.n_layer), Some(i));
            }
        }
    }

    #[test]
    fn too_small_a_device_names_the_shortfall() {
        let m = model(4, 10, 30, 5);
        let e = plan(&m, &[dev("SIM0", 40)], &params())
            .unwrap_err()
            .to_string();
        assert!(e.contains("MiB on SIM0"), "{e}");
        assert!(e.contains("missing"), "{e}");
        // the amount is what is missing: with it (and a fixed margin) the
        // dense part fits, with a MiB less it does not
        let p = FitParams {
            margin: Some(MIB),
            ..params()
        };
        let e = plan(&m, &[dev("SIM0", 40)], &p).unwrap_err().to_string();
        let x: f64 = e
            .split(" MiB on SIM0")
            .next()
            .and_then(|t| t.rsplit(' ').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no amount in {e}"));
        let need = 40 * MIB + (x * MIB as f64).ceil() as u64;
        let fits = |free: u64| {
            plan(
                &m,
                &[FitDevice {
                    name: "SIM0".into(),
                    free,
                }],
                &FitParams {
                    cache: false,
                    ..p.clone()
                },
            )
        };
        assert!(fits(need + (MIB / 100)).is_ok(), "{e}");
        assert!(fits(need - MIB).is_err(), "{e}");
        let e = plan(
            &m,
            &[dev("SIM0", 400), dev("SIM1", 4)],
            &FitParams {
                tensor_split: Some(vec![1.0, 1.0]),
                ..params()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("on SIM1") && !e.contains("on SIM0"), "{e}");
        assert!(plan(&m, &[], &params()).is_err());
    }

    #[test]
    fn margin_is_stated_and_bounded() {
        let m = model(1, 1, 3, 1);
        let pl = plan(&m, &[dev("SIM0", 64)], &params()).unwrap();
        assert_eq!(pl.devices[0].margin, 4 * MIB);
        let pl = plan(&m, &[dev("SIM0", 64 * 1024)], &params()).unwrap();
        assert_eq!(pl.devices[0].margin, DEFAULT_MARGIN);
        let p = FitParams {
            margin: Some(2 * MIB),
            ..params()
        };
        assert_eq!(
            plan(&m, &[dev("SIM0", 64)], &p).unwrap().devices[0].margin,
            2 * MIB
        );
    }
}
