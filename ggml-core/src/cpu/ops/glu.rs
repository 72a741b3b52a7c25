//! Gated linear units: `swiglu`, `geglu`, `swiglu_oai`, over one tensor
//! (halves of `ne0`, `swapped` puts the gate second) or two (`act(a) * b`).

use super::compute_ctx::ComputeCtx;
use super::copy::{is_float, load_row_at, min_rows, store_row};
use super::unary::gelu_fn;
use super::vexp::swiglu_row;
use crate::backend::BackendError;
use crate::cpu::scratch::RowBuf;
use crate::graph::Graph;
use crate::op::{GluOp, Op};
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// F32 dst; F32/F16/BF16 sources of any strides.
pub(super) fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    t.ty == GgmlType::F32 && t.src.iter().all(|&s| is_float(g.tensor(s).ty))
}

/// `swiglu_oai` as ggml: `x = min(gate, limit)`, `y = clamp(up, -limit,
/// limit)`, `x * sigmoid(alpha x) * (y + 1)`.
#[inline]
fn swiglu_oai(x: f32, g: f32, alpha: f32, limit: f32) -> f32 {
    let x = if limit < x { limit } else { x };
    // std::clamp(g, -limit, limit), without f32::clamp's panics
    let y = if g < -limit {
        -limit
    } else if limit < g {
        limit
    } else {
        g
    };
    let out = x / (1.0 + (alpha * -x).exp());
    out * (y + 1.0)
}

/// Compute a GLU node.
pub(super) fn glu(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let Op::Glu { op, swapped } = ctx.g.tensor(node).op else {
        return Err(BackendError::Unsupported("glu: not a glu node".into()));
    };
    let (dst, src) = ctx.views(node)?;
    let nc = dst.ne[0];
    let split = src.len() > 1;
    let (a, b) = if split {
        (src[0], src[1])
    } else {
        (src[0], src[0])
    };
    let shape_ok = if split {
        a.ne == dst.ne && b.ne == dst.ne
    } else {
        a.ne[0] == 2 * nc && a.ne[1..] == dst.ne[1..]
    };
    if !shape_ok {
        return Err(BackendError::InvalidInput(format!(
            "glu '{}': source shapes do not match",
            ctx.g.tensor(node).name
        )));
    }
    // element offsets of gate and up within their rows
    let (og, ou, ga, ub) = match (split, swapped) {
        (true, false) => (0, 0, a, b),
        (true, true) => (0, 0, b, a),
        (false, false) => (0, nc, a, a),
        (false, true) => (nc, 0, a, a),
    };
    let gelu = gelu_fn();
    ctx.pool.for_ranges(dst.nrows(), min_rows(nc), &|rows| {
        let mut buf = RowBuf::take(2 * nc);
        let (x, g) = buf.split_at_mut(nc);
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            // SAFETY: row coordinates within all shapes (checked above);
            // `og + nc` and `ou + nc` fit the source rows.
            unsafe {
                load_row_at(&ga, og, i1, i2, i3, x);
                load_row_at(&ub, ou, i1, i2, i3, g);
            }
            match op {
                GluOp::Swiglu => swiglu_row(x, g),
                GluOp::Geglu => {
                    for (xv, &gv) in x.iter_mut().zip(g.iter()) {
                        *xv = if *xv <= -10.0 { 0.0 } else { gelu(*xv) * gv };
                    }
                }
                GluOp::SwigluOai { alpha, limit } => {
                    let (alpha, limit) = (alpha.get(), limit.get());
                    for (xv, &gv) in x.iter_mut().zip(g.iter()) {
                        *xv = swiglu_oai(*xv, gv, alpha, limit);
                    }
                }
            }
            // SAFETY: dst row within shape; `x` is scratch.
            unsafe { store_row(&dst, i1, i2, i3, x) };
        }
    });
    Ok(())
}
