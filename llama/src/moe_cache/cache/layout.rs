//! Where the cache's memory is: groups of layers with equal expert shapes,
//! their slot counts for a budget, and the buffers (banks on the device,
//! slot maps in host weights memory, the lookups' results on the device).
//!
//! With several devices every device has a cache of its own: the layers a
//! device holds ([`cache_device`]) form that device's groups, whose banks,
//! lookup results and budget are that device's; a group never spans two
//! devices, so a layer's experts are served from the memory of the device
//! that computes the layer.

use std::sync::Arc;

use ggml_core::{Backend, Buffer, BufferUsage, GgmlType, Tensor, TensorData};

use super::stats::GroupInfo;
use crate::error::{LlamaError, Result};
use crate::model::{Model, WeightId};
use crate::placement::Target;

/// Alignment of every bank and map inside its buffer.
pub const ALIGN: usize = 256;

/// The three expert roles of a layer, in this order.
pub const ROLES: [&str; 3] = ["gate", "up", "down"];

/// One expert tensor role of a group: type, shape, bytes per expert.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RoleShape {
    /// Element type.
    pub ty: GgmlType,
    /// `ne[0]`, `ne[1]` of the expert tensor.
    pub ne01: [i64; 2],
    /// Bytes per expert (`nb[2]`).
    pub expert_bytes: usize,
}

/// Layers whose experts can share banks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupShape {
    /// Layers, ascending.
    pub layers: Vec<u32>,
    /// Gate, up and down.
    pub roles: [RoleShape; 3],
    /// Experts per layer.
    pub n_expert: u32,
    /// Experts the router picks per token.
    pub n_used: u32,
}

impl GroupShape {
    /// Bytes of one slot over the three roles.
    pub fn slot_bytes(&self) -> u64 {
        self.roles.iter().map(|r| r.expert_bytes as u64).sum()
    }

    /// Bytes of every expert of every layer of the group.
    pub fn full_bytes(&self) -> u64 {
        self.slot_bytes() * self.n_expert as u64 * self.layers.len() as u64
    }

    /// Device bytes of the banks for `n_slots` slots (one pad slot per
    /// bank, each bank aligned).
    pub fn bank_bytes(&self, n_slots: u32) -> u64 {
        self.roles
            .iter()
            .map(|r| ((n_slots as usize + 1) * r.expert_bytes).next_multiple_of(ALIGN) as u64)
            .sum()
    }

    /// Most slots whose banks fit in `bytes`, at most one per expert of
    /// the group.
    pub fn slots_for(&self, bytes: u64) -> u32 {
        let max = self.n_expert as u64 * self.layers.len() as u64;
        let mut n = (bytes / self.slot_bytes().max(1)).min(max) as u32;
        while n > 0 && self.bank_bytes(n) > bytes {
            n -= 1;
        }
        n
    }
}

/// The gate, up and down expert tensors of a MoE layer (`None` for a dense
/// layer).
pub(crate) fn roles_of(model: &Model, il: usize) -> Option<[WeightId; 3]> {
    let m = model.layers[il].moe()?;
    Some([m.gate_exps, m.up_exps, m.down_exps])
}

/// The device (an index into [`Model::devices`]) whose cache serves layer
/// `il`'s host experts: the layer's device, or the main device for a layer
/// in host memory (`-ngl` below the layer count); `None` without devices.
pub fn cache_device(model: &Model, il: usize) -> Option<usize> {
    if model.devices.is_empty() {
        return None;
    }
    let main = model
        .placement
        .main_gpu
        .min(model.devices.len().saturating_sub(1));
    Some(model.layers.get(il).and_then(|l| l.device).unwrap_or(main))
}

/// The groups of a model, device after device ([`model_groups_on`] of
/// each; without devices, every layer's): layers whose three expert
/// tensors are all in host memory, grouped by equal role shapes (in order
/// of first layer).
pub fn model_groups(model: &Model) -> Vec<GroupShape> {
    if model.devices.is_empty() {
        return model_groups_on(model, None);
    }
    (0..model.devices.len())
        .flat_map(|d| model_groups_on(model, Some(d)))
        .collect()
}

