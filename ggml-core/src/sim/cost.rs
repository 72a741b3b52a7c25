//! What one node costs on the simulated clock: its FLOPs and the bytes it
//! moves through memory, turned into time by a roofline
//! (`launch + max(flops / FLOP/s, bytes / bandwidth)`).
//!
//! `mul_mat_id` counts only the experts its ids name (read from the ids'
//! memory after the node computed), as a real kernel reads only those, and
//! only the FLOPs of the slots it computes (a skipped slot, id -1, costs
//! nothing: hybrid placement splits a layer's slots between two backends).

use std::collections::BTreeSet;

use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// The work of one node.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NodeWork {
    /// Floating-point operations.
    pub flops: f64,
    /// Bytes read and written.
    pub bytes: f64,
}

/// Roofline time in seconds of `w` on a unit with `flops` FLOP/s and
/// `mem_bw` bytes/s, plus a fixed cost per op.
pub fn roofline_s(w: NodeWork, flops: f64, mem_bw: f64, fixed_s: f64) -> f64 {
    fixed_s + (w.flops / flops).max(w.bytes / mem_bw)
}

/// Distinct non-negative ids of an I32 ids tensor and the number of its
/// entries that are not skipped (>= 0), read from memory that the CPU can
/// address; `None` when the memory is not addressable.
fn distinct_ids(g: &Graph, ids: TensorId) -> Option<(usize, usize)> {
    scan_ids(g, ids).map(|(s, active)| (s.len(), active))
}

/// The distinct non-negative ids of an I32 ids tensor in host-addressable
/// memory (`None` otherwise).
pub fn id_set(g: &Graph, ids: TensorId) -> Option<BTreeSet<i32>> {
    scan_ids(g, ids).map(|(s, _)| s)
}

/// The distinct non-negative ids and the count of non-skipped entries.
fn scan_ids(g: &Graph, ids: TensorId) -> Option<(BTreeSet<i32>, usize)> {
    let t = g.tensor(ids);
    if t.ty != GgmlType::I32 {
        return None;
    }
    let d = g.data_of(ids)?;
    let p = d.buffer.base_ptr()?;
    let mut set = BTreeSet::new();
    let mut active = 0usize;
    for i2 in 0..t.ne[2].max(1) as usize {
        for i1 in 0..t.ne[1].max(1) as usize {
            for i0 in 0..t.ne[0].max(0) as usize {
                let off = d.offset + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2];
                if off + 4 > d.buffer.size() {
                    return None;
                }
                // SAFETY: `off + 4` lies within the buffer (checked above),
                // which `d` keeps alive; the read is unaligned-safe.
                let v = unsafe { std::ptr::read_unaligned(p.add(off) as *const i32) };
                if v >= 0 {
                    set.insert(v);
                    active += 1;
                }
            }
        }
    }
    Some((set, active))
}

