//! The `vec_dot` engine behind `mul_mat` and `mul_mat_id` (and the
//! transposed product's shared steps): the kernels of a weight type and of
//! its `vec_dot_type`, the activations converted once per op into scratch
//! memory, the tasks (weight rows × activation columns) that threads take
//! from a shared counter, and the inner loop that dots a block of weight
//! rows with a tile of columns, through the type's GEMM when it has one.
//!
//! Data flows: an op checks its shapes ([`check_shapes`]), converts its
//! activations ([`prepare_acts`]), plans tasks ([`plan_tasks`]) and runs
//! them ([`run_tasks`]), each task calling [`dot_block`].

use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::gemm::{self, GemmType};
use crate::backend::BackendError;
use crate::cpu::pool::ThreadPool;
use crate::cpu::scratch::with_tile_scratch;
use crate::cpu::view::TView;
use crate::types::GgmlType;

use crate::quants;
use crate::quants::prefetch::prefetch;

/// Activation columns per tile: each weight row is dotted with this many
/// columns back to back (in one `vec_dot_cols` call where the type has one).
pub(super) const TILE_COLS: usize = quants::VEC_DOT_COLS_MAX;

/// Fewest columns of a task that go through the type's GEMM (packed
/// panels); fewer are dotted one by one. The bits are the same either way.
pub(super) const GEMM_MIN_COLS: usize = 3;

/// A raw pointer that may cross to the pool's threads; kernels write
/// disjoint parts of what it points to.
#[derive(Clone, Copy)]
pub(super) struct SyncPtr(*mut u8);
// SAFETY: see the type's doc; every use writes disjoint bytes per thread.
unsafe impl Send for SyncPtr {}
// SAFETY: as above.
unsafe impl Sync for SyncPtr {}

impl SyncPtr {
    /// The pointer (a method, so closures capture the `Sync` wrapper).
    fn get(self) -> *mut u8 {
        self.0
    }
}

/// The kernels of a weight type, and those of its `vec_dot_type`.
#[derive(Clone, Copy)]
pub(super) struct Kernels {
    pub(super) w: &'static quants::CpuTypeTraits,
    pub(super) act: &'static quants::CpuTypeTraits,
}

pub(super) fn kernels(ty: GgmlType) -> Option<Kernels> {
    let w = quants::cpu_traits(ty)?;
    let act = quants::cpu_traits(w.vec_dot_type)?;
    Some(Kernels { w, act })
}

/// Activation types the conversion reads (exactly, through f32).
pub(super) fn is_float_act(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// Whether weights `a` with activations `b` of length `k` can be multiplied.
pub(super) fn supports_pair(a_ty: GgmlType, a_nb0: usize, b_ty: GgmlType, k: i64) -> bool {
    let Some(kr) = kernels(a_ty) else {
        return false;
    };
    a_nb0 == a_ty.type_size()
        && is_float_act(b_ty)
        && k >= 0
        && (k as u64).is_multiple_of(kr.act.ty.blck_size() as u64)
        && (k as u64).is_multiple_of(a_ty.blck_size() as u64)
}

pub(super) fn invalid(what: String) -> BackendError {
    BackendError::InvalidInput(what)
}

/// Activations in `vec_dot_type`: row `(i1, i2, i3)` starts at
/// `base + i1*nb[1] + i2*nb[2] + i3*nb[3]` and holds `row_bytes` bytes.
#[derive(Clone, Copy)]
pub(super) struct Acts {
    pub(super) base: SyncPtr,
    pub(super) nb: [usize; 4],
    pub(super) row_bytes: usize,
}

impl Acts {
    pub(super) fn row(&self, i1: usize, i2: usize, i3: usize) -> *const u8 {
        self.base
            .get()
            .wrapping_add(i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3])
    }
}

/// Scratch bytes needed to convert `b` to the activation type of `kr`
/// (0 when `b` is used as it is).
pub(super) fn acts_scratch_bytes(b: &TView, kr: Kernels, nth: usize) -> usize {
    if b.ty == kr.act.ty && b.rows_contiguous() {
        return 0;
    }
    let row = kr.act.ty.row_size(b.ne[0] as u64).unwrap_or(0);
    (b.nrows() * row).next_multiple_of(64) + nth * b.ne[0] * 4
}