/// The groups of the layers device `device` caches ([`cache_device`];
/// `None`: every layer).
pub fn model_groups_on(model: &Model, device: Option<usize>) -> Vec<GroupShape> {
    let hp = &model.hparams;
    let mut layers = Vec::new();
    for il in 0..model.layers.len() {
        if device.is_some() && cache_device(model, il) != device {
            continue;
        }
        let Some(roles) = roles_of(model, il) else {
            continue;
        };
        let ws = roles.map(|w| model.weight(w));
        if !ws.iter().all(|w| w.target == Target::Host && w.ne[3] == 1) {
            continue;
        }
        let roles = ws.map(|w| {
            let t = Tensor::new(w.ty, w.ne);
            RoleShape {
                ty: w.ty,
                ne01: [w.ne[0], w.ne[1]],
                expert_bytes: t.nb[2],
            }
        });
        let n_expert = ws[0].ne[2] as u32;
        if ws.iter().any(|w| w.ne[2] as u32 != n_expert) {
            continue;
        }
        layers.push((il as u32, roles, n_expert));
    }
    group_shapes(layers.into_iter(), hp.n_expert_used as u32)
}

/// Group `(layer, roles, n_expert)` by equal roles and expert counts, in
/// order of first layer (layers of fewer than 2 experts are not cached):
/// the rule [`model_groups`] and a routing trace's replay share.
pub fn group_shapes(
    layers: impl Iterator<Item = (u32, [RoleShape; 3], u32)>,
    n_used: u32,
) -> Vec<GroupShape> {
    let mut groups: Vec<GroupShape> = Vec::new();
    for (il, roles, n_expert) in layers {
        if n_expert < 2 {
            continue;
        }
        match groups
            .iter_mut()
            .find(|g| g.roles == roles && g.n_expert == n_expert)
        {
            Some(g) => g.layers.push(il),
            None => groups.push(GroupShape {
                layers: vec![il],
                roles,
                n_expert,
                n_used,
            }),
        }
    }
    groups
}

/// Slots per group for a budget of `budget` bytes: each group gets a share
/// in proportion to its experts' bytes.
pub fn split_budget(groups: &[GroupShape], budget: u64) -> Vec<u32> {
    let total: u128 = groups.iter().map(|g| g.full_bytes() as u128).sum();
    let total_all = bytes_for_all(groups);
    groups
        .iter()
        .map(|g| {
            let share = (budget as u128 * g.full_bytes() as u128)
                .checked_div(total)
                .map_or(0, |v| v as u64);
            // a budget that holds everything gives every group everything
            let all = g.bank_bytes(g.n_expert * g.layers.len() as u32);
            g.slots_for(if budget >= total_all { all } else { share })
        })
        .collect()
}

/// Device bytes every group needs to hold all its experts.
pub fn bytes_for_all(groups: &[GroupShape]) -> u64 {
    groups
        .iter()
        .map(|g| g.bank_bytes(g.n_expert * g.layers.len() as u32))
        .sum()
}

/// A cached layer, as the graph sees it.
#[derive(Clone, Debug)]
pub struct LayerCache {
    /// Layer index.
    pub layer: u32,
    /// Its group.
    pub group: usize,
    /// Banks (gate, up, down): memory, type, shape `[ne0, ne1, n_slots, 1]`.
    pub banks: [(TensorData, GgmlType, [i64; 4]); 3],
    /// The host weights' memory of the layer's expert tensors (gate, up, down).
    pub host: [TensorData; 3],
    /// Bytes per expert (gate, up, down).
    pub expert_bytes: [usize; 3],
    /// The slot map: I32 `[1, n_expert]` in host weights memory.
    pub map: TensorData,
    /// Device memory for the lookup's result (I32, `n_used * max_batch`).
    pub slots: TensorData,
    /// Experts per layer.
    pub n_expert: u32,
    /// Largest ubatch the layer's cache serves: `max_batch`, or fewer so
    /// that one ubatch's experts always fit (`n_slots / n_used` tokens).
    pub max_tokens: usize,
}

/// Every buffer of the cache and the per-layer view of it.
pub struct CacheLayout {
    /// Per model layer: its cache, when cached.
    pub layers: Vec<Option<LayerCache>>,
    /// Groups as configured.
    pub groups: Vec<GroupInfo>,
    /// The shapes of the groups.
    pub shapes: Vec<GroupShape>,
    /// The slot maps' host buffer.
    pub map_buffer: Arc<dyn Buffer>,
    /// Largest ubatch that uses the cache.
    pub max_batch: usize,
    /// The device of each group (an index into [`Model::devices`]).
    pub group_device: Vec<usize>,
    /// Each device's budget in bytes (index as [`Model::devices`]).
    pub device_budget: Vec<u64>,
    pub(crate) _banks: Vec<Arc<dyn Buffer>>,
    pub(crate) _slots: Vec<Arc<dyn Buffer>>,
}

