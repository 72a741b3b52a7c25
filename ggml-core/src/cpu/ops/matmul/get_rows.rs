//! `get_rows`: gather rows of any type by I32 ids, as F32 (through the
//! type's `to_float`), or as I32 from an I32 source.

use crate::backend::BackendError;
use crate::cpu::ops::compute_ctx::ComputeCtx;
use crate::cpu::scratch::RowBuf;
use crate::cpu::view::TView;
use crate::graph::Graph;
use crate::quants;
use crate::tensor::TensorId;
use crate::types::GgmlType;

fn is_plain_float(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

pub(crate) fn supports_get_rows(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let (a, ids) = (g.tensor(t.src[0]), g.tensor(t.src[1]));
    if ids.ty != GgmlType::I32 || !t.rows_contiguous() {
        return false;
    }
    match (a.ty, t.ty) {
        (GgmlType::I32, GgmlType::I32) => true,
        (ty, GgmlType::F32) => {
            quants::cpu_traits(ty).is_some() && (a.rows_contiguous() || is_plain_float(ty))
        }
        _ => false,
    }
}

/// Check every id of `ids` against `n_rows`, naming the first bad one.
fn validate_ids(ids: &TView, n_rows: usize, what: &dyn Fn() -> String) -> Result<(), BackendError> {
    for i2 in 0..ids.ne[2] {
        for i1 in 0..ids.ne[1] {
            for i0 in 0..ids.ne[0] {
                // SAFETY: within `ids.ne`; callers checked the type is I32.
                let id = unsafe { ids.get_i32(i0, i1, i2, 0) };
                if id < 0 || id as usize >= n_rows {
                    return Err(BackendError::InvalidInput(format!(
                        "{}: row id {id} at ids[{i0}, {i1}, {i2}] is outside 0..{n_rows}",
                        what()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// `dst[:, i10, i11, i12] = a[:, ids[i10, i11, i12], i11, i12]`.
pub(crate) fn get_rows(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let (dst, src) = ctx.views(node)?;
    let (a, ids) = (src[0], src[1]);
    let t = ctx.g.tensor(node);
    // formatted only for an error (a decode runs this op every layer)
    let what = || {
        format!(
            "get_rows '{}' of '{}' by '{}'",
            t.name,
            ctx.g.tensor(t.src[0]).name,
            ctx.g.tensor(t.src[1]).name
        )
    };
    let n = a.ne[0];
    let tr = quants::cpu_traits(a.ty);
    let kind_ok = ids.ty == GgmlType::I32
        && dst.rows_contiguous()
        && match (a.ty, dst.ty) {
            (GgmlType::I32, GgmlType::I32) => true,
            (ty, GgmlType::F32) => tr.is_some() && (a.rows_contiguous() || is_plain_float(ty)),
            _ => false,
        };
    if !kind_ok {
        return Err(BackendError::Unsupported(format!(
            "{}: {} rows to {} by {} ids on {}",
            what(),
            a.ty,
            dst.ty,
            ids.ty,
            ctx.backend
        )));
    }
    if dst.ne != [n, ids.ne[0], ids.ne[1], ids.ne[2]]
        || ids.ne[3] != 1
        || ids.ne[1] != a.ne[2]
        || ids.ne[2] > a.ne[3]
    {
        return Err(BackendError::InvalidInput(format!(
            "{}: shapes a {:?}, ids {:?}, dst {:?}",
            what(),
            a.ne,
            ids.ne,
            dst.ne
        )));
    }
    validate_ids(&ids, a.ne[1], &what)?;
    let row_bytes = a.ty.row_size(n as u64).unwrap_or(0);
    let dense = a.rows_contiguous();
    ctx.pool.for_ranges(dst.nrows(), 16, &|rows| {
        // one row of f32 per range: `to_float` needs an aligned slice, and
        // dst rows need not be aligned
        let mut tmp = RowBuf::take(if dense { n } else { 0 });
        for r in rows {
            let (i10, i11, i12) = dst.row_coords(r);
            // SAFETY: within `ids.ne`, validated above to lie in 0..a.ne1.
            let i01 = unsafe { ids.get_i32(i10, i11, i12, 0) } as usize;
            let out = dst.row_ptr(i10, i11, i12);
            if a.ty == GgmlType::I32 {
                for i0 in 0..n {
                    // SAFETY: i01 < a.ne1, i11 < a.ne2, i12 < a.ne3 (checked);
                    // dst rows are dense.
                    unsafe {
                        let v = a.get_i32(i0, i01, i11, i12);
                        (out as *mut i32).add(i0).write_unaligned(v);
                    }
                }
            } else if dense {
                // SAFETY: a dense row of `a` (indices checked above).
                let s = unsafe { std::slice::from_raw_parts(a.row_ptr(i01, i11, i12), row_bytes) };
                if let Some(tr) = tr {
                    (tr.to_float)(s, &mut tmp);
                }
                // SAFETY: a dense F32 row of dst, owned by this range.
                unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr() as *const u8, out, n * 4) };
            } else {
                for i0 in 0..n {
                    // SAFETY: as above; plain float type read element-wise.
                    unsafe {
                        let v = a.get_f32(i0, i01, i11, i12);
                        (out as *mut f32).add(i0).write_unaligned(v);
                    }
                }
            }
        }
    });
    Ok(())
}
