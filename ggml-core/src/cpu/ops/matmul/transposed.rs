//! `mul_mat` of a transposed float matrix: `a` whose elements run along
//! `ne[1]` (`nb[1]` = the element size, `nb[0]` a row stride), such as the
//! attention's V cache stored one row per cell and viewed as
//! `[n_kv, head_dim]` (`transpose` of the rows, no copy).
//!
//! `dst[i1, j] = Σ_k a[k, i1] · b[k, j]` is computed as rank-1 updates in
//! order of `k`: each `a` row (contiguous along `i1`) is scaled by a
//! column's `b[k, j]` and added to that column's accumulators, one fused
//! multiply-add per element. `b` is first rounded through `a`'s
//! `vec_dot_type` (F16 for an F16 cache, as ggml's `mul_mat` converts it).
//!
//! Every output element is one sum over `k` in order, and a `k` whose `b`
//! values are all zero for the columns at hand is skipped: adding a
//! product with 0 leaves an accumulator that started at +0 unchanged, so
//! skipping changes no bit. A column's result therefore depends only on its
//! nonzero `b` values and the `a` rows they meet, in order, not on how many
//! zero (masked) `k` lie between them or where: a sequence's attention
//! output is the same whichever cells it holds and whatever other
//! sequences share the cache. (ggml's lane-parallel dot over a transposed
//! V groups the terms by cell index, so a sequence batched with others
//! gets other bits than alone.) Threads split the columns; thread count and
//! column tiling change no bit either.

use super::engine::{
    acts_scratch_bytes, check_shapes, group_col, is_float_act, kernels, prepare_acts, run_tasks,
    Task,
};
use crate::backend::BackendError;
use crate::cpu::ops::compute_ctx::ComputeCtx;
use crate::cpu::scratch::{with_scratch, with_tile_scratch};
use crate::cpu::view::TView;
use crate::graph::Graph;
use crate::quants;
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// Columns of one register tile.
const TILE: usize = 3;
/// Columns per task (whole tiles).
const TASK_COLS: usize = 4 * TILE;

/// Whether `ty` laid out with strides `nb` is a transposed float matrix.
pub(super) fn is_transposed(ty: GgmlType, nb: [usize; 4]) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
        && nb[1] == ty.type_size()
        && nb[0] != ty.type_size()
}

/// A transposed float `a`, float `b`, dense-row F32 `dst`.
pub(super) fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let (a, b) = (g.tensor(t.src[0]), g.tensor(t.src[1]));
    is_transposed(a.ty, a.nb) && operands_ok(b.ty, t.ty, t.rows_contiguous())
}

/// The `b` and `dst` a transposed product takes.
fn operands_ok(b_ty: GgmlType, dst_ty: GgmlType, dst_rows_contiguous: bool) -> bool {
    is_float_act(b_ty) && dst_ty == GgmlType::F32 && dst_rows_contiguous
}

