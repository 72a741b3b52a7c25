//! `set_rows(a, b, idx)`: write the F32 rows of `b` into `a` (F32, F16 or
//! BF16, any strides; or a block type such as Q8_0/Q4_0, each row
//! quantized whole with the reference quantizer, as ggml) at the I32/I64 row indices `idx`, broadcast over dims 2
//! and 3 as ggml: row `i` of plane `(i2, i3)` of `b` goes to row
//! `idx[i, i2 % idx.ne1, i3 % idx.ne2]` of plane `(i2, i3)` of `a`.
//!
//! Every index is checked before anything is written: one out of range is an
//! `InvalidInput` error naming it. Duplicate indices (within one index row)
//! are written in order on one thread, so the last row wins.

use super::compute_ctx::ComputeCtx;
use super::copy::{is_float, load_row, min_rows, store_row};
use super::quant_rows::tensor_block_rows;
use crate::backend::BackendError;
use crate::cpu::scratch::{with_scratch, RowBuf};
use crate::cpu::view::TView;
use crate::graph::Graph;
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// Float dst (or a block type with whole blocks per row, dense in the row),
/// F32 rows, I32/I64 indices with ggml's shapes.
pub(super) fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let (b, c) = (g.tensor(t.src[1]), g.tensor(t.src[2]));
    (is_float(t.ty) || tensor_block_rows(t))
        && b.ty == GgmlType::F32
        && matches!(c.ty, GgmlType::I32 | GgmlType::I64)
        && shapes_ok(&t.ne, &b.ne, &c.ne)
}

fn shapes_ok(a: &[i64; 4], b: &[i64; 4], c: &[i64; 4]) -> bool {
    a[0] == b[0]
        && a[2] == b[2]
        && a[3] == b[3]
        && b[1] == c[0]
        && c[1] > 0
        && c[2] > 0
        && b[2] % c[1] == 0
        && b[3] % c[2] == 0
        && c[3] == 1
}

/// # Safety
/// Coordinates within `c`'s shape; `c` is I32 or I64.
unsafe fn index(c: &TView, i0: usize, i1: usize, i2: usize) -> i64 {
    let p = c.elem_ptr(i0, i1, i2, 0);
    match c.ty {
        GgmlType::I64 => (p as *const i64).read_unaligned(),
        _ => (p as *const i32).read_unaligned() as i64,
    }
}

/// Compute a `set_rows` node.
pub(super) fn set_rows(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    if !supports(ctx.g, node) {
        return Err(BackendError::Unsupported(format!(
            "set_rows '{}': types or shapes",
            ctx.g.tensor(node).name
        )));
    }
    let (dst, src) = ctx.views(node)?;
    let (b, c) = (src[1], src[2]);
    let n_dst_rows = dst.ne[1] as i64;
    // validate every index, and look for duplicates within an index row
    // (sorted in this thread's scratch memory: a decode's KV store
    // allocates nothing)
    let n_idx = c.ne[0];
    let mut dup = false;
    let checked = with_scratch(n_idx * std::mem::size_of::<i64>(), |buf| {
        let seen: &mut [i64] = bytemuck::cast_slice_mut(buf);
        for i12 in 0..c.ne[2] {
            for i11 in 0..c.ne[1] {
                for (i10, slot) in seen.iter_mut().enumerate() {
                    // SAFETY: coordinates within c's shape.
                    let v = unsafe { index(&c, i10, i11, i12) };
                    if v < 0 || v >= n_dst_rows {
                        return Err(BackendError::InvalidInput(format!(
                            "set_rows '{}': index {v} at [{i10}, {i11}, {i12}] of '{}' is out of range for {} rows",
                            ctx.g.tensor(node).name,
                            ctx.g.tensor(ctx.g.tensor(node).src[2]).name,
                            n_dst_rows
                        )));
                    }
                    *slot = v;
                }
                seen.sort_unstable();
                dup |= seen.windows(2).any(|w| w[0] == w[1]);
            }
        }
        Ok(())
    });
    checked?;
    let ne0 = b.ne[0];
    let nr = b.nrows();
    let body = |rows: std::ops::Range<usize>| {
        let mut x = RowBuf::take(ne0);
        for r in rows {
            let (i, i02, i03) = b.row_coords(r);
            // SAFETY: (i, i02 % c.ne1, i03 % c.ne2) within c's shape; the
            // index was validated above, and (i02, i03) is within dst's
            // planes (equal to b's by `supports`).
            unsafe {
                let i1 = index(&c, i, i02 % c.ne[1], i03 % c.ne[2]) as usize;
                load_row(&b, i, i02, i03, &mut x[..]);
                store_row(&dst, i1, i02, i03, &x);
            }
        }
    };
    if dup {
        body(0..nr);
    } else {
        ctx.pool.for_ranges(nr, min_rows(ne0), &body);
    }
    Ok(())
}
