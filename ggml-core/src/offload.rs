//! When a device claims an op whose weight is in host memory: ggml's
//! `offload_op` rule, shared by the device backends.

use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::TensorId;

/// Batch size of a node for `offload_op`: the activation's `ne[1]`
/// (`ne[2]` tokens for `mul_mat_id`, all rows for `add_id`), as ggml's
/// backends judge it.
pub fn op_batch_size(g: &Graph, node: TensorId) -> i64 {
    let t = g.tensor(node);
    match t.op {
        Op::MulMatId => t.ne[2],
        Op::GetRows => t.ne[1],
        // ggml's default: rows (n_used * n_tokens for an expert bias)
        Op::AddId => t.ne[1] * t.ne[2] * t.ne[3],
        _ => t.ne[1],
    }
}

/// Whether a device with offload threshold `min_batch` claims `node` though
/// its weight is in host memory: when the batch is at least `min_batch`, and
/// never for `get_rows` (copying a host embedding table is never worth it,
/// as in ggml).
pub fn offload_host_weight_op(g: &Graph, node: TensorId, min_batch: i64) -> bool {
    g.tensor(node).op != Op::GetRows && op_batch_size(g, node) >= min_batch
}