/// Compute `dst = a^T-view · b` for a transposed `a` (see the module doc).
pub(super) fn mul_mat(
    ctx: &ComputeCtx<'_>,
    name: &str,
    dst: &TView,
    a: &TView,
    b: &TView,
) -> Result<(), BackendError> {
    let (k, m) = (a.ne[0], a.ne[1]);
    let kr = kernels(a.ty)
        .filter(|_| operands_ok(b.ty, dst.ty, dst.rows_contiguous()))
        .ok_or_else(|| {
            BackendError::Unsupported(format!(
                "mul_mat '{name}': transposed {} weights, activations {}, result {} on {}",
                a.ty, b.ty, dst.ty, ctx.backend
            ))
        })?;
    check_shapes(name, a, b, dst)?;
    if dst.ne.contains(&0) {
        return Ok(());
    }
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    let n_groups = a.ne[2] * a.ne[3];
    let cols = b.ne[1] * r2 * r3;
    // on the stack for a decode's few (a token allocates nothing)
    let mut tasks: smallvec::SmallVec<[Task; 32]> = smallvec::SmallVec::new();
    for group in 0..n_groups {
        for c0 in (0..cols).step_by(TASK_COLS) {
            tasks.push(Task {
                group,
                rows: 0..m,
                cols: c0..(c0 + TASK_COLS).min(cols),
            });
        }
    }
    let (dv, av, bv) = (*dst, *a, *b);
    let work = n_groups * k * m * a.ty.type_size() + b.nrows() * k * 4;
    with_scratch(acts_scratch_bytes(b, kr, ctx.pool.n_threads()), |scratch| {
        // b in `a`'s vec_dot_type (F16 for an F16 cache), once
        let acts = prepare_acts(ctx.pool, b, kr, scratch);
        run_tasks(ctx.pool, &tasks, work, &|t: &Task| {
            let (i02, i03) = (t.group % av.ne[2], t.group / av.ne[2]);
            let mat = TMat {
                ty: av.ty,
                ptr: av.row_ptr(0, i02, i03) as *const u8,
                nb0: av.nb[0],
                m,
            };
            // TILE b columns back in f32, and the active k list
            with_tile_scratch(k * TILE * 4 + k * 4, |s| {
                let (cols, active) = s.split_at_mut(k * TILE * 4);
                // SAFETY: scratch blocks are 64-byte aligned and both parts
                // start at a multiple of 4 bytes; sizes as computed above.
                let cols = unsafe {
                    std::slice::from_raw_parts_mut(cols.as_mut_ptr() as *mut f32, k * TILE)
                };
                // SAFETY: as above.
                let active =
                    unsafe { std::slice::from_raw_parts_mut(active.as_mut_ptr() as *mut u32, k) };
                for c0 in t.cols.clone().step_by(TILE) {
                    let nc = (t.cols.end - c0).min(TILE);
                    let mut out = [std::ptr::null_mut::<f32>(); TILE];
                    for (c, o) in out.iter_mut().enumerate().take(nc) {
                        let (i11, i12, i13) = group_col(c0 + c, bv.ne[1], (i02, i03), (r2, r3));
                        // SAFETY: the converted row of a column of b
                        // (`prepare_acts` sized it for b's shape).
                        let row = unsafe {
                            std::slice::from_raw_parts(acts.row(i11, i12, i13), acts.row_bytes)
                        };
                        (kr.act.to_float)(row, &mut cols[c * k..(c + 1) * k]);
                        *o = dv.row_ptr(i11, i12, i13) as *mut f32;
                    }
                    let n_active = active_rows(&cols[..nc * k], k, active);
                    let tile_cols = Cols {
                        b: &cols[..nc * k],
                        k,
                        active: &active[..n_active],
                    };
                    // SAFETY: `mat` is matrix (i02, i03) of `a`, whose `k`
                    // rows at stride nb[0] each hold `m` elements; `out[..nc]`
                    // are this task's own dst rows of `m` f32 each.
                    unsafe { tile(mat, &tile_cols, &out[..nc]) };
                }
            });
        });
    });
    Ok(())
}

/// A tile's `b` columns (rounded, `k` each, back to back) and the `k` at
/// which at least one of them is nonzero, in order.
pub(super) struct Cols<'a> {
    b: &'a [f32],
    k: usize,
    active: &'a [u32],
}

/// One transposed matrix of `a`: `k` rows (stride `nb0` bytes) of `m`
/// contiguous elements of `ty` from `ptr`.
#[derive(Clone, Copy)]
pub(super) struct TMat {
    ty: GgmlType,
    ptr: *const u8,
    nb0: usize,
    m: usize,
}

/// Write into `active` the rows `i0 < k` where some column of `cols`
/// (`k` values each) is nonzero; return how many.
fn active_rows(cols: &[f32], k: usize, active: &mut [u32]) -> usize {
    let nc = cols.len() / k.max(1);
    let mut n = 0;
    for i0 in 0..k {
        if (0..nc).any(|c| cols[c * k + i0] != 0.0) {
            active[n] = i0 as u32;
            n += 1;
        }
    }
    n
}

/// `out[c][i1] = Σ_k a[k, i1] · b_c[k]` over the tile's active `k`, with
/// AVX2 when the CPU has it (the same bits as [`tile_scalar`]).
///
/// # Safety
/// `a` is readable (`k` rows of `m` elements of its type at stride
/// `nb0`, `k` as in `cols`); each `out` pointer is `a.m` writable f32 that
/// no other thread writes; `cols` has one column per `out`.
unsafe fn tile(a: TMat, cols: &Cols<'_>, out: &[*mut f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if quants::simd_available() {
            return x86::tile(a, cols, out);
        }
    }
    tile_scalar(a, cols, out)
}

/// Element `(k, i1)` of a transposed `a` as f32.
///
/// # Safety
/// The element exists.
#[inline]
unsafe fn load(a: TMat, k: usize, i1: usize) -> f32 {
    let p = a.ptr.add(k * a.nb0 + i1 * a.ty.type_size());
    match a.ty {
        GgmlType::F16 => half_to_f32((p as *const u16).read_unaligned()),
        GgmlType::BF16 => quants::float::bf16_bits_to_f32((p as *const u16).read_unaligned()),
        _ => (p as *const f32).read_unaligned(),
    }
}

