//! Row reductions: `sum_rows`, `mean` (F32 `[1, ne1, ne2, ne3]`) and
//! `argmax` (I32 `[ne1]`).

use super::compute_ctx::ComputeCtx;
use super::copy::{is_float, load_row, min_rows};
use crate::backend::BackendError;
use crate::cpu::scratch::RowBuf;
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// Float sources of any strides; dst as the constructors make it.
pub(super) fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let s = g.tensor(t.src[0]);
    if !is_float(s.ty) {
        return false;
    }
    match t.op {
        Op::Argmax => {
            t.ty == GgmlType::I32 && t.ne == [s.ne[1], 1, 1, 1] && s.ne[2] == 1 && s.ne[3] == 1
        }
        _ => t.ty == GgmlType::F32 && t.ne == [1, s.ne[1], s.ne[2], s.ne[3]],
    }
}

/// `ggml_vec_sum_f32`: f64 accumulation, rounded to f32.
pub(super) fn sum_f32(x: &[f32]) -> f32 {
    let mut sum = 0f64;
    for &v in x {
        sum += v as f64;
    }
    sum as f32
}

/// `ggml_vec_argmax_f32`: on ties the *last* index of the maximum wins
/// (ggml keeps `max = MAX(max, x)` and takes `i` whenever `max == x[i]`).
pub(super) fn argmax_row(x: &[f32]) -> i32 {
    let mut max = f32::NEG_INFINITY;
    let mut idx = 0usize;
    for (i, &v) in x.iter().enumerate() {
        max = if max > v { max } else { v };
        if max == v {
            idx = i;
        }
    }
    idx as i32
}

/// Compute `sum_rows`, `mean` or `argmax`.
pub(super) fn reduce(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let op = ctx.g.tensor(node).op;
    let (dst, src) = ctx.views(node)?;
    let s = src[0];
    let ne0 = s.ne[0];
    let ok = match op {
        Op::Argmax => dst.ne[0] == s.ne[1] && s.ne[2] == 1 && s.ne[3] == 1,
        _ => dst.ne[0] == 1 && dst.ne[1..] == s.ne[1..],
    };
    if !ok {
        return Err(BackendError::InvalidInput(format!(
            "{}: shapes do not match",
            op.name()
        )));
    }
    ctx.pool.for_ranges(s.nrows(), min_rows(ne0), &|rows| {
        let mut x = RowBuf::take(ne0);
        for r in rows {
            let (i1, i2, i3) = s.row_coords(r);
            // SAFETY: coordinates within the source shape; `x` is scratch.
            unsafe { load_row(&s, i1, i2, i3, &mut x) };
            // SAFETY: the dst element exists by the shape check above.
            unsafe {
                match op {
                    Op::Argmax => {
                        let p = dst.elem_ptr(i1, 0, 0, 0) as *mut i32;
                        p.write_unaligned(argmax_row(&x));
                    }
                    Op::Mean => dst.set_f32(0, i1, i2, i3, sum_f32(&x) / ne0 as f32),
                    _ => dst.set_f32(0, i1, i2, i3, sum_f32(&x)),
                }
            }
        }
    });
    Ok(())
}
