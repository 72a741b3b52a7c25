//! The parts the AVX2 K-quant GEMM kernels share (see
//! [`crate::quants::gemm`] and the panel layout in
//! [`crate::quants::k_quants::panel`]): the per-column integer sums of a
//! sub-block, their reduction to one lane per column, the weighted sums of
//! the panel's 16-value sums, and the f32 step per block.

use std::arch::x86_64::*;

use super::load256;
use crate::quants::gemm::GEMM_COLS;
use crate::quants::k_quants::panel::{BLOCK_BYTES, BSUMS_OFF, D_OFF};

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

/// Lane `t` = the sum of `v[t]`'s 8 lanes (exact: integers).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn reduce(v: &[__m256i; GEMM_COLS]) -> __m256i {
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h45 = _mm256_hadd_epi32(v[4], v[5]);
    let h67 = _mm256_hadd_epi32(v[6], v[7]);
    // per 128-bit half: the half sums of columns 0..4 and 4..8
    let q0 = _mm256_hadd_epi32(h01, h23);
    let q1 = _mm256_hadd_epi32(h45, h67);
    let lo = _mm256_permute2x128_si256(q0, q1, 0x20);
    let hi = _mm256_permute2x128_si256(q0, q1, 0x31);
    _mm256_add_epi32(lo, hi)
}

/// Per column: `Σ_k w[2k]·bsums[2k] + w[2k+1]·bsums[2k+1]` over the panel
/// block at `p`, with `pairs[k]` the i16 pair `(w[2k], w[2k+1])` broadcast.
///
/// # Safety
/// AVX2; `p` points at a whole panel block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn weighted_bsums(p: *const u8, pairs: &[__m256i; 8]) -> __m256i {
    let b = p.add(BSUMS_OFF);
    let mut s = _mm256_setzero_si256();
    for (k, w) in pairs.iter().enumerate() {
        s = _mm256_add_epi32(s, _mm256_madd_epi16(*w, load256(b.add(32 * k))));
    }
    s
}

/// The 8 columns' scales of the panel block at `p`.
///
/// # Safety
/// AVX2; `p` points at a whole panel block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn col_scales(p: *const u8) -> __m256 {
    _mm256_loadu_ps(p.add(D_OFF) as *const f32)
}

/// The f32 step of a block with minima, per column, as
/// [`crate::quants::k_quants::acc_min`]: `acc + (dy·d)·isum − (dy·dmin)·msum`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn step_min(
    acc: __m256,
    dy: __m256,
    d: f32,
    dmin: f32,
    isum: __m256i,
    msum: __m256i,
) -> __m256 {
    let acc = _mm256_fmadd_ps(
        _mm256_mul_ps(dy, _mm256_set1_ps(d)),
        _mm256_cvtepi32_ps(isum),
        acc,
    );
    _mm256_fnmadd_ps(
        _mm256_mul_ps(dy, _mm256_set1_ps(dmin)),
        _mm256_cvtepi32_ps(msum),
        acc,
    )
}

/// The f32 step of a block without minima, per column, as
/// [`crate::quants::k_quants::acc_offset`]: `acc + (dy·d)·isum`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn step(acc: __m256, dy: __m256, d: f32, isum: __m256i) -> __m256 {
    _mm256_fmadd_ps(
        _mm256_mul_ps(dy, _mm256_set1_ps(d)),
        _mm256_cvtepi32_ps(isum),
        acc,
    )
}

/// Sum of the 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    hsum_epi32_128(s)
}

/// Sum of the 4 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum_epi32_128(s: __m128i) -> i32 {
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01));
    _mm_cvtsi128_si32(s)
}
