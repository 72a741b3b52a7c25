//! Sorting: `argsort` (I32 indices ordering each row) and `top_k` (indices of
//! the `k` largest per row, largest first).
//!
//! ggml sorts with `std::sort`, whose order among equal keys is unspecified;
//! here ties always keep the lower index first (a stable order), in both
//! directions, and NaN sorts above every number.

use std::cell::Cell;
use std::cmp::Ordering;

use super::compute_ctx::ComputeCtx;
use super::copy::{is_float, load_row, min_rows};
use crate::backend::BackendError;
use crate::cpu::scratch::RowBuf;
use crate::graph::Graph;
use crate::op::{Op, SortOrder};
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// Float source of any strides; I32 dst.
pub(super) fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let s = g.tensor(t.src[0]);
    let shape_ok = match t.op {
        Op::TopK { k } => t.ne[0] == k as i64 && k as i64 <= s.ne[0] && t.ne[1..] == s.ne[1..],
        _ => t.ne == s.ne,
    };
    t.ty == GgmlType::I32 && is_float(s.ty) && shape_ok
}

/// A total order on f32 keys: `-0 == +0`, NaN above everything.
#[inline]
fn cmp_key(a: f32, b: f32) -> Ordering {
    match a.partial_cmp(&b) {
        Some(o) => o,
        None => a.is_nan().cmp(&b.is_nan()),
    }
}

/// Indices of `x` in ascending or descending order, ties by lower index.
pub(super) fn argsort_row(x: &[f32], order: SortOrder, idx: &mut Vec<i32>) {
    idx.clear();
    idx.extend(0..x.len() as i32);
    match order {
        SortOrder::Asc => idx.sort_by(|&a, &b| cmp_key(x[a as usize], x[b as usize])),
        SortOrder::Desc => idx.sort_by(|&a, &b| cmp_key(x[b as usize], x[a as usize])),
    }
}

/// Indices of the `k` largest of `x`, largest first, ties by lower index.
pub(super) fn top_k_row(x: &[f32], k: usize, idx: &mut Vec<i32>) {
    idx.clear();
    idx.extend(0..x.len() as i32);
    let cmp = |a: &i32, b: &i32| cmp_key(x[*b as usize], x[*a as usize]).then(a.cmp(b));
    if k < idx.len() {
        if k > 0 {
            idx.select_nth_unstable_by(k - 1, cmp);
        }
        idx.truncate(k);
    }
    idx.sort_unstable_by(cmp);
}

thread_local! {
    static IDX: Cell<Vec<i32>> = const { Cell::new(Vec::new()) };
}

/// Compute `argsort` or `top_k`.
pub(super) fn sort(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let op = ctx.g.tensor(node).op;
    let (dst, src) = ctx.views(node)?;
    let s = src[0];
    let ne0 = s.ne[0];
    let k = dst.ne[0];
    if k > ne0 || dst.ne[1..] != s.ne[1..] {
        return Err(BackendError::InvalidInput(format!(
            "{}: shapes do not match",
            op.name()
        )));
    }
    ctx.pool.for_ranges(s.nrows(), min_rows(ne0 * 8), &|rows| {
        let mut x = RowBuf::take(ne0);
        // this thread's index buffer, kept across ops
        let mut idx = IDX.with(Cell::take);
        for r in rows {
            let (i1, i2, i3) = s.row_coords(r);
            // SAFETY: coordinates within the source shape; `x` is scratch.
            unsafe { load_row(&s, i1, i2, i3, &mut x) };
            match op {
                Op::Argsort(order) => argsort_row(&x, order, &mut idx),
                _ => top_k_row(&x, k, &mut idx),
            }
            for (i0, &v) in idx.iter().take(k).enumerate() {
                // SAFETY: i0 < k = dst.ne[0]; row coordinates within dst.
                unsafe { (dst.elem_ptr(i0, i1, i2, i3) as *mut i32).write_unaligned(v) };
            }
        }
        IDX.with(|c| c.set(idx));
    });
    Ok(())
}
