//! Element-wise binary ops with ggml's broadcasting (`add`, `sub`, `mul`, `div`).

use super::ComputeCtx;
use crate::backend::BackendError;
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::TensorId;
use crate::types::GgmlType;

fn is_float(t: GgmlType) -> bool {
    matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

pub(super) fn supports_binary(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    t.src.iter().all(|&s| is_float(g.tensor(s).ty)) && t.ty == GgmlType::F32
}

/// `dst = a (op) b`, `b` broadcast over `a` by index modulo its shape.
pub(super) fn binary(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let (dst, src) = ctx.views(node)?;
    let (a, b) = (src[0], src[1]);
    let f: fn(f32, f32) -> f32 = match ctx.g.tensor(node).op {
        Op::Add => |x, y| x + y,
        Op::Sub => |x, y| x - y,
        Op::Mul => |x, y| x * y,
        _ => |x, y| x / y,
    };
    ctx.pool.for_ranges(dst.nrows(), 4, &|rows| {
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            let (j1, j2, j3) = (i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
            for i0 in 0..dst.ne[0] {
                // SAFETY: all indices are within each view's `ne`.
                unsafe {
                    let x = a.get_f32(i0, i1, i2, i3);
                    let y = b.get_f32(i0 % b.ne[0], j1, j2, j3);
                    dst.set_f32(i0, i1, i2, i3, f(x, y));
                }
            }
        }
    });
    Ok(())
}