fn oom(what: &str, budget: u64, e: ggml_core::BackendError) -> LlamaError {
    LlamaError::Invalid(format!(
        "--moe-cache-mib: the expert cache ({what}, budget {:.2} MiB) does not fit: {e}",
        budget as f64 / 1048576.0
    ))
}

impl CacheLayout {
    /// Lay out a cache on each of `model`'s devices, device `d` with a
    /// budget of `budgets[d]` bytes for its groups ([`model_groups_on`]),
    /// slot maps in `host` memory; lookups of up to `max_batch` tokens.
    pub fn new(
        model: &Model,
        budgets: &[u64],
        host: &Arc<dyn Backend>,
        max_batch: usize,
    ) -> Result<CacheLayout> {
        if budgets.len() != model.devices.len() || budgets.is_empty() {
            return Err(LlamaError::Invalid(format!(
                "--moe-cache-mib: {} budgets for {} devices",
                budgets.len(),
                model.devices.len()
            )));
        }
        let mut shapes = Vec::new();
        let mut slots = Vec::new();
        let mut group_device = Vec::new();
        for (d, &budget) in budgets.iter().enumerate() {
            let sh = model_groups_on(model, Some(d));
            slots.extend(split_budget(&sh, budget));
            group_device.extend(std::iter::repeat_n(d, sh.len()));
            shapes.extend(sh);
        }
        let n_layer = model.layers.len();
        let mut layers: Vec<Option<LayerCache>> = vec![None; n_layer];
        let mut groups = Vec::new();
        let mut banks = Vec::new();
        let n_expert = model.hparams.n_expert;
        let map_stride = (n_expert * 4).next_multiple_of(ALIGN);
        let map_buffer = host
            .alloc_buffer(map_stride * n_layer.max(1), BufferUsage::Weights)
            .map_err(|e| oom("slot maps", budgets.iter().sum(), e))?;
        let minus_one: Vec<u8> = (0..n_expert).flat_map(|_| (-1i32).to_le_bytes()).collect();
        let n_used = model.hparams.n_expert_used.max(1);
        let slot_stride = (n_used * max_batch.max(1) * 4).next_multiple_of(ALIGN);
        let mut cached_layers = Vec::new();
        // one buffer per device holds the banks of all its groups, one
        // group after another (so that the compute alias can lend them as
        // one block)
        let bank_bytes_of = |gi: usize| {
            let n = slots[gi];
            if n < shapes[gi].n_used || n == 0 {
                0
            } else {
                shapes[gi].bank_bytes(n)
            }
        };
        let mut device_bufs: Vec<Option<Arc<dyn Buffer>>> = vec![None; model.devices.len()];
        let mut device_off = vec![0usize; model.devices.len()];
        for (d, dev) in model.devices.iter().enumerate() {
            let total: u64 = (0..shapes.len())
                .filter(|&gi| group_device[gi] == d)
                .map(bank_bytes_of)
                .sum();
            if total == 0 {
                continue;
            }
            let n_slots: u32 = (0..shapes.len())
                .filter(|&gi| group_device[gi] == d && bank_bytes_of(gi) > 0)
                .map(|gi| slots[gi])
                .sum();
            let buf = dev
                .alloc_buffer(total as usize, BufferUsage::Weights)
                .map_err(|e| {
                    oom(
                        &format!("banks of {n_slots} slots on {}", dev.name()),
                        budgets[d],
                        e,
                    )
                })?;
            banks.push(Arc::clone(&buf));
            device_bufs[d] = Some(buf);
        }
        for (gi, (g, &n_slots)) in shapes.iter().zip(&slots).enumerate() {
            let fallback = n_slots < g.n_used || n_slots == 0;
            let bank_bytes = if fallback { 0 } else { g.bank_bytes(n_slots) };
            groups.push(GroupInfo {
                layers: g.layers.clone(),
                n_slots: if fallback { 0 } else { n_slots },
                n_expert: g.n_expert,
                n_used: g.n_used,
                slot_bytes: g.slot_bytes(),
                bank_bytes,
                fallback,
            });
            if fallback {
                continue;
            }
            let d = group_device[gi];
            let Some(buf) = device_bufs[d].clone() else {
                continue;
            };
            let mut off = device_off[d];
            device_off[d] += bank_bytes as usize;
            let mut bank = Vec::new();
            for r in &g.roles {
                bank.push((
                    TensorData {
                        buffer: Arc::clone(&buf),
                        offset: off,
                    },
                    r.ty,
                    [r.ne01[0], r.ne01[1], n_slots as i64, 1],
                ));
                off += ((n_slots as usize + 1) * r.expert_bytes).next_multiple_of(ALIGN);
            }
            for &l in &g.layers {
                cached_layers.push((
                    l,
                    gi,
                    [bank[0].clone(), bank[1].clone(), bank[2].clone()],
                    max_batch.min((n_slots / g.n_used.max(1)) as usize),
                ));
            }
        }
        // each device's lookup results, in its own memory
        let mut slots_bufs: Vec<Option<Arc<dyn Buffer>>> = vec![None; model.devices.len()];
        for &(_, gi, _, _) in &cached_layers {
            let d = group_device[gi];
            if slots_bufs[d].is_none() {
                slots_bufs[d] = Some(
                    model.devices[d]
                        .alloc_buffer(slot_stride * n_layer, BufferUsage::Compute)
                        .map_err(|e| {
                            oom(
                                &format!("lookup results on {}", model.devices[d].name()),
                                budgets[d],
                                e,
                            )
                        })?,
                );
            }
        }
        for (l, gi, bank, max_tokens) in cached_layers {
            let li = l as usize;
            map_buffer.write(li * map_stride, &minus_one)?;
            let Some(roles) = roles_of(model, li) else {
                continue;
            };
            let ws = roles.map(|w| model.weight(w));
            let Some(sb) = &slots_bufs[group_device[gi]] else {
                continue;
            };
            layers[li] = Some(LayerCache {
                layer: l,
                group: gi,
                banks: bank,
                host: ws.map(|w| w.data.clone()),
                expert_bytes: shapes[gi].roles.map(|r| r.expert_bytes),
                map: TensorData {
                    buffer: Arc::clone(&map_buffer),
                    offset: li * map_stride,
                },
                slots: TensorData {
                    buffer: Arc::clone(sb),
                    offset: li * slot_stride,
                },
                n_expert: n_expert as u32,
                max_tokens,
            });
        }
        Ok(CacheLayout {
            layers,
            groups,
            shapes,
            map_buffer,
            max_batch,
            group_device,
            device_budget: budgets.to_vec(),
            _banks: banks,
            _slots: slots_bufs.into_iter().flatten().collect(),
        })
    }

