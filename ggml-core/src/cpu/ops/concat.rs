//! `concat(a, b, dim)`: any non-quantized type (same for both sources and
//! dst), any strides, along any dim.

use super::compute_ctx::ComputeCtx;
use super::copy::min_rows;
use crate::backend::BackendError;
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::TensorId;

/// Same non-quantized type everywhere; ggml's shapes.
pub(super) fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let Op::Concat { dim } = t.op else {
        return false;
    };
    let (a, b) = (g.tensor(t.src[0]), g.tensor(t.src[1]));
    let d = dim as usize;
    d < 4
        && !t.ty.is_quantized()
        && a.ty == t.ty
        && b.ty == t.ty
        && (0..4).all(|i| {
            if i == d {
                a.ne[i] + b.ne[i] == t.ne[i]
            } else {
                a.ne[i] == t.ne[i] && b.ne[i] == t.ne[i]
            }
        })
}

/// Compute a `concat` node.
pub(super) fn concat(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    if !supports(ctx.g, node) {
        return Err(BackendError::Unsupported(format!(
            "concat '{}': types or shapes",
            ctx.g.tensor(node).name
        )));
    }
    let Op::Concat { dim } = ctx.g.tensor(node).op else {
        return Err(BackendError::Unsupported("concat: wrong node".into()));
    };
    let d = dim as usize;
    let (dst, src) = ctx.views(node)?;
    let (a, b) = (src[0], src[1]);
    let esz = dst.ty.type_size();
    let ne0 = dst.ne[0];
    ctx.pool.for_ranges(dst.nrows(), min_rows(ne0), &|rows| {
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            for i0 in 0..ne0 {
                let i = [i0, i1, i2, i3];
                let from_a = i[d] < a.ne[d];
                let (s, j) = if from_a {
                    (&a, i)
                } else {
                    let mut j = i;
                    j[d] -= a.ne[d];
                    (&b, j)
                };
                // SAFETY: `j` is within the chosen source's shape (dims other
                // than `d` are equal to dst's; along `d` it is split at
                // a.ne[d]); `i` within dst's.
                unsafe {
                    std::ptr::copy(
                        s.elem_ptr(j[0], j[1], j[2], j[3]),
                        dst.elem_ptr(i0, i1, i2, i3),
                        esz,
                    );
                }
            }
        }
    });
    Ok(())
}
