//! Row normalisations: `rms_norm` and `norm`, with ggml's arithmetic (sums
//! accumulated in f64 over f32 terms, the mean and scale rounded to f32).

use super::compute_ctx::ComputeCtx;
use super::copy::{is_float, load_row, min_rows, store_row};
use crate::backend::BackendError;
use crate::cpu::scratch::RowBuf;
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// F32 dst of the source's shape; F32/F16/BF16 source, any strides.
pub(super) fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let s = g.tensor(t.src[0]);
    t.ty == GgmlType::F32 && is_float(s.ty) && s.ne == t.ne
}

/// `y = x / sqrt(mean(x²) + eps)` in place, as `ggml_compute_forward_rms_norm_f32`.
pub(super) fn rms_norm_row(x: &mut [f32], eps: f32) {
    let mut sum = 0f64;
    for &v in x.iter() {
        sum += (v * v) as f64;
    }
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0f32 / (mean + eps).sqrt();
    for v in x.iter_mut() {
        *v *= scale;
    }
}

/// `y = (x - mean) / sqrt(var + eps)` in place, as `ggml_compute_forward_norm_f32`.
pub(super) fn norm_row(x: &mut [f32], eps: f32) {
    let mut sum = 0f64;
    for &v in x.iter() {
        sum += v as f64;
    }
    let mean = (sum / x.len() as f64) as f32;
    let mut sum2 = 0f64;
    for v in x.iter_mut() {
        *v -= mean;
        sum2 += (*v * *v) as f64;
    }
    let variance = (sum2 / x.len() as f64) as f32;
    let scale = 1.0f32 / (variance + eps).sqrt();
    for v in x.iter_mut() {
        *v *= scale;
    }
}

/// Compute `rms_norm` or `norm`.
pub(super) fn norm(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let (rms, eps) = match ctx.g.tensor(node).op {
        Op::RmsNorm { eps } => (true, eps.get()),
        Op::Norm { eps } => (false, eps.get()),
        _ => return Err(BackendError::Unsupported("norm: not a norm node".into())),
    };
    let (dst, src) = ctx.views(node)?;
    let s = src[0];
    if s.ne != dst.ne {
        return Err(BackendError::InvalidInput(
            "norm: source shape differs".into(),
        ));
    }
    let ne0 = dst.ne[0];
    if ne0 == 0 {
        return Ok(());
    }
    ctx.pool.for_ranges(dst.nrows(), min_rows(ne0), &|rows| {
        let mut x = RowBuf::take(ne0);
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            // SAFETY: coordinates within both (equal) shapes; `x` is scratch.
            unsafe { load_row(&s, i1, i2, i3, &mut x) };
            if rms {
                rms_norm_row(&mut x, eps);
            } else {
                norm_row(&mut x, eps);
            }
            // SAFETY: as above.
            unsafe { store_row(&dst, i1, i2, i3, &x) };
        }
    });
    Ok(())
}
