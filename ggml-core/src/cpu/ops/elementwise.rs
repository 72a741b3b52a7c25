//! Element-wise arithmetic: `add`, `sub`, `mul`, `div` with ggml's
//! broadcasting (`b` repeats over `a` by index modulo its shape), and the
//! per-element maps `scale` (`a*s + b`), `sqr`, `sqrt`.

use super::compute_ctx::ComputeCtx;
use super::copy::{f32_rows, is_float, load_row, load_row_at, min_rows, store_row};
use super::unary::map_unary;
use crate::backend::BackendError;
use crate::cpu::scratch::RowBuf;
use crate::graph::Graph;
use crate::op::Op;
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// F32 dst; sources F32, F16 or BF16 (any strides).
pub(super) fn supports_binary(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    t.src.iter().all(|&s| is_float(g.tensor(s).ty)) && t.ty == GgmlType::F32
}

/// F32 dst from an F32, F16 or BF16 source of the same shape.
pub(super) fn supports_map(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    t.ty == GgmlType::F32 && is_float(g.tensor(t.src[0]).ty) && g.tensor(t.src[0]).ne == t.ne
}

#[derive(Clone, Copy)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
}

/// `d[i] = a[i] (op) b[i]` for `i < n` (`d` may alias `a` or `b` exactly).
///
/// # Safety
/// All three ranges of `n` f32 must be valid and aligned.
#[inline]
unsafe fn apply(op: Bin, d: *mut f32, a: *const f32, b: *const f32, n: usize) {
    macro_rules! go {
        ($e:expr) => {
            for i in 0..n {
                let (x, y) = (*a.add(i), *b.add(i));
                *d.add(i) = $e(x, y);
            }
        };
    }
    match op {
        Bin::Add => go!(|x: f32, y: f32| x + y),
        Bin::Sub => go!(|x: f32, y: f32| x - y),
        Bin::Mul => go!(|x: f32, y: f32| x * y),
        Bin::Div => go!(|x: f32, y: f32| x / y),
    }
}

/// `d[i] = a[i] (op) y` for `i < n`.
///
/// # Safety
/// As [`apply`].
#[inline]
unsafe fn apply_scalar(op: Bin, d: *mut f32, a: *const f32, y: f32, n: usize) {
    macro_rules! go {
        ($e:expr) => {
            for i in 0..n {
                *d.add(i) = $e(*a.add(i), y);
            }
        };
    }
    match op {
        Bin::Add => go!(|x: f32, y: f32| x + y),
        Bin::Sub => go!(|x: f32, y: f32| x - y),
        Bin::Mul => go!(|x: f32, y: f32| x * y),
        Bin::Div => go!(|x: f32, y: f32| x / y),
    }
}

/// `dst = a (op) b`, `b` broadcast over `a` by index modulo its shape.
pub(super) fn binary(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let (dst, src) = ctx.views(node)?;
    let (a, b) = (src[0], src[1]);
    let op = match ctx.g.tensor(node).op {
        Op::Add => Bin::Add,
        Op::Sub => Bin::Sub,
        Op::Mul => Bin::Mul,
        _ => Bin::Div,
    };
    let ne0 = dst.ne[0];
    let nb0 = b.ne[0];
    if ne0 == 0 || b.ne.contains(&0) {
        return Ok(());
    }
    let fast = f32_rows(&a) && f32_rows(&b) && f32_rows(&dst);
    ctx.pool.for_ranges(dst.nrows(), min_rows(ne0), &|rows| {
        let mut buf = RowBuf::take(if fast { 0 } else { ne0 + nb0 });
        let (ta, tb) = buf.split_at_mut(if fast { 0 } else { ne0 });
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            let (j1, j2, j3) = (i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
            // SAFETY: (i1, i2, i3) is within dst's and a's (equal) shapes,
            // (j1, j2, j3) within b's; rows are `ne0` (`nb0`) elements long,
            // dense and aligned on the fast path; each thread writes its own
            // dst rows.
            unsafe {
                if fast {
                    let pa = a.row_ptr(i1, i2, i3) as *const f32;
                    let pb = b.row_ptr(j1, j2, j3) as *const f32;
                    let pd = dst.row_ptr(i1, i2, i3) as *mut f32;
                    if nb0 == ne0 {
                        apply(op, pd, pa, pb, ne0);
                    } else if nb0 == 1 {
                        apply_scalar(op, pd, pa, *pb, ne0);
                    } else {
                        let mut k = 0;
                        while k < ne0 {
                            apply(op, pd.add(k), pa.add(k), pb, nb0);
                            k += nb0;
                        }
                    }
                } else {
                    load_row(&a, i1, i2, i3, ta);
                    load_row_at(&b, 0, j1, j2, j3, tb);
                    let (pa, pb) = (ta.as_mut_ptr(), tb.as_ptr());
                    let mut k = 0;
                    while k < ne0 {
                        apply(op, pa.add(k), pa.add(k), pb, nb0);
                        k += nb0;
                    }
                    store_row(&dst, i1, i2, i3, ta);
                }
            }
        }
    });
    Ok(())
}

/// `scale`, `sqr`, `sqrt`.
pub(super) fn map(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    match ctx.g.tensor(node).op {
        Op::Scale { s, b } => {
            let (s, b) = (s.get(), b.get());
            if b == 0.0 {
                map_unary(ctx, node, move |x| x * s)
            } else {
                map_unary(ctx, node, move |x| x * s + b)
            }
        }
        Op::Sqr => map_unary(ctx, node, |x| x * x),
        _ => map_unary(ctx, node, |x| x.sqrt()),
    }
}
