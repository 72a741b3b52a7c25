//! `add_id`: add a per-expert bias row chosen by I32 ids (gpt-oss).

use crate::backend::BackendError;
use crate::cpu::ops::compute_ctx::ComputeCtx;
use crate::graph::Graph;
use crate::tensor::TensorId;
use crate::types::GgmlType;

pub(crate) fn supports_add_id(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let (a, b, ids) = (g.tensor(t.src[0]), g.tensor(t.src[1]), g.tensor(t.src[2]));
    t.ty == GgmlType::F32
        && a.ty == GgmlType::F32
        && b.ty == GgmlType::F32
        && ids.ty == GgmlType::I32
}

/// `dst[:, i1, i2, i3] = a[:, i1, i2, i3] + b[:, ids[i1, i2]]`.
pub(crate) fn add_id(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let (dst, src) = ctx.views(node)?;
    let (a, b, ids) = (src[0], src[1], src[2]);
    let t = ctx.g.tensor(node);
    // formatted only for an error (a decode runs this op every layer)
    let what = || {
        format!(
            "add_id '{}' (bias '{}', ids '{}')",
            t.name,
            ctx.g.tensor(t.src[1]).name,
            ctx.g.tensor(t.src[2]).name
        )
    };
    if [dst.ty, a.ty, b.ty] != [GgmlType::F32; 3] || ids.ty != GgmlType::I32 {
        return Err(BackendError::Unsupported(format!(
            "{}: types {} + {} by {} ids to {}",
            what(),
            a.ty,
            b.ty,
            ids.ty,
            dst.ty
        )));
    }
    let n = a.ne[0];
    if dst.ne != a.ne || b.ne[0] != n || ids.ne[0] != a.ne[1] || ids.ne[1] != a.ne[2] {
        return Err(BackendError::InvalidInput(format!(
            "{}: shapes a {:?}, b {:?}, ids {:?}, dst {:?}",
            what(),
            a.ne,
            b.ne,
            ids.ne,
            dst.ne
        )));
    }
    let n_rows_b = b.ne[1];
    for i2 in 0..ids.ne[1] {
        for i1 in 0..ids.ne[0] {
            // SAFETY: within `ids.ne`, type I32.
            let id = unsafe { ids.get_i32(i1, i2, 0, 0) };
            if id < 0 || id as usize >= n_rows_b {
                return Err(BackendError::InvalidInput(format!(
                    "{}: id {id} at ids[{i1}, {i2}] is outside 0..{n_rows_b}",
                    what()
                )));
            }
        }
    }
    ctx.pool.for_ranges(dst.nrows(), 16, &|rows| {
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            // SAFETY: indices within each view's `ne`; the id was validated to
            // lie in 0..b.ne1; each dst row is written by one range.
            unsafe {
                let id = ids.get_i32(i1, i2, 0, 0) as usize;
                for i0 in 0..n {
                    let v = a.get_f32(i0, i1, i2, i3) + b.get_f32(i0, id, 0, 0);
                    dst.set_f32(i0, i1, i2, i3, v);
                }
            }
        }
    });
    Ok(())
}
