//! `soft_max_ext`: `softmax(a * scale + slope * mask)` per row, with ggml's
//! ALiBi slopes (`max_bias`), the mask broadcast over dims 2 and 3 (mask
//! row `i1` of a taller mask), and optional per-head sink logits.

use super::compute_ctx::ComputeCtx;
use super::copy::{is_float, load_row, min_rows, store_row};
use crate::backend::BackendError;
use crate::cpu::scratch::RowBuf;
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// F32 dst; float source and mask (any strides); F32 sinks covering every head.
pub(super) fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let a = g.tensor(t.src[0]);
    if t.ty != GgmlType::F32 || !is_float(a.ty) || a.ne != t.ne {
        return false;
    }
    if let Some(&m) = t.src.get(1) {
        let m = g.tensor(m);
        if !is_float(m.ty)
            || m.ne[0] != a.ne[0]
            || m.ne[1] < a.ne[1]
            || m.ne[2] == 0
            || m.ne[3] == 0
            || a.ne[2] % m.ne[2] != 0
            || a.ne[3] % m.ne[3] != 0
        {
            return false;
        }
    }
    if let Some(&s) = t.src.get(2) {
        let s = g.tensor(s);
        if !is_float(s.ty) || s.ne[0] < a.ne[2] {
            return false;
        }
    }
    true
}

/// ALiBi slope of head `h` (ggml: `m0^(h+1)` for the first `n_head_log2`
/// heads, then `m1^(2(h - n_head_log2) + 1)`); 1 without `max_bias`.
pub(super) fn alibi_slope(max_bias: f32, n_head: u32, h: u32) -> f32 {
    if max_bias <= 0.0 || n_head == 0 {
        return 1.0;
    }
    let n_head_log2 = 1u32 << (n_head as f64).log2().floor() as u32;
    let m0 = 2.0f32.powf(-max_bias / n_head_log2 as f32);
    let m1 = 2.0f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
    if h < n_head_log2 {
        m0.powf((h + 1) as f32)
    } else {
        m1.powf((2 * (h - n_head_log2) + 1) as f32)
    }
}

/// Softmax of `w` into itself, with an optional extra sink logit in the
/// normaliser (ggml's arithmetic: its vectorised exps summed per 8 in f32
/// into an f64 total, see [`super::vexp`], then an f32 reciprocal).
///
/// `cells`: the row spans KV cells (a masked attention row): its total is
/// then summed so that it does not depend on where in the row the
/// unmasked values sit ([`super::vexp::soft_max_exp_cells`]), so a
/// sequence batched with others gets the probabilities it gets alone.
pub(super) fn softmax_row(w: &mut [f32], sink: Option<f32>, cells: bool) {
    let mut max = f32::NEG_INFINITY;
    for &v in w.iter() {
        max = if max > v { max } else { v };
    }
    if let Some(s) = sink {
        max = if max > s { max } else { s };
    }
    let mut sum = if cells && max.is_finite() {
        super::vexp::soft_max_exp_cells(w, max)
    } else {
        super::vexp::soft_max_exp(w, max)
    };
    if let Some(s) = sink {
        sum += (s - max).exp() as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in w.iter_mut() {
        *v *= inv;
    }
}

/// Compute a `soft_max_ext` node.
pub(super) fn soft_max(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let Op::SoftMaxExt { scale, max_bias } = ctx.g.tensor(node).op else {
        return Err(BackendError::Unsupported("soft_max: wrong node".into()));
    };
    let (scale, max_bias) = (scale.get(), max_bias.get());
    if !supports(ctx.g, node) {
        return Err(BackendError::Unsupported(format!(
            "soft_max '{}': types or shapes",
            ctx.g.tensor(node).name
        )));
    }
    let (dst, src) = ctx.views(node)?;
    let a = src[0];
    let mask = src.get(1).copied();
    let sinks = src.get(2).copied();
    let ne0 = dst.ne[0];
    if ne0 == 0 {
        return Ok(());
    }
    let n_head = a.ne[2] as u32;
    ctx.pool.for_ranges(dst.nrows(), min_rows(ne0), &|rows| {
        let mut buf = RowBuf::take(if mask.is_some() { 2 * ne0 } else { ne0 });
        let (w, m) = buf.split_at_mut(ne0);
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            let slope = alibi_slope(max_bias, n_head, i2 as u32);
            // SAFETY: coordinates within a's shape; the mask row (i1,
            // i2 % ne12, i3 % ne13) and the sink element exist by `supports`.
            unsafe {
                load_row(&a, i1, i2, i3, w);
                for v in w.iter_mut() {
                    *v *= scale;
                }
                if let Some(mv) = &mask {
                    load_row(mv, i1, i2 % mv.ne[2], i3 % mv.ne[3], m);
                    for (v, &mm) in w.iter_mut().zip(m.iter()) {
                        *v += slope * mm;
                    }
                }
                let sink = sinks.as_ref().map(|s| s.get_f32(i2, 0, 0, 0));
                softmax_row(w, sink, mask.is_some());
                store_row(&dst, i1, i2, i3, w);
            }
        }
    });
    Ok(())
}