/// Convert every row of `b` into `vec_dot_type` in `scratch` (laid out
/// densely), once, in parallel; or use `b` in place when it already is.
pub(super) fn prepare_acts(pool: &ThreadPool, b: &TView, kr: Kernels, scratch: &mut [u8]) -> Acts {
    let k = b.ne[0];
    let row_bytes = kr.act.ty.row_size(k as u64).unwrap_or(0);
    if b.ty == kr.act.ty && b.rows_contiguous() {
        return Acts {
            base: SyncPtr(b.ptr),
            nb: b.nb,
            row_bytes,
        };
    }
    let nrows = b.nrows();
    let conv_bytes = (nrows * row_bytes).next_multiple_of(64);
    let base = SyncPtr(scratch.as_mut_ptr());
    let from_float = kr.act.from_float;
    let bv = *b;
    let work = |ith: usize, nth: usize| {
        let per = nrows.div_ceil(nth);
        let rows = (ith * per).min(nrows)..((ith + 1) * per).min(nrows);
        if rows.is_empty() {
            return;
        }
        // SAFETY: thread `ith` owns f32 slot `ith` after the converted rows
        // and the converted rows in `rows`; the scratch holds both
        // (`acts_scratch_bytes`).
        let tmp = unsafe {
            std::slice::from_raw_parts_mut(base.get().add(conv_bytes + ith * k * 4) as *mut f32, k)
        };
        for r in rows {
            let (i1, i2, i3) = bv.row_coords(r);
            let p = bv.row_ptr(i1, i2, i3);
            // SAFETY: row `r` of the converted block, disjoint per thread.
            let out =
                unsafe { std::slice::from_raw_parts_mut(base.get().add(r * row_bytes), row_bytes) };
            if bv.ty == GgmlType::F32 && bv.rows_contiguous() && (p as usize).is_multiple_of(4) {
                // SAFETY: a dense, aligned F32 row of `k` elements inside `bv`.
                from_float(
                    unsafe { std::slice::from_raw_parts(p as *const f32, k) },
                    out,
                );
                continue;
            }
            for (i0, t) in tmp.iter_mut().enumerate() {
                // SAFETY: indices within `bv.ne`.
                *t = unsafe { bv.get_f32(i0, i1, i2, i3) };
            }
            from_float(tmp, out);
        }
    };
    if nrows * k < 1 << 14 {
        work(0, 1);
    } else {
        // the f32 slots are sized for the pool's thread count
        pool.run(&work);
    }
    Acts {
        base,
        nb: [
            row_bytes,
            row_bytes,
            row_bytes * b.ne[1],
            row_bytes * b.ne[1] * b.ne[2],
        ],
        row_bytes,
    }
}

/// One unit of work: rows `rows` of weight matrix `group` against its
/// columns `cols`.
#[derive(Clone, Debug)]
pub(super) struct Task {
    pub(super) group: usize,
    pub(super) rows: Range<usize>,
    pub(super) cols: Range<usize>,
}

/// The per-op bookkeeping of `mul_mat` and `mul_mat_id` (task list, expert
/// grouping), kept per thread and reused so that decoding allocates nothing
/// per product once the vectors have grown.
#[derive(Default)]
pub(super) struct Plan {
    pub(super) tasks: Vec<Task>,
    pub(super) group_cols: Vec<usize>,
    /// `mul_mat_id`: per expert, then prefix sums (`start`).
    pub(super) counts: Vec<usize>,
    /// `mul_mat_id`: the next free slot of each expert while sorting.
    pub(super) fill: Vec<usize>,
    /// `mul_mat_id`: the (expert, slot, token) triples in id order.
    pub(super) flat: Vec<(usize, usize, usize)>,
    /// `mul_mat_id`: the (slot, token) pairs grouped by expert.
    pub(super) pairs: Vec<(usize, usize)>,
    /// `mul_mat_id`: the experts with at least one pair.
    pub(super) used: Vec<usize>,
}

thread_local! {
    static PLAN: RefCell<Plan> = RefCell::new(Plan::default());
}

/// Run `f` with this thread's [`Plan`] (a fresh one when re-entered).
pub(super) fn with_plan<R>(f: impl FnOnce(&mut Plan) -> R) -> R {
    let mut plan = PLAN.with(|c| c.take());
    let r = f(&mut plan);
    PLAN.with(|c| c.replace(plan));
    r
}