/// An f16 as f32 (exact).
fn half_to_f32(h: u16) -> f32 {
    let mut out = [0f32];
    quants::float::f16_to_float_scalar(&h.to_le_bytes(), &mut out);
    out[0]
}

/// Output `i1` of column `c`: fused multiply-adds in order of the active `k`.
///
/// # Safety
/// As [`tile`], for one element.
#[inline]
unsafe fn element(a: TMat, cols: &Cols<'_>, c: usize, i1: usize) -> f32 {
    let b = &cols.b[c * cols.k..(c + 1) * cols.k];
    let mut acc = 0f32;
    for &i0 in cols.active {
        acc = load(a, i0 as usize, i1).mul_add(b[i0 as usize], acc);
    }
    acc
}

/// The scalar [`tile`].
///
/// # Safety
/// As [`tile`].
pub(super) unsafe fn tile_scalar(a: TMat, cols: &Cols<'_>, out: &[*mut f32]) {
    for (c, &o) in out.iter().enumerate() {
        for i1 in 0..a.m {
            *o.add(i1) = element(a, cols, c, i1);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// 8 elements of a row of `ty` as f32.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(ty: GgmlType, p: *const u8) -> __m256 {
        match ty {
            GgmlType::F16 => _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
            GgmlType::BF16 => {
                let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
                _mm256_castsi256_ps(_mm256_slli_epi32(h, 16))
            }
            _ => _mm256_loadu_ps(p as *const f32),
        }
    }

    /// `B` blocks of 8 outputs (from element `i1`) of `C` columns.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block<const C: usize, const B: usize>(
        a: TMat,
        i1: usize,
        cols: &Cols<'_>,
        out: &[*mut f32],
    ) {
        let esz = a.ty.type_size();
        let mut acc = [[_mm256_setzero_ps(); B]; C];
        let row0 = a.ptr.add(i1 * esz);
        let b = cols.b.as_ptr();
        for &i0 in cols.active {
            let i0 = i0 as usize;
            let r = row0.add(i0 * a.nb0);
            // the columns' values first, then one row vector at a time:
            // C × B accumulators, C broadcasts and one vector fit the 16
            // registers (B vectors held at once spilled an accumulator)
            let mut s = [_mm256_setzero_ps(); C];
            for (c, sc) in s.iter_mut().enumerate() {
                *sc = _mm256_broadcast_ss(&*b.add(c * cols.k + i0));
            }
            for q in 0..B {
                let v = load8(a.ty, r.add(q * 8 * esz));
                for (acc_c, sc) in acc.iter_mut().zip(&s) {
                    acc_c[q] = _mm256_fmadd_ps(v, *sc, acc_c[q]);
                }
            }
        }
        for (c, acc_c) in acc.iter().enumerate() {
            for (q, a) in acc_c.iter().enumerate() {
                _mm256_storeu_ps(out[c].add(i1 + 8 * q), *a);
            }
        }
    }

    /// The tile for `C` columns: blocks of 32, then of 8, then scalar.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile_c<const C: usize>(a: TMat, cols: &Cols<'_>, out: &[*mut f32]) {
        let m = a.m;
        let mut i1 = 0;
        while i1 + 32 <= m {
            block::<C, 4>(a, i1, cols, out);
            i1 += 32;
        }
        while i1 + 8 <= m {
            block::<C, 1>(a, i1, cols, out);
            i1 += 8;
        }
        for (c, &o) in out.iter().enumerate().take(C) {
            for i in i1..m {
                *o.add(i) = element(a, cols, c, i);
            }
        }
    }

    /// The AVX2 [`super::tile`].
    ///
    /// # Safety
    /// As [`super::tile`], and the CPU has AVX2/FMA/F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tile(a: TMat, cols: &Cols<'_>, out: &[*mut f32]) {
        match out.len() {
            1 => tile_c::<1>(a, cols, out),
            2 => tile_c::<2>(a, cols, out),
            _ => tile_c::<3>(a, cols, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transposed matrix of `k` rows of `m` values (row stride `nb0`
    /// bytes, at least `m` elements), as raw bytes of `ty`.
    fn matrix(ty: GgmlType, k: usize, m: usize, nb0: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        let mut bytes = vec![0u8; k * nb0];
        let conv = quants::cpu_traits(ty).expect("float type");
        for i0 in 0..k {
            let vals: Vec<f32> = (0..m)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
                })
                .collect();
            (conv.from_float)(&vals, &mut bytes[i0 * nb0..i0 * nb0 + m * ty.type_size()]);
        }
        bytes
    }

    /// `nc` columns of `k` values, every `zero_every`-th k zero in all.
    fn columns(nc: usize, k: usize, zero_every: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..nc * k)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                if zero_every > 0 && (i % k).is_multiple_of(zero_every) {
                    0.0
                } else {
                    (s >> 40) as f32 / (1u64 << 24) as f32
                }
            })
            .collect()
    }

    type TileFn = unsafe fn(TMat, &Cols<'_>, &[*mut f32]);

    fn run(
        f: TileFn,
        ty: GgmlType,
        a: &[u8],
        nb0: usize,
        m: usize,
        b: &[f32],
        nc: usize,
    ) -> Vec<Vec<f32>> {
        let k = b.len() / nc;
        let mut active = vec![0u32; k];
        let n = active_rows(b, k, &mut active);
        let cols = Cols {
            b,
            k,
            active: &active[..n],
        };
        let mut out = vec![vec![f32::NAN; m]; nc];
        let ptrs: Vec<*mut f32> = out.iter_mut().map(|o| o.as_mut_ptr()).collect();
        // SAFETY: `a` holds k rows at stride nb0 of m elements; each output
        // holds m values.
        let mat = TMat {
            ty,
            ptr: a.as_ptr(),
            nb0,
            m,
        };
        unsafe { f(mat, &cols, &ptrs) };
        out
    }

    fn same(x: &[Vec<f32>], y: &[Vec<f32>]) -> bool {
        x.iter()
            .flatten()
            .zip(y.iter().flatten())
            .all(|(a, b)| a.to_bits() == b.to_bits())
    }

    #[test]
    fn simd_matches_scalar_bit_for_bit() {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            for (k, m) in [(1, 1), (7, 8), (33, 40), (64, 128), (5, 77)] {
                let nb0 = (m + 3) * ty.type_size();
                let a = matrix(ty, k, m, nb0, (k * 31 + m) as u64);
                for zero_every in [0, 2, 3] {
                    for nc in 1..=TILE {
                        let b = columns(nc, k, zero_every, m as u64);
                        let want = run(tile_scalar, ty, &a, nb0, m, &b, nc);
                        let got = run(tile, ty, &a, nb0, m, &b, nc);
                        assert!(same(&got, &want), "{ty} k {k} m {m} nc {nc}");
                    }
                }
            }
        }
    }

    #[test]
    fn zero_rows_anywhere_change_nothing() {
        // the same nonzero b values against the same a rows, with zero
        // rows (masked cells) inserted at other places: same bits
        let (k, m, nc) = (40, 64, TILE);
        let ty = GgmlType::F16;
        let nb0 = m * 2;
        let a = matrix(ty, k, m, nb0, 7);
        let b = columns(nc, k, 0, 9);
        let want = run(tile, ty, &a, nb0, m, &b, nc);
        for (stride, offset) in [(2, 0), (3, 1), (8, 5)] {
            let kk = offset + stride * k + 3;
            // the masked rows' a values are arbitrary (other sequences' V)
            let mut a2 = vec![0x3cu8; kk * nb0];
            let mut b2 = vec![0f32; kk * nc];
            for i0 in 0..k {
                let d = offset + stride * i0;
                a2[d * nb0..(d + 1) * nb0].copy_from_slice(&a[i0 * nb0..(i0 + 1) * nb0]);
                for c in 0..nc {
                    b2[c * kk + d] = b[c * k + i0];
                }
            }
            assert!(same(&run(tile, ty, &a2, nb0, m, &b2, nc), &want));
            assert!(same(&run(tile_scalar, ty, &a2, nb0, m, &b2, nc), &want));
        }
        // and it is the product, to f32 rounding
        let mat = TMat {
            ty,
            ptr: a.as_ptr(),
            nb0,
            m,
        };
        for (c, col) in want.iter().enumerate() {
            for (i1, &v) in col.iter().enumerate() {
                let exact: f64 = (0..k)
                    // SAFETY: within the matrix.
                    .map(|i0| unsafe { load(mat, i0, i1) } as f64 * b[c * k + i0] as f64)
                    .sum();
                assert!(
                    (v as f64 - exact).abs() <= 1e-5 * (1.0 + exact.abs()),
                    "{v} vs {exact}"
                );
            }
        }
    }
}
