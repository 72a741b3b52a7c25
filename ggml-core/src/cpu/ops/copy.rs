//! Copies and type conversion: `dup`, `cont`, `cpy`, plus the row
//! load/store helpers (any strides, F32/F16/BF16 to and from f32 scratch;
//! whole rows of block types through `quant_rows`) that the row-wise
//! kernels of the other families share.
//!
//! Copies into or out of a block type (a quantized KV cache) go row by
//! row, each row quantized or dequantized whole; a copy between two
//! tensors of one block type moves whole blocks.

use super::compute_ctx::ComputeCtx;
use super::quant_rows::{block_rows, load_qrow, store_qrow, tensor_block_rows};
use crate::backend::BackendError;
use crate::cpu::scratch::RowBuf;
use crate::cpu::view::TView;
use crate::graph::Graph;
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// F32, F16 or BF16: the types the row helpers convert.
pub(super) fn is_float(t: GgmlType) -> bool {
    matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// Rows per thread so that a thread gets at least ~16K elements: decode
/// runs thousands of tiny ops, where waking workers costs more than the work.
pub(super) fn min_rows(ne0: usize) -> usize {
    (16384 / ne0.max(1)).max(1)
}

/// Whether a view can be walked as `f32` through raw pointers: F32, aligned
/// base and strides, dense rows.
pub(super) fn f32_rows(v: &TView) -> bool {
    v.ty == GgmlType::F32
        && (v.ptr as usize).is_multiple_of(4)
        && v.nb.iter().all(|&s| s.is_multiple_of(4))
        && v.nb[0] == 4
}

/// Read `out.len()` elements of row `(i1, i2, i3)` of a float view, starting at
/// element `i0`, as f32.
///
/// # Safety
/// `(i1, i2, i3)` must be within `v.ne` and `i0 + out.len() <= v.ne[0]`.
pub(super) unsafe fn load_row_at(
    v: &TView,
    i0: usize,
    i1: usize,
    i2: usize,
    i3: usize,
    out: &mut [f32],
) {
    debug_assert!(i0 + out.len() <= v.ne[0]);
    let base = v.row_ptr(i1, i2, i3).wrapping_add(i0 * v.nb[0]);
    let s = v.nb[0];
    match v.ty {
        GgmlType::F32 => {
            if s == 4 {
                std::ptr::copy_nonoverlapping(
                    base as *const u8,
                    out.as_mut_ptr() as *mut u8,
                    out.len() * 4,
                );
            } else {
                for (k, o) in out.iter_mut().enumerate() {
                    *o = (base.add(k * s) as *const f32).read_unaligned();
                }
            }
        }
        GgmlType::F16 => {
            for (k, o) in out.iter_mut().enumerate() {
                *o =
                    half::f16::from_bits((base.add(k * s) as *const u16).read_unaligned()).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (k, o) in out.iter_mut().enumerate() {
                *o = half::bf16::from_bits((base.add(k * s) as *const u16).read_unaligned())
                    .to_f32();
            }
        }
        GgmlType::I32 => {
            for (k, o) in out.iter_mut().enumerate() {
                *o = (base.add(k * s) as *const i32).read_unaligned() as f32;
            }
        }
        _ => out.fill(f32::NAN),
    }
}

/// Read a whole row as f32 (see [`load_row_at`]); a block type is
/// dequantized (`out` a whole number of blocks, else it reads as NaN).
///
/// # Safety
/// `(i1, i2, i3)` within `v.ne`, `out.len() <= v.ne[0]`; for a block type,
/// blocks dense in the row.
pub(super) unsafe fn load_row(v: &TView, i1: usize, i2: usize, i3: usize, out: &mut [f32]) {
    if v.ty.is_quantized() {
        if !load_qrow(v, i1, i2, i3, out) {
            out.fill(f32::NAN);
        }
        return;
    }
    load_row_at(v, 0, i1, i2, i3, out)
}

/// Write `src` into row `(i1, i2, i3)` of a float view from element 0,
/// converting to its type (round to nearest even for F16/BF16); a block
/// type is quantized with its reference quantizer (`src` a whole number of
/// blocks, else nothing is written).
///
/// # Safety
/// `(i1, i2, i3)` within `v.ne`, `src.len() <= v.ne[0]`, memory writable,
/// and `src` not overlapping the row; for a block type, blocks dense in
/// the row.
pub(super) unsafe fn store_row(v: &TView, i1: usize, i2: usize, i3: usize, src: &[f32]) {
    debug_assert!(src.len() <= v.ne[0]);
    if v.ty.is_quantized() {
        store_qrow(v, i1, i2, i3, src);
        return;
    }
    let base = v.row_ptr(i1, i2, i3);
    let s = v.nb[0];
    match v.ty {
        GgmlType::F32 => {
            if s == 4 {
                std::ptr::copy_nonoverlapping(src.as_ptr() as *const u8, base, src.len() * 4);
            } else {
                for (k, &x) in src.iter().enumerate() {
                    (base.add(k * s) as *mut f32).write_unaligned(x);
                }
            }
        }
        GgmlType::F16 => {
            for (k, &x) in src.iter().enumerate() {
                (base.add(k * s) as *mut u16).write_unaligned(half::f16::from_f32(x).to_bits());
            }
        }
        GgmlType::BF16 => {
            for (k, &x) in src.iter().enumerate() {
                (base.add(k * s) as *mut u16).write_unaligned(half::bf16::from_f32(x).to_bits());
            }
        }
        GgmlType::I32 => {
            for (k, &x) in src.iter().enumerate() {
                (base.add(k * s) as *mut i32).write_unaligned(x as i32);
            }
        }
        _ => {}
    }
}

/// `dup`/`cont`: same type (any non-quantized type) or F32/F16/BF16
/// conversions; `cpy` the same into `src[1]`'s type and layout. With a
/// block type on either side (ggml's `cpy` into a quantized KV cache, or
/// out of it): blocks dense in each row, whole blocks per row, the other
/// side a float or the same block type, and equal shapes (or a dense float
/// source of another shape, read in the destination's shape). The float
/// side may have any strides.
pub(super) fn supports_copy(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let s = g.tensor(t.src[0]);
    if t.nelements() != s.nelements() {
        return false;
    }
    if t.ty.is_quantized() || s.ty.is_quantized() {
        let side_ok = |x: &crate::tensor::Tensor| tensor_block_rows(x) || is_float(x.ty);
        let types_ok = s.ty == t.ty || is_float(s.ty) || is_float(t.ty);
        let shape_ok = s.ne == t.ne || (is_float(s.ty) && s.is_contiguous());
        return side_ok(t) && side_ok(s) && types_ok && shape_ok;
    }
    if s.ty == t.ty {
        !t.ty.is_quantized()
    } else {
        is_float(s.ty) && is_float(t.ty)
    }
}

/// Element index `k` (in ggml order) to coordinates of a view.
#[inline]
fn coords(ne: &[usize; 4], mut k: usize) -> [usize; 4] {
    let i0 = k % ne[0];
    k /= ne[0];
    let i1 = k % ne[1];
    k /= ne[1];
    let i2 = k % ne[2];
    [i0, i1, i2, k / ne[2]]
}

/// `dup`, `cont`, `cpy`: dst element `k` (in ggml order) takes source element
/// `k`, converted; shapes may differ as long as element counts agree.
pub(super) fn copy(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let (dst, src) = ctx.views(node)?;
    let s = src[0];
    let n = dst.ne.iter().product::<usize>();
    if n != s.ne.iter().product::<usize>() {
        return Err(BackendError::InvalidInput(format!(
            "copy into '{}': element counts differ",
            ctx.g.tensor(node).name
        )));
    }
    if n == 0 {
        return Ok(());
    }
    if dst.ty.is_quantized() || s.ty.is_quantized() {
        return copy_blocks(ctx, node, dst, s);
    }
    // Dense on both sides: copy as one flat row of `n` elements.
    let (dst, s) = if dst.ne != s.ne && dst.is_contiguous() && s.is_contiguous() {
        let flat = |v: TView| TView {
            ne: [n, 1, 1, 1],
            nb: [v.nb[0], n * v.nb[0], n * v.nb[0], n * v.nb[0]],
            ..v
        };
        (flat(dst), flat(s))
    } else {
        (dst, s)
    };
    // Identical shapes, any strides: row by row.
    if dst.ne == s.ne {
        let ne0 = dst.ne[0];
        let same = dst.ty == s.ty;
        let esz = dst.ty.type_size();
        let dense = dst.rows_contiguous() && s.rows_contiguous();
        ctx.pool.for_ranges(dst.nrows(), min_rows(ne0), &|rows| {
            let mut tmp = RowBuf::take(if same { 0 } else { ne0 });
            for r in rows {
                let (i1, i2, i3) = dst.row_coords(r);
                // SAFETY: coordinates within both (equal) shapes; the bytes
                // were range-checked with the views.
                unsafe {
                    if same && dense {
                        std::ptr::copy(s.row_ptr(i1, i2, i3), dst.row_ptr(i1, i2, i3), ne0 * esz);
                    } else if same {
                        for i0 in 0..ne0 {
                            std::ptr::copy(
                                s.elem_ptr(i0, i1, i2, i3),
                                dst.elem_ptr(i0, i1, i2, i3),
                                esz,
                            );
                        }
                    } else {
                        load_row(&s, i1, i2, i3, &mut tmp);
                        store_row(&dst, i1, i2, i3, &tmp);
                    }
                }
            }
        });
        return Ok(());
    }
    // General path: walk dst rows; source elements found by flat index.
    let ne0 = dst.ne[0];
    let esz = dst.ty.type_size();
    let same = dst.ty == s.ty;
    ctx.pool.for_ranges(dst.nrows(), min_rows(ne0), &|rows| {
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            for (i0, k) in (0..ne0).zip(r * ne0..) {
                let c = coords(&s.ne, k);
                // SAFETY: k < n, so `c` is within the source shape; (i0..i3)
                // is within the destination shape.
                unsafe {
                    if same {
                        std::ptr::copy(
                            s.elem_ptr(c[0], c[1], c[2], c[3]),
                            dst.elem_ptr(i0, i1, i2, i3),
                            esz,
                        );
                    } else {
                        let x = s.get_f32(c[0], c[1], c[2], c[3]);
                        dst.set_f32(i0, i1, i2, i3, x);
                    }
                }
            }
        }
    });
    Ok(())
}

/// A copy with a block type on one or both sides, row by row: the same
/// block type moves whole rows of blocks; otherwise each row is read as f32
/// (dequantized or converted) and written (quantized or converted). A dense
/// float source of another shape is read in the destination's shape.
fn copy_blocks(
    ctx: &ComputeCtx<'_>,
    node: TensorId,
    dst: TView,
    s: TView,
) -> Result<(), BackendError> {
    let name = || ctx.g.tensor(node).name.clone();
    let s = if s.ne == dst.ne {
        s
    } else if is_float(s.ty) && s.is_contiguous() {
        let e = s.ty.type_size();
        TView {
            ne: dst.ne,
            nb: [
                e,
                e * dst.ne[0],
                e * dst.ne[0] * dst.ne[1],
                e * dst.ne[0] * dst.ne[1] * dst.ne[2],
            ],
            ..s
        }
    } else {
        return Err(BackendError::InvalidInput(format!(
            "copy into '{}': a block-type copy needs equal shapes",
            name()
        )));
    };
    let ne0 = dst.ne[0];
    for v in [&dst, &s] {
        let ok = if v.ty.is_quantized() {
            block_rows(v.ty, v.nb[0], ne0 as i64)
        } else {
            is_float(v.ty)
        };
        if !ok {
            return Err(BackendError::Unsupported(format!(
                "copy into '{}': {} rows of {ne0} (whole blocks, dense in the row, needed)",
                name(),
                v.ty
            )));
        }
    }
    let same = dst.ty == s.ty;
    let bytes = dst.ty.row_size(ne0 as u64).unwrap_or(0);
    ctx.pool.for_ranges(dst.nrows(), min_rows(ne0), &|rows| {
        let mut tmp = RowBuf::take(if same { 0 } else { ne0 });
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            // SAFETY: coordinates within both (equal) shapes; rows are
            // whole blocks, dense (checked above), and within the ranges
            // checked with the views.
            unsafe {
                if same {
                    std::ptr::copy(s.row_ptr(i1, i2, i3), dst.row_ptr(i1, i2, i3), bytes);
                } else {
                    load_row(&s, i1, i2, i3, &mut tmp);
                    store_row(&dst, i1, i2, i3, &tmp);
                }
            }
        }
    });
    Ok(())
}