    /// The cached layer `il`, for a ubatch of `n_tokens` tokens (none when
    /// the ubatch is larger than the layer serves: see
    /// [`LayerCache::max_tokens`]).
    pub fn layer_for(&self, il: usize, n_tokens: usize) -> Option<&LayerCache> {
        self.layers
            .get(il)?
            .as_ref()
            .filter(|l| n_tokens <= l.max_tokens)
    }

    /// The buffer of group `g`'s banks (`None` for a group that falls
    /// back): one per device, holding the banks of all the device's groups
    /// one after another.
    pub fn group_buffer(&self, g: usize) -> Option<&Arc<dyn Buffer>> {
        self.layers
            .iter()
            .flatten()
            .find(|l| l.group == g)
            .map(|l| &l.banks[0].0.buffer)
    }

    /// The largest ubatch every cached layer serves: `max_batch`, or fewer
    /// where a group's slots hold fewer ubatches' experts (0 when no layer
    /// is cached). Larger ubatches bypass the cache in some layer.
    pub fn served_tokens(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|l| l.max_tokens)
            .min()
            .map_or(0, |m| m.min(self.max_batch))
    }

    /// Whether any layer is cached.
    pub fn any_cached(&self) -> bool {
        self.layers.iter().any(|l| l.is_some())
    }

    /// Device bytes of the banks.
    pub fn bank_bytes(&self) -> u64 {
        self.groups.iter().map(|g| g.bank_bytes).sum()
    }
}
