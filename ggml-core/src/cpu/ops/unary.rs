//! Unary activations (`silu`, `gelu`, `sigmoid`, `neg`, `relu`, `exp`) and
//! the row-mapping driver shared with the element-wise maps.

use std::sync::OnceLock;

use super::compute_ctx::ComputeCtx;
use super::copy::{f32_rows, load_row, min_rows, store_row};
use super::vexp::silu_row;
use crate::backend::BackendError;
use crate::op::{Op, UnaryOp};
use crate::tensor::TensorId;

/// ggml's `GELU_COEF_A`.
pub(super) const GELU_COEF_A: f32 = 0.044715;
/// ggml's `SQRT_2_OVER_PI`.
#[allow(clippy::excessive_precision)]
pub(super) const SQRT_2_OVER_PI: f32 = 0.797_884_560_802_865_355_879_892_119_868_76;

/// `ggml_gelu_f32`: the tanh approximation, evaluated in f32 as ggml does.
#[inline]
pub(super) fn gelu_exact(x: f32) -> f32 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

fn gelu_table() -> &'static [u16] {
    static TABLE: OnceLock<Box<[u16]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|h| half::f16::from_f32(gelu_exact(half::f16::from_bits(h).to_f32())).to_bits())
            .collect()
    })
}

/// `ggml_vec_gelu_f32` as ggml's CPU backend builds it (`GGML_GELU_FP16`):
/// 0 below -10, identity above 10, otherwise the f16 table of `ggml_gelu_f32`
/// indexed by `x` rounded to f16.
#[inline]
pub(super) fn gelu_with(table: &[u16], x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        let i = half::f16::from_f32(x).to_bits() as usize;
        half::f16::from_bits(table[i]).to_f32()
    }
}

/// GELU with the shared table.
pub(super) fn gelu_fn() -> impl Fn(f32) -> f32 + Sync + Copy {
    let t = gelu_table();
    move |x| gelu_with(t, x)
}

/// `dst[i] = f(src[i])` over same-shaped tensors, `dst` F32, source F32,
/// F16 or BF16 with any strides.
pub(super) fn map_unary<F: Fn(f32) -> f32 + Sync>(
    ctx: &ComputeCtx<'_>,
    node: TensorId,
    f: F,
) -> Result<(), BackendError> {
    map_unary_rows(ctx, node, |row: &mut [f32]| {
        for x in row.iter_mut() {
            *x = f(*x);
        }
    })
}

/// [`map_unary`] with a function of whole rows (in place).
fn map_unary_rows<F: Fn(&mut [f32]) + Sync>(
    ctx: &ComputeCtx<'_>,
    node: TensorId,
    f: F,
) -> Result<(), BackendError> {
    let (dst, src) = ctx.views(node)?;
    let s = src[0];
    if s.ne != dst.ne {
        return Err(BackendError::InvalidInput(format!(
            "'{}': source shape differs",
            ctx.g.tensor(node).name
        )));
    }
    let ne0 = dst.ne[0];
    let fast = f32_rows(&s) && f32_rows(&dst);
    ctx.pool.for_ranges(dst.nrows(), min_rows(ne0), &|rows| {
        let mut tmp = vec![0f32; if fast { 0 } else { ne0 }];
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            // SAFETY: coordinates within both shapes; fast rows are dense and
            // aligned; dst may alias src only element for element (the same
            // row, or rows no other thread touches).
            unsafe {
                if fast {
                    let ps = s.row_ptr(i1, i2, i3) as *const f32;
                    let pd = dst.row_ptr(i1, i2, i3) as *mut f32;
                    std::ptr::copy(ps, pd, ne0);
                    f(std::slice::from_raw_parts_mut(pd, ne0));
                } else {
                    load_row(&s, i1, i2, i3, &mut tmp);
                    f(&mut tmp);
                    store_row(&dst, i1, i2, i3, &tmp);
                }
            }
        }
    });
    Ok(())
}

/// The unary activations.
pub(super) fn unary(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let Op::Unary(u) = ctx.g.tensor(node).op else {
        return Err(BackendError::Unsupported("unary: not a unary node".into()));
    };
    match u {
        UnaryOp::Silu => map_unary_rows(ctx, node, silu_row),
        UnaryOp::Gelu => map_unary(ctx, node, gelu_fn()),
        UnaryOp::Sigmoid => map_unary(ctx, node, |x| 1.0 / (1.0 + (-x).exp())),
        UnaryOp::Neg => map_unary(ctx, node, |x| -x),
        UnaryOp::Relu => map_unary(ctx, node, |x| if x > 0.0 { x } else { 0.0 }),
        UnaryOp::Exp => map_unary(ctx, node, f32::exp),
    }
}