/// Cut `n_rows` weight rows × `cols[g]` columns of each group into
/// `tasks` (cleared first).
pub(super) fn plan_tasks(
    tasks: &mut Vec<Task>,
    n_rows: usize,
    group_cols: &[usize],
    row_bytes: usize,
    col_bytes: usize,
    nth: usize,
) {
    tasks.clear();
    let max_cols = group_cols.iter().copied().max().unwrap_or(0);
    // columns per task: a block that stays in L2 (~1 MiB), whole tiles
    // (multiples of 24 = whole tiles of both the vec_dot loop and `gemm`)
    let cc = if max_cols <= 24 {
        24
    } else {
        ((1 << 20) / col_bytes.max(1) / 24 * 24).clamp(24, 264)
    };
    // rows per task: a block that stays in L2 across the column tiles
    let mut rc = ((256 << 10) / row_bytes.max(1)).clamp(4, 256);
    let count = |rc: usize| -> usize {
        group_cols
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| n_rows.div_ceil(rc) * c.div_ceil(cc))
            .sum()
    };
    // enough tasks to balance threads that get interrupted
    while rc > 1 && count(rc) < 8 * nth {
        rc /= 2;
    }
    if rc > 4 {
        rc -= rc % gemm::RM; // whole register tiles
    }
    tasks.reserve(count(rc));
    for (g, &c) in group_cols.iter().enumerate() {
        for r0 in (0..n_rows).step_by(rc) {
            for c0 in (0..c).step_by(cc) {
                tasks.push(Task {
                    group: g,
                    rows: r0..(r0 + rc).min(n_rows),
                    cols: c0..(c0 + cc).min(c),
                });
            }
        }
    }
}

/// Run `tasks` on the pool, each thread taking the next from a shared
/// counter; small jobs run on the caller's thread.
pub(super) fn run_tasks(
    pool: &ThreadPool,
    tasks: &[Task],
    work_bytes: usize,
    f: &(dyn Fn(&Task) + Sync),
) {
    if pool.n_threads() == 1 || tasks.len() == 1 || work_bytes < 1 << 16 {
        tasks.iter().for_each(f);
        return;
    }
    let next = AtomicUsize::new(0);
    pool.run(&|_, _| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        match tasks.get(i) {
            Some(t) => f(t),
            None => break,
        }
    });
}

/// Weight rows ahead of the one being multiplied whose bytes are requested
/// early, in the prompt paths (GEMM panels, column tiles): a task's rows
/// come from DRAM for its first panel. Generation (one column) leaves it to
/// the AVX2 `vec_dot` kernels, which ask for the bytes a few KiB ahead
/// block by block (`quants::prefetch::PREFETCH_AHEAD`): a whole row asked for
/// at once stalled on the full miss buffers.
pub(super) const PREFETCH_ROWS: usize = 2;

