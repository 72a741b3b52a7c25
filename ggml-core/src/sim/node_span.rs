//! What the timeline records of a node a backend on the simulated clock
//! computed (the sim device, or the CPU joining its clock): the op and
//! tensor name, the memory of its sources and its own.
//!
//! Data flows: [`super::SimClock`] asks for it (only while recording) when a
//! node's span is pushed; the memory ranges come from the tensors' buffers,
//! which the CPU can address on both backends.

use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::TensorId;
use crate::timeline::{MemRange, SpanDetail};

use super::cost;

/// Bytes a tensor's elements span from its first byte (strided views
/// included).
fn byte_extent(g: &Graph, id: TensorId) -> usize {
    let t = g.tensor(id);
    if t.ne.iter().any(|&n| n <= 0) {
        return 0;
    }
    let blck = t.ty.blck_size().max(1) as i64;
    let n0 = (t.ne[0] + blck - 1) / blck;
    let mut ext = (n0 as usize - 1) * t.nb[0] + t.nb[0];
    for d in 1..t.ne.len() {
        ext += (t.ne[d] as usize - 1) * t.nb[d];
    }
    ext
}

/// The memory a tensor occupies, where the CPU can address it.
pub fn tensor_range(g: &Graph, id: TensorId) -> Option<MemRange> {
    let d = g.data_of(id)?;
    let p = d.buffer.base_ptr()?;
    Some(MemRange {
        addr: p as usize + d.offset,
        len: byte_extent(g, id),
    })
}

/// The span detail of computing `node`: its op and name, the memory of its
/// sources and its own.
/// A `mul_mat_id` reads only the experts its ids name: those experts'
/// bytes of its expert tensor are its reads of it.
pub fn node_detail(g: &Graph, node: TensorId) -> SpanDetail {
    let t = g.tensor(node);
    let mut reads: Vec<MemRange> = Vec::new();
    for (j, &s) in t.src.iter().enumerate() {
        let Some(r) = tensor_range(g, s) else {
            continue;
        };
        let experts = (t.op == Op::MulMatId && j == 0)
            .then(|| t.src.get(2).and_then(|&ids| cost::id_set(g, ids)))
            .flatten();
        match experts {
            Some(set) => {
                let eb = g.tensor(s).nb[2];
                reads.extend(set.into_iter().map(|e| MemRange {
                    addr: r.addr + e as usize * eb,
                    len: eb,
                }));
            }
            None => reads.push(r),
        }
    }
    SpanDetail {
        name: format!("{} {}", t.op.name(), t.name),
        reads,
        writes: tensor_range(g, node).into_iter().collect(),
    }
}
