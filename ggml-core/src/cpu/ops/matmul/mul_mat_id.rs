//! `mul_mat_id`: each token's selected experts applied to its activations,
//! with rows grouped by expert (ggml's `matrix_row_counts` / `matrix_rows`)
//! so each used expert's weights stream through once per op.

use super::engine::{
    acts_scratch_bytes, dot_block, invalid, kernels, plan_tasks, prepare_acts, run_tasks,
    supports_pair, with_plan, Plan, Task,
};
use super::gemm::GemmType;
use crate::backend::BackendError;
use crate::cpu::ops::compute_ctx::ComputeCtx;
use crate::cpu::scratch::with_scratch;
use crate::graph::Graph;
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// The id that marks a slot another op computes (hybrid placement: a
/// layer's experts split over two `mul_mat_id`s whose outputs are added):
/// its output row is an exact zero.
pub const SKIP_ID: i32 = -1;

pub(crate) fn supports_mul_mat_id(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let (a, b, ids) = (g.tensor(t.src[0]), g.tensor(t.src[1]), g.tensor(t.src[2]));
    t.ty == GgmlType::F32
        && t.rows_contiguous()
        && ids.ty == GgmlType::I32
        && supports_pair(a.ty, a.nb[0], b.ty, a.ne[0])
}

/// `dst[:, e, t] = as[:, :, ids[e, t]]ᵀ · b[:, e % b.ne1, t]`.
pub(crate) fn mul_mat_id(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let (dst, src) = ctx.views(node)?;
    let (a, b, ids) = (src[0], src[1], src[2]);
    let t = ctx.g.tensor(node);
    let name = &t.name;
    let ids_name = &ctx.g.tensor(t.src[2]).name;
    let kr = kernels(a.ty)
        .filter(|_| supports_pair(a.ty, a.nb[0], b.ty, a.ne[0] as i64))
        .filter(|_| dst.ty == GgmlType::F32 && dst.rows_contiguous() && ids.ty == GgmlType::I32)
        .ok_or_else(|| {
            BackendError::Unsupported(format!(
                "mul_mat_id '{name}': weights {} (nb0 {}), activations {}, ids {}, result {} on {}",
                a.ty, a.nb[0], b.ty, ids.ty, dst.ty, ctx.backend
            ))
        })?;
    let (k, m, n_expert) = (a.ne[0], a.ne[1], a.ne[2]);
    let (n_used, n_tokens) = (ids.ne[0], ids.ne[1]);
    let n_b1 = b.ne[1];
    if b.ne[0] != k
        || a.ne[3] != 1
        || b.ne[3] != 1
        || ids.ne[2] != 1
        || ids.ne[3] != 1
        || b.ne[2] != n_tokens
        || n_b1 == 0
        || !n_used.is_multiple_of(n_b1)
        || dst.ne != [m, n_used, n_tokens, 1]
    {
        return Err(invalid(format!(
            "mul_mat_id '{name}': shapes as {:?}, b {:?}, ids {:?}, dst {:?}",
            a.ne, b.ne, ids.ne, dst.ne
        )));
    }
    if dst.ne.contains(&0) {
        return Ok(());
    }

    let nth = ctx.pool.n_threads();
    with_plan(|plan| {
        let Plan {
            tasks,
            group_cols,
            counts,
            fill,
            flat,
            pairs,
            used,
        } = plan;
        // validate the ids and group the (slot, token) pairs by expert
        counts.clear();
        counts.resize(n_expert + 1, 0);
        flat.clear();
        for tok in 0..n_tokens {
            for e in 0..n_used {
                // SAFETY: within `ids.ne`; the type is I32 (checked above).
                let id = unsafe { ids.get_i32(e, tok, 0, 0) };
                if id == SKIP_ID {
                    // not this op's slot (hybrid placement): an exact zero
                    // SAFETY: (e, tok) is within dst (shape checked above),
                    // whose rows are contiguous F32 of m elements.
                    unsafe { std::ptr::write_bytes(dst.row_ptr(e, tok, 0) as *mut f32, 0, m) };
                    continue;
                }
                if id < 0 || id as usize >= n_expert {
                    return Err(invalid(format!(
                        "mul_mat_id '{name}': expert id {id} at ids[{e}, {tok}] of '{ids_name}' \
                         is outside 0..{n_expert} (and not -1, the skipped slot)"
                    )));
                }
                counts[id as usize + 1] += 1;
                flat.push((id as usize, e, tok));
            }
        }
        // counting sort: pairs of expert x at offsets start[x]..start[x + 1]
        for x in 0..n_expert {
            counts[x + 1] += counts[x];
        }
        let start = &*counts;
        fill.clear();
        fill.extend_from_slice(start);
        pairs.clear();
        pairs.resize(flat.len(), (0, 0));
        for &(x, e, tok) in flat.iter() {
            pairs[fill[x]] = (e, tok);
            fill[x] += 1;
        }
        used.clear();
        used.extend((0..n_expert).filter(|&x| start[x + 1] > start[x]));
        group_cols.clear();
        group_cols.extend(used.iter().map(|&x| start[x + 1] - start[x]));

        with_scratch(acts_scratch_bytes(&b, kr, nth), |scratch| {
            let acts = prepare_acts(ctx.pool, &b, kr, scratch);
            let w_bytes = a.ty.row_size(k as u64).unwrap_or(0);
            plan_tasks(tasks, m, group_cols, w_bytes, acts.row_bytes, nth);
            let work = m * w_bytes * used.len() + b.nrows() * acts.row_bytes;
            let vec_dot = kr.w.vec_dot;
            let gemm = GemmType::select(a.ty, kr.act.ty, k);
            let (pairs, used) = (&*pairs, &*used);
            run_tasks(ctx.pool, tasks, work, &|t: &Task| {
                let x = used[t.group];
                let mine = &pairs[start[x]..start[x + 1]];
                let col = |j: usize| {
                    let (e, tok) = mine[j];
                    (acts.row(e % n_b1, tok, 0), dst.row_ptr(e, tok, 0))
                };
                // SAFETY: x < n_expert (validated), rows < m = a.ne1, each
                // (e, tok) is within b (e % n_b1, tok < b.ne2) and dst; a's
                // rows are dense; each (row, e, tok) of dst belongs to one
                // task, since every (e, tok) appears once in `pairs`.
                unsafe {
                    dot_block(
                        gemm,
                        vec_dot,
                        kr.w.vec_dot_cols,
                        kr.w.gemm,
                        k,
                        |r| a.row_ptr(r, x, 0),
                        w_bytes,
                        t.rows.clone(),
                        col,
                        acts.row_bytes,
                        t.cols.clone(),
                    )
                }
            });
        });
        Ok(())
    })
}