/// FLOPs and bytes of `node` (zero for views and leafs).
pub fn node_work(g: &Graph, node: TensorId) -> NodeWork {
    let t = g.tensor(node);
    let bytes_of = |id: TensorId| g.tensor(id).nbytes() as f64;
    let out = t.nbytes() as f64;
    let srcs: f64 = t.src.iter().map(|&s| bytes_of(s)).sum();
    let n = t.nelements().max(0) as f64;
    match &t.op {
        Op::None | Op::View | Op::Reshape | Op::Permute | Op::Transpose => NodeWork::default(),
        Op::MulMat => {
            let a = g.tensor(t.src[0]);
            NodeWork {
                flops: 2.0 * a.ne[0] as f64 * n,
                bytes: srcs + out,
            }
        }
        Op::MulMatId => {
            let a = g.tensor(t.src[0]);
            let n_expert = a.ne[2].max(1) as f64;
            let expert_bytes = bytes_of(t.src[0]) / n_expert;
            let ids = t.src.get(2).map(|&i| g.tensor(i));
            let slots = ids.map_or(0, |i| i.nelements().max(0) as usize);
            let (used, active) = t
                .src
                .get(2)
                .and_then(|&ids| distinct_ids(g, ids))
                .map_or((n_expert, 1.0), |(u, k)| {
                    (u as f64, k as f64 / slots.max(1) as f64)
                });
            let rest: f64 = t.src.iter().skip(1).map(|&s| bytes_of(s)).sum();
            NodeWork {
                flops: 2.0 * a.ne[0] as f64 * n * active,
                bytes: used * expert_bytes + rest + out,
            }
        }
        Op::FlashAttnExt { .. } => {
            // q [d, n_q, heads], k [d, n_kv, kv heads]: QK^T and PV
            let q = g.tensor(t.src[0]);
            let k = g.tensor(t.src[1]);
            NodeWork {
                flops: 4.0 * q.ne[0] as f64 * q.ne[1] as f64 * q.ne[2] as f64 * k.ne[1] as f64,
                bytes: srcs + out,
            }
        }
        Op::GetRows => NodeWork {
            flops: 0.0,
            bytes: 2.0 * out,
        },
        Op::Cpy => NodeWork {
            flops: 0.0,
            bytes: 2.0 * bytes_of(t.src[0]),
        },
        // the node is a view of the whole destination: the rows written
        // cost as a copy of the source rows (the indices are negligible)
        Op::SetRows => NodeWork {
            flops: 0.0,
            bytes: 2.0 * bytes_of(t.src[1]),
        },
        _ => NodeWork {
            flops: 4.0 * n,
            bytes: srcs + out,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roofline_takes_the_slower_of_compute_and_memory() {
        let w = NodeWork {
            flops: 1e9,
            bytes: 1e6,
        };
        assert_eq!(roofline_s(w, 1e9, 1e9, 0.5), 1.5);
        let w = NodeWork {
            flops: 1e3,
            bytes: 2e9,
        };
        assert_eq!(roofline_s(w, 1e9, 1e9, 0.0), 2.0);
    }

    #[test]
    fn mul_mat_counts_two_flops_per_multiply_add() {
        let mut g = Graph::new();
        let a = g.new_tensor_2d(GgmlType::F32, 8, 4);
        let b = g.new_tensor_2d(GgmlType::F32, 8, 3);
        let c = g.mul_mat(a, b);
        let w = node_work(&g, c);
        assert_eq!(w.flops, 2.0 * 8.0 * 4.0 * 3.0);
        assert_eq!(w.bytes, (8 * 4 * 4 + 8 * 3 * 4 + 4 * 3 * 4) as f64);
        assert_eq!(node_work(&g, a), NodeWork::default());
    }

    #[test]
    fn mul_mat_id_counts_only_the_slots_it_computes() {
        use crate::backend::BackendDevice;
        use crate::cpu::CpuBackend;
        let cpu = CpuBackend::new(1);
        let mut g = Graph::new();
        let a = g.new_tensor_3d(GgmlType::F32, 8, 4, 3);
        let b = g.new_tensor_3d(GgmlType::F32, 8, 2, 1);
        let ids = g.new_tensor_2d(GgmlType::I32, 2, 1);
        let c = g.mul_mat_id(a, b, ids);
        let buf = cpu
            .alloc_buffer(16, crate::backend::BufferUsage::Compute)
            .unwrap();
        let v: Vec<u8> = [2i32, -1].iter().flat_map(|x| x.to_le_bytes()).collect();
        buf.write(0, &v).unwrap();
        g.tensor_mut(ids).data = Some(crate::tensor::TensorData {
            buffer: buf.clone(),
            offset: 0,
        });
        let half = node_work(&g, c);
        // one of two slots: half the FLOPs, one expert's bytes
        assert_eq!(half.flops, 2.0 * 8.0 * 4.0 * 2.0 * 0.5);
        let rest = (8 * 2 * 4 + 2 * 4 + 4 * 2 * 4) as f64;
        assert_eq!(half.bytes, (8 * 4 * 4) as f64 + rest);
        buf.write(0, &[0xff; 8]).unwrap();
        let none = node_work(&g, c);
        assert_eq!((none.flops, none.bytes), (0.0, rest));
    }
}
