//! The host cache's memory: the device cache's [`CacheLayout`] with the CPU
//! as its home. Each group of layers (equal expert shapes) gets banks
//! `[ne0, ne1, n_slots]` per role in CPU memory for its share of the
//! budget (each role's bank placed as most of its layers' tensors lie in
//! the file modulo the `O_DIRECT` alignment, so that reads go straight
//! into the slots), each cached layer an I32 slot map and the lookup's result; the
//! graph is the device cache's (`get_rows(slot_map, ids)`, then
//! `mul_mat_id(bank, x, slots)`). The maps live in memory the CPU's
//! kernels reach only through a copy ([`ggml_core::Buffer::copied_for_cpu`]),
//! so the scheduler cuts the CPU's graph before each lookup and offers the
//! map to the copy hook, which fills the banks from disk first
//! ([`super::hook`]).

use std::any::Any;
use std::sync::Arc;

use ggml_core::gguf::DIO_ALIGN;
use ggml_core::{Backend, BackendError, Buffer, BufferUsage, TensorData};

use super::super::cache::layout::{model_groups_on, roles_of, split_budget, ALIGN};
use super::super::cache::stats::GroupInfo;
use super::super::{CacheLayout, LayerCache};
use crate::error::{LlamaError, Result};
use crate::model::Model;

/// Host memory that the CPU's kernels read only through a copy (the
/// scheduler offers it to the copy hook): the host cache's slot maps.
#[derive(Debug)]
pub struct CopiedForCpu(pub Arc<dyn Buffer>);

