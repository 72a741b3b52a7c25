//! `mul_mat`: the product of a weight matrix (broadcast over `b`'s outer
//! dimensions) with activation columns, through the `vec_dot` engine, or
//! the transposed product when `a` is a transposed float view.

use super::engine::{
    acts_scratch_bytes, check_shapes, dot_block, group_col, kernels, plan_tasks, prepare_acts,
    run_tasks, supports_pair, with_plan, Task,
};
use super::gemm::GemmType;
use super::transposed;
use crate::backend::BackendError;
use crate::cpu::ops::compute_ctx::ComputeCtx;
use crate::cpu::scratch::with_scratch;
use crate::graph::Graph;
use crate::tensor::TensorId;
use crate::types::GgmlType;

pub(crate) fn supports_mul_mat(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let (a, b) = (g.tensor(t.src[0]), g.tensor(t.src[1]));
    if transposed::is_transposed(a.ty, a.nb) {
        return transposed::supports(g, node);
    }
    t.ty == GgmlType::F32 && t.rows_contiguous() && supports_pair(a.ty, a.nb[0], b.ty, a.ne[0])
}

/// `dst = mul_mat(a, b)`.
pub(crate) fn mul_mat(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let (dst, src) = ctx.views(node)?;
    let (a, b) = (src[0], src[1]);
    let name = &ctx.g.tensor(node).name;
    if transposed::is_transposed(a.ty, a.nb) {
        return transposed::mul_mat(ctx, name, &dst, &a, &b);
    }
    let kr = kernels(a.ty)
        .filter(|_| supports_pair(a.ty, a.nb[0], b.ty, a.ne[0] as i64))
        .filter(|_| dst.ty == GgmlType::F32 && dst.rows_contiguous())
        .ok_or_else(|| {
            BackendError::Unsupported(format!(
                "mul_mat '{name}': weights {} (nb0 {}), activations {}, result {} on {}",
                a.ty, a.nb[0], b.ty, dst.ty, ctx.backend
            ))
        })?;
    let k = a.ne[0];
    check_shapes(name, &a, &b, &dst)?;
    if dst.ne.contains(&0) {
        return Ok(());
    }
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    let nth = ctx.pool.n_threads();
    with_plan(|plan| {
        with_scratch(acts_scratch_bytes(&b, kr, nth), |scratch| {
            let acts = prepare_acts(ctx.pool, &b, kr, scratch);
            // one group per weight matrix (i02, i03); its columns are every
            // (i11, i12, i13) with i12 / r2 == i02 and i13 / r3 == i03, so
            // heads sharing a matrix (GQA) share its passes over the weights
            let n_groups = a.ne[2] * a.ne[3];
            let cols_per_group = b.ne[1] * r2 * r3;
            plan.group_cols.clear();
            plan.group_cols.resize(n_groups, cols_per_group);
            let w_bytes = a.ty.row_size(k as u64).unwrap_or(0);
            plan_tasks(
                &mut plan.tasks,
                a.ne[1],
                &plan.group_cols,
                w_bytes,
                acts.row_bytes,
                nth,
            );
            let work = a.ne[1] * w_bytes * n_groups + b.nrows() * acts.row_bytes;
            let vec_dot = kr.w.vec_dot;
            let gemm = GemmType::select(a.ty, kr.act.ty, k);
            let tasks = &plan.tasks;
            run_tasks(ctx.pool, tasks, work, &|t: &Task| {
                let (i02, i03) = (t.group % a.ne[2], t.group / a.ne[2]);
                let col = |j: usize| {
                    let (i11, i12, i13) = group_col(j, b.ne[1], (i02, i03), (r2, r3));
                    (acts.row(i11, i12, i13), dst.row_ptr(i11, i12, i13))
                };
                // SAFETY: every index is within the views' `ne` (checked above
                // against dst and b; i02 < a.ne2, i03 < a.ne3), rows of `a` are
                // dense (`supports_pair`), the activations were sized for `b`,
                // and each (row, column) of dst belongs to exactly one task.
                unsafe {
                    dot_block(
                        gemm,
                        vec_dot,
                        kr.w.vec_dot_cols,
                        kr.w.gemm,
                        k,
                        |r| a.row_ptr(r, i02, i03),
                        w_bytes,
                        t.rows.clone(),
                        col,
                        acts.row_bytes,
                        t.cols.clone(),
                    )
                }
            });
        });
    });
    Ok(())
}
