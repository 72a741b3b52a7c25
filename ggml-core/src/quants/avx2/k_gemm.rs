//! The parts the AVX2 K-quant GEMM kernels share (see
//! [`crate::quants::gemm`] and the panel layout in
//! [`crate::quants::blocks::k_quants::panel`]): the per-column integer sums of a
//! sub-block, and the f32 steps per block and final sums, which are those
//! of ggml's AVX2 dots (8 lanes per column, 4 more for the minima), so a
//! GEMM output is bit for bit the dot's.

use std::arch::x86_64::*;

use super::{hsum_ps, load256};
use crate::quants::blocks::k_quants::panel::{
    BLOCK_BYTES, BSUMS_OFF, D_OFF, NEG_D4_OFF, PAIRS_OFF,
};
use crate::quants::gemm::GEMM_COLS;

/// A panel checked against the weight row's block count.
#[inline]
pub(crate) fn check_panel(n_blocks: usize, panel: &[u8]) {
    assert_eq!(
        panel.len(),
        n_blocks * BLOCK_BYTES,
        "gemm: a panel of {} bytes for {n_blocks} blocks",
        panel.len()
    );
}

/// `acc[t] += madd(scale, maddubs(codes, column t's sub-block s))` for the
/// panel block at `p`: the scaled integer products of one weight sub-block
/// (32 unsigned codes) with the 8 columns.
///
/// # Safety
/// AVX2; `p` points at a whole panel block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn sub_block(
    acc: &mut [__m256i; GEMM_COLS],
    p: *const u8,
    s: usize,
    codes: __m256i,
    scale: __m256i,
) {
    let q = p.add(s * GEMM_COLS * 32);
    for (t, a) in acc.iter_mut().enumerate() {
        let prod = _mm256_maddubs_epi16(codes, load256(q.add(32 * t)));
        *a = _mm256_add_epi32(*a, _mm256_madd_epi16(scale, prod));
    }
}

/// The f32 step of a block, as ggml's K-quant dots take it: each column
/// keeps 8 f32 lanes and adds `(dy·d)·f32(isum lanes)` (fused) per block.
///
/// # Safety
/// AVX2; `p` points at a whole panel block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn step(
    acc: &mut [__m256; GEMM_COLS],
    p: *const u8,
    d: f32,
    isum: &[__m256i; GEMM_COLS],
) {
    let dy = p.add(D_OFF) as *const f32;
    let dx = _mm256_set1_ps(d);
    for t in 0..GEMM_COLS {
        // dy·dx, the dot's scalar product, in every lane
        let dd = _mm256_mul_ps(_mm256_broadcast_ss(&*dy.add(t)), dx);
        acc[t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum[t]), acc[t]);
    }
}

/// The minima step of Q4_K / Q5_K, as ggml's dots take it: each column
/// keeps 4 f32 lanes and adds `(-dy·dmin)·f32(madd(mins, pair sums))`;
/// `acc_m[v]` holds columns `2v` (low half) and `2v + 1`.
///
/// # Safety
/// AVX2; `p` points at a whole panel block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn step_mins(acc_m: &mut [__m256; 4], p: *const u8, dmin: f32, mins16: __m128i) {
    let w = _mm256_set_m128i(mins16, mins16);
    let dmin = _mm256_set1_ps(dmin);
    for (v, a) in acc_m.iter_mut().enumerate() {
        let prod = _mm256_madd_epi16(w, load256(p.add(PAIRS_OFF + 32 * v)));
        let f = _mm256_mul_ps(
            _mm256_loadu_ps(p.add(NEG_D4_OFF + 32 * v) as *const f32),
            dmin,
        );
        *a = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(prod), *a);
    }
}

/// Column `t`'s 16-value sums of the panel block at `p`.
///
/// # Safety
/// AVX2; `p` points at a whole panel block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn col_bsums(p: *const u8, t: usize) -> __m256i {
    load256(p.add(BSUMS_OFF + 32 * t))
}

/// The results of the dots without minima: ggml's 8-lane sum per column.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn finish(acc: &[__m256; GEMM_COLS], out: &mut [f32; GEMM_COLS]) {
    for (o, a) in out.iter_mut().zip(acc) {
        *o = hsum_ps(*a);
    }
}

/// The results of the dots with minima: ggml's 8-lane sum of `acc` plus
/// its 4-lane sum of the minima, per column.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn finish_min(
    acc: &[__m256; GEMM_COLS],
    acc_m: &[__m256; 4],
    out: &mut [f32; GEMM_COLS],
) {
    for (t, o) in out.iter_mut().enumerate() {
        let v = acc_m[t / 2];
        let m = if t % 2 == 0 {
            _mm256_castps256_ps128(v)
        } else {
            _mm256_extractf128_ps(v, 1)
        };
        *o = hsum_ps(acc[t]) + hsum_ps_128(m);
    }
}

/// ggml's 4-lane sum of the minima accumulator.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum_ps_128(m: __m128) -> f32 {
    let m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_add_ss(m, _mm_movehdup_ps(m));
    _mm_cvtss_f32(m)
}