/// The inner loop: `dst(r, c) = vec_dot(weight row r, column c)` for rows
/// `rows` × columns `cols`, a weight row reused for [`TILE_COLS`] columns.
///
/// # Safety
/// `w_row(r)` must point at `w_bytes` readable bytes for each `r` in `rows`,
/// `col(c)` at an activation row of `act_bytes` readable bytes and a
/// writable f32 destination column whose element `r` is at `+ r * 4`, for
/// each `c` in `cols`; no other thread may write those destinations.
#[inline]
pub(super) unsafe fn dot_block(
    gemm: Option<GemmType>,
    vec_dot: fn(usize, &[u8], &[u8]) -> f32,
    vec_dot_cols: Option<quants::VecDotCols>,
    qgemm: Option<&quants::QGemm>,
    k: usize,
    w_row: impl Fn(usize) -> *const u8,
    w_bytes: usize,
    rows: Range<usize>,
    col: impl Fn(usize) -> (*const u8, *mut u8),
    act_bytes: usize,
    cols: Range<usize>,
) {
    if gemm == Some(GemmType::F16) && cols.len() <= gemm::RN {
        // one column tile (a decode): each weight row enters one tile, so
        // widening it first would only add a pass over it; the F16 tiles
        // convert in registers, the same fused multiply-adds on the same
        // values as the widened F32 tiles below (the same bits)
        let n = cols.len();
        let mut ys = [std::ptr::null::<u8>(); gemm::RN];
        let mut ds = [std::ptr::null_mut::<f32>(); gemm::RN];
        for j in 0..n {
            let (y, d) = col(cols.start + j);
            ys[j] = y;
            ds[j] = d as *mut f32;
        }
        let mut r0 = rows.start;
        while r0 < rows.end {
            let m = (rows.end - r0).min(gemm::RM);
            let mut xs = [std::ptr::null::<u8>(); gemm::RM];
            for (i, x) in xs.iter_mut().enumerate().take(m) {
                *x = w_row(r0 + i);
            }
            let mut out = [[0f32; gemm::RN]; gemm::RM];
            gemm::tile(GemmType::F16, k, &xs, m, &ys, n, &mut out);
            for (i, o) in out.iter().enumerate().take(m) {
                for (j, v) in o.iter().enumerate().take(n) {
                    ds[j].add(r0 + i).write_unaligned(*v);
                }
            }
            r0 += m;
        }
        return;
    }
    if gemm == Some(GemmType::F16) {
        // widen the task's columns once and each block of rows once, then
        // run the F32 tiles on them (the same bits as F16 tiles)
        let n_cols = cols.len();
        let col_f32 = k * 4;
        let ptr_bytes = n_cols * size_of::<usize>();
        with_tile_scratch(ptr_bytes + n_cols * col_f32 + gemm::RM * col_f32, |buf| {
            let (dsts, rest) = buf.split_at_mut(ptr_bytes);
            let dsts = dsts.as_mut_ptr() as *mut *mut f32;
            let (cb, rb) = rest.split_at_mut(n_cols * col_f32);
            let (cb, rb) = (cb.as_mut_ptr(), rb.as_mut_ptr());
            for j in 0..n_cols {
                let (y, d) = col(cols.start + j);
                gemm::widen_f16(k, y, cb.add(j * col_f32) as *mut f32);
                // the scratch is 64-byte aligned and `ptr_bytes` pointers long
                dsts.add(j).write(d as *mut f32);
            }
            let mut r0 = rows.start;
            while r0 < rows.end {
                let m = (rows.end - r0).min(gemm::RM);
                let mut xs = [std::ptr::null::<u8>(); gemm::RM];
                for (i, x) in xs.iter_mut().enumerate().take(m) {
                    let dst = rb.add(i * col_f32);
                    gemm::widen_f16(k, w_row(r0 + i), dst as *mut f32);
                    *x = dst;
                }
                let mut c0 = 0;
                while c0 < n_cols {
                    let n = (n_cols - c0).min(gemm::RN);
                    let mut ys = [std::ptr::null::<u8>(); gemm::RN];
                    for (j, y) in ys.iter_mut().enumerate().take(n) {
                        *y = cb.add((c0 + j) * col_f32);
                    }
                    let mut out = [[0f32; gemm::RN]; gemm::RM];
                    gemm::tile(GemmType::F32, k, &xs, m, &ys, n, &mut out);
                    for (i, o) in out.iter().enumerate().take(m) {
                        for (j, v) in o.iter().enumerate().take(n) {
                            dsts.add(c0 + j).read().add(r0 + i).write_unaligned(*v);
                        }
                    }
                    c0 += n;
                }
                r0 += m;
            }
        });
        return;
    }
    if let Some(ty) = gemm {
        let mut c0 = cols.start;
        while c0 < cols.end {
            let n = (cols.end - c0).min(gemm::RN);
            let mut ys = [std::ptr::null::<u8>(); gemm::RN];
            let mut ds = [std::ptr::null_mut::<f32>(); gemm::RN];
            for j in 0..n {
                let (y, d) = col(c0 + j);
                ys[j] = y;
                ds[j] = d as *mut f32;
            }
            let first = c0 == cols.start;
            let mut r0 = rows.start;
            while r0 < rows.end {
                let m = (rows.end - r0).min(gemm::RM);
                let mut xs = [std::ptr::null::<u8>(); gemm::RM];
                for (i, x) in xs.iter_mut().enumerate().take(m) {
                    *x = w_row(r0 + i);
                    if first && r0 + i + gemm::RM < rows.end {
                        prefetch(w_row(r0 + i + gemm::RM), w_bytes);
                    }
                }
                let mut out = [[0f32; gemm::RN]; gemm::RM];
                gemm::tile(ty, k, &xs, m, &ys, n, &mut out);
                for (i, o) in out.iter().enumerate().take(m) {
                    for j in 0..n {
                        ds[j].add(r0 + i).write_unaligned(o[j]);
                    }
                }
                r0 += m;
            }
            c0 += n;
        }
        return;
    }
    if let Some(qg) = qgemm.filter(|_| cols.len() >= GEMM_MIN_COLS) {
        let bytes = (qg.panel_bytes)(k);
        with_tile_scratch(bytes, |panel| {
            let mut c0 = cols.start;
            while c0 < cols.end {
                let n = (cols.end - c0).min(quants::GEMM_COLS);
                let mut ys: [&[u8]; quants::GEMM_COLS] = [&[]; quants::GEMM_COLS];
                let mut ds = [std::ptr::null_mut::<f32>(); quants::GEMM_COLS];
                for j in 0..n {
                    let (y, d) = col(c0 + j);
                    ys[j] = std::slice::from_raw_parts(y, act_bytes);
                    ds[j] = d as *mut f32;
                }
                (qg.pack)(k, &ys[..n], panel);
                // the rows come from memory for the first panel only; later
                // panels find them in L2
                let first = c0 == cols.start;
                for r in rows.clone() {
                    if first && r + PREFETCH_ROWS < rows.end {
                        prefetch(w_row(r + PREFETCH_ROWS), w_bytes);
                    }
                    let x = std::slice::from_raw_parts(w_row(r), w_bytes);
                    let mut out = [0f32; quants::GEMM_COLS];
                    (qg.run)(k, x, panel, &mut out);
                    for j in 0..n {
                        ds[j].add(r).write_unaligned(out[j]);
                    }
                }
                c0 += n;
            }
        });
        return;
    }
    let mut c0 = cols.start;
    while c0 < cols.end {
        let n = (cols.end - c0).min(TILE_COLS);
        let mut ys: [&[u8]; TILE_COLS] = [&[]; TILE_COLS];
        let mut ds = [std::ptr::null_mut::<f32>(); TILE_COLS];
        for j in 0..n {
            let (y, d) = col(c0 + j);
            ys[j] = std::slice::from_raw_parts(y, act_bytes);
            ds[j] = d as *mut f32;
        }
        // as in the GEMM path: only the first tile's rows come from memory;
        // a single column (generation) goes through `vec_dot`, whose AVX2
        // kernels ask for the row's bytes ahead themselves, block by block
        let first = c0 == cols.start && n > 1;
        for r in rows.clone() {
            if first && r + PREFETCH_ROWS < rows.end {
                prefetch(w_row(r + PREFETCH_ROWS), w_bytes);
            }
            let x = std::slice::from_raw_parts(w_row(r), w_bytes);
            match vec_dot_cols {
                Some(f) if n > 1 => {
                    let mut out = [0f32; TILE_COLS];
                    // at most 4 columns a call: their accumulators then fit
                    // the 16 vector registers
                    let mut j0 = 0;
                    while j0 < n {
                        let j1 = (j0 + 4).min(n);
                        f(k, x, &ys[j0..j1], &mut out[j0..j1]);
                        j0 = j1;
                    }
                    for j in 0..n {
                        ds[j].add(r).write_unaligned(out[j]);
                    }
                }
                _ => {
                    for j in 0..n {
                        ds[j].add(r).write_unaligned(vec_dot(k, x, ys[j]));
                    }
                }
            }
        }
        c0 += n;
    }
}