impl Buffer for CopiedForCpu {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn is_host(&self) -> bool {
        true
    }
    fn usage(&self) -> BufferUsage {
        BufferUsage::Weights
    }
    fn write(&self, offset: usize, data: &[u8]) -> std::result::Result<(), BackendError> {
        self.0.write(offset, data)
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> std::result::Result<(), BackendError> {
        self.0.read(offset, out)
    }
    fn base_ptr(&self) -> Option<*mut u8> {
        self.0.base_ptr()
    }
    fn copied_for_cpu(&self) -> bool {
        true
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

/// Bytes a host cache needs to hold one layer's top-k in every group of
/// `model` (the least it may have).
pub fn min_bytes(model: &Model) -> u64 {
    let groups = model_groups_on(model, None);
    let total: u128 = groups.iter().map(|g| g.full_bytes() as u128).sum();
    // the budget's share of the largest-need group must hold n_used slots
    groups
        .iter()
        .map(|g| {
            let need = g.bank_bytes(g.n_used) as u128;
            (need * total)
                .div_ceil(g.full_bytes().max(1) as u128)
                .min(u64::MAX as u128) as u64
        })
        .max()
        .unwrap_or(0)
}

/// Touch every page of `buf` (a zero byte written into each), so that
/// the first read into a slot does not pay its page faults (and, under a
/// memory cgroup at its limit, the reclaim they set off) inside the read.
fn prefault(buf: &dyn Buffer) -> Result<()> {
    for off in (0..buf.size()).step_by(4096) {
        buf.write(off, &[0])?;
    }
    Ok(())
}

/// Per role, where in a [`DIO_ALIGN`] block the bank of `layers` starts:
/// where most of those layers' tensors of that role start in the file. A
/// slot then lies as its expert does in the file (when the experts' size is
/// a multiple of the alignment), and the disk reader reads it straight in
/// rather than through a bounce buffer ([`super::disk`]).
fn bank_residues(model: &Model, layers: &[u32]) -> [usize; 3] {
    let mut out = [0usize; 3];
    for (r, slot) in out.iter_mut().enumerate() {
        let mut seen: Vec<(usize, usize)> = Vec::new(); // (residue, count)
        for &l in layers {
            let Some(roles) = roles_of(model, l as usize) else {
                continue;
            };
            let res = model.weight(roles[r]).data.offset % DIO_ALIGN;
            match seen.iter_mut().find(|(x, _)| *x == res) {
                Some((_, n)) => *n += 1,
                None => seen.push((res, 1)),
            }
        }
        // the most common residue; the first seen among equals
        let mut best = (0usize, 0usize);
        for &(res, n) in &seen {
            if n > best.1 {
                best = (res, n);
            }
        }
        *slot = best.0;
    }
    out
}

/// Lay out a host cache of `budget` bytes for `model`'s expert layers on
/// the CPU `cpu`, serving ubatches of up to `n_ubatch` tokens (a layer
/// whose slots cannot hold every expert serves at most `n_slots / n_used`
/// tokens at once; larger ubatches read the file's mapping). `what` names
/// the flag in errors. A budget too small for one layer's top-k is an
/// error.
pub fn host_layout(
    model: &Model,
    budget: u64,
    cpu: &Arc<dyn Backend>,
    n_ubatch: usize,
    what: &str,
) -> Result<CacheLayout> {
    let shapes = model_groups_on(model, None);
    let slots = split_budget(&shapes, budget);
    if let Some((g, &n)) = shapes.iter().zip(&slots).find(|(g, &n)| n < g.n_used) {
        return Err(LlamaError::Invalid(format!(
            "{what}: a host expert cache of {:.2} MiB holds {n} experts of layers {:?}, fewer than the {} the router picks per token: one layer's top-k needs at least {:.2} MiB",
            mib(budget),
            g.layers,
            g.n_used,
            mib(min_bytes(model))
        )));
    }
    let oom = |what2: &str, e: BackendError| {
        LlamaError::Invalid(format!(
            "{what}: the host expert cache ({what2}, budget {:.2} MiB) does not fit: {e}",
            mib(budget)
        ))
    };
    let n_layer = model.layers.len();
    let n_expert = model.hparams.n_expert;
    let n_used = model.hparams.n_expert_used.max(1);
    let n_ubatch = n_ubatch.max(1);
    let map_stride = (n_expert * 4).next_multiple_of(ALIGN);
    let map_inner = cpu
        .alloc_buffer(map_stride * n_layer.max(1), BufferUsage::Weights)
        .map_err(|e| oom("slot maps", e))?;
    let map_buffer: Arc<dyn Buffer> = Arc::new(CopiedForCpu(map_inner));
    let slot_stride = (n_used * n_ubatch * 4).next_multiple_of(ALIGN);
    let slots_buf = cpu
        .alloc_buffer(slot_stride * n_layer.max(1), BufferUsage::Compute)
        .map_err(|e| oom("lookup results", e))?;
    let minus_one: Vec<u8> = (0..n_expert).flat_map(|_| (-1i32).to_le_bytes()).collect();
    let mut layers: Vec<Option<LayerCache>> = vec![None; n_layer];
    let mut groups = Vec::new();
    let mut banks = Vec::new();
    for (gi, (g, &n_slots)) in shapes.iter().zip(&slots).enumerate() {
        let bank_bytes = g.bank_bytes(n_slots);
        groups.push(GroupInfo {
            layers: g.layers.clone(),
            n_slots,
            n_expert: g.n_expert,
            n_used: g.n_used,
            slot_bytes: g.slot_bytes(),
            bank_bytes,
            fallback: false,
        });
        // room to place each role's bank where direct reads can fill its
        // slots without a bounce buffer ([`bank_residues`])
        let buf = cpu
            .alloc_buffer(
                bank_bytes as usize + (g.roles.len() + 1) * DIO_ALIGN,
                BufferUsage::Weights,
            )
            .map_err(|e| oom(&format!("banks of {n_slots} slots"), e))?;
        prefault(buf.as_ref())?;
        let base = buf.base_ptr().map_or(0, |p| p as usize);
        let residues = bank_residues(model, &g.layers);
        let mut off = 0usize;
        let mut bank = Vec::new();
        for (ri, r) in g.roles.iter().enumerate() {
            off += (residues[ri] + DIO_ALIGN - (base + off) % DIO_ALIGN) % DIO_ALIGN;
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
        banks.push(buf);
        let max_tokens = if n_slots >= g.n_expert {
            n_ubatch
        } else {
            n_ubatch.min((n_slots / g.n_used.max(1)) as usize)
        };
        for &l in &g.layers {
            let li = l as usize;
            let Some(roles) = roles_of(model, li) else {
                continue;
            };
            map_buffer.write(li * map_stride, &minus_one)?;
            let ws = roles.map(|w| model.weight(w));
            layers[li] = Some(LayerCache {
                layer: l,
                group: gi,
                banks: [bank[0].clone(), bank[1].clone(), bank[2].clone()],
                host: ws.map(|w| w.data.clone()),
                expert_bytes: g.roles.map(|r| r.expert_bytes),
                map: TensorData {
                    buffer: Arc::clone(&map_buffer),
                    offset: li * map_stride,
                },
                slots: TensorData {
                    buffer: Arc::clone(&slots_buf),
                    offset: li * slot_stride,
                },
                n_expert: n_expert as u32,
                max_tokens,
            });
        }
    }
    Ok(CacheLayout {
        layers,
        groups,
        group_device: vec![0; shapes.len()],
        shapes,
        map_buffer,
        max_batch: n_ubatch,
        device_budget: vec![budget],
        _banks: banks,
        _slots: vec![slots_buf],
    })
}
