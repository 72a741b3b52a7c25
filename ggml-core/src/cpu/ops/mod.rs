//! CPU kernels, one file per family of ops, and the dispatch from a graph
//! node to its kernel. Each kernel splits rows across the worker pool.

use crate::error::BackendError;
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::TensorId;

mod compute_ctx;
mod concat;
mod copy;
mod elementwise;
mod flash_attn;
mod flash_attn_vec;
mod glu;
mod matmul;
mod norm;
mod quant_rows;
mod reduce;
mod rope;
mod set_rows;
mod softmax;
mod sort;
mod unary;
mod vexp;

pub use compute_ctx::{ComputeCtx, SrcViews};

/// Whether the CPU kernels implement this node (op, types and layout).
pub fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    match t.op {
        Op::None | Op::Reshape | Op::View | Op::Permute | Op::Transpose => true,
        Op::Add | Op::Sub | Op::Mul | Op::Div => elementwise::supports_binary(g, node),
        Op::Scale { .. } | Op::Sqr | Op::Sqrt | Op::Unary(_) => elementwise::supports_map(g, node),
        Op::Dup | Op::Cont | Op::Cpy => copy::supports_copy(g, node),
        Op::Glu { .. } => glu::supports(g, node),
        Op::RmsNorm { .. } | Op::Norm { .. } => norm::supports(g, node),
        Op::SumRows | Op::Mean | Op::Argmax => reduce::supports(g, node),
        Op::Argsort(_) | Op::TopK { .. } => sort::supports(g, node),
        Op::SoftMaxExt { .. } => softmax::supports(g, node),
        Op::RopeExt(_) => rope::supports(g, node),
        Op::SetRows => set_rows::supports(g, node),
        Op::Concat { .. } => concat::supports(g, node),
        Op::MulMat => matmul::supports_mul_mat(g, node),
        Op::MulMatId => matmul::supports_mul_mat_id(g, node),
        Op::AddId => matmul::supports_add_id(g, node),
        Op::GetRows => matmul::supports_get_rows(g, node),
        Op::FlashAttnExt { .. } => flash_attn::supports(g, node),
    }
}

/// Compute one node.
pub fn compute_node(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let t = ctx.g.tensor(node);
    match t.op {
        Op::None | Op::Reshape | Op::View | Op::Permute | Op::Transpose => Ok(()),
        Op::Add | Op::Sub | Op::Mul | Op::Div => elementwise::binary(ctx, node),
        Op::Scale { .. } | Op::Sqr | Op::Sqrt => elementwise::map(ctx, node),
        Op::Unary(_) => unary::unary(ctx, node),
        Op::Dup | Op::Cont | Op::Cpy => copy::copy(ctx, node),
        Op::Glu { .. } => glu::glu(ctx, node),
        Op::RmsNorm { .. } | Op::Norm { .. } => norm::norm(ctx, node),
        Op::SumRows | Op::Mean | Op::Argmax => reduce::reduce(ctx, node),
        Op::Argsort(_) | Op::TopK { .. } => sort::sort(ctx, node),
        Op::SoftMaxExt { .. } => softmax::soft_max(ctx, node),
        Op::RopeExt(_) => rope::rope(ctx, node),
        Op::SetRows => set_rows::set_rows(ctx, node),
        Op::Concat { .. } => concat::concat(ctx, node),
        Op::MulMat => matmul::mul_mat(ctx, node),
        Op::MulMatId => matmul::mul_mat_id(ctx, node),
        Op::AddId => matmul::add_id(ctx, node),
        Op::GetRows => matmul::get_rows(ctx, node),
        Op::FlashAttnExt { .. } => flash_attn::flash_attn(ctx, node),
    }
}