/// Column `j` of the group of weight matrix `(i02, i03)`: the `b` row
/// `(i11, i12, i13)` with `i12 / r2 == i02` and `i13 / r3 == i03` (heads
/// sharing a matrix, GQA, are columns of its group), for `b` rows of
/// `ne1` per matrix.
pub(super) fn group_col(
    j: usize,
    ne1: usize,
    (i02, i03): (usize, usize),
    (r2, r3): (usize, usize),
) -> (usize, usize, usize) {
    let rest = j / ne1;
    (j % ne1, i02 * r2 + rest % r2, i03 * r3 + rest / r2)
}

/// `dst = a · b` shapes: `a` `[k, m, ne2, ne3]` broadcast over `b`
/// `[k, n, ne12, ne13]` (ne12, ne13 multiples of ne2, ne3), `dst`
/// `[m, n, ne12, ne13]`.
pub(super) fn check_shapes(
    name: &str,
    a: &TView,
    b: &TView,
    dst: &TView,
) -> Result<(), BackendError> {
    if b.ne[0] != a.ne[0]
        || dst.ne != [a.ne[1], b.ne[1], b.ne[2], b.ne[3]]
        || a.ne[2] == 0
        || a.ne[3] == 0
        || !b.ne[2].is_multiple_of(a.ne[2])
        || !b.ne[3].is_multiple_of(a.ne[3])
    {
        return Err(invalid(format!(
            "mul_mat '{name}': shapes a {:?}, b {:?}, dst {:?}",
            a.ne, b.ne, dst.ne
        )));
    }
    Ok(())
}
