//! AVX2 Q4_K kernels: `ggml_vec_dot_q4_K_q8_K` (decode) and the GEMM with
//! a panel of 8 columns (prompts), bit for bit the dot per column.

use std::arch::x86_64::*;
use std::ptr::addr_of;

use super::k_gemm::{check_panel, finish_min, step, step_mins, sub_block};
use super::{f16_to_f32, hsum_ps, load128, load256};
use crate::quants::blocks::k_quants::panel::BLOCK_BYTES;
use crate::quants::blocks::k_quants::q4_k::{unpack_scales_mins, BlockQ4K};
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::gemm::GEMM_COLS;
use crate::quants::prefetch::prefetch_block_ahead;

/// 16-bit lane `j` of each 128-bit half broadcast over that half.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn broadcast_i16_lane(v: __m256i, j: usize) -> __m256i {
    let idx = (((2 * j + 1) << 8) | (2 * j)) as i16;
    _mm256_shuffle_epi8(v, _mm256_set1_epi16(idx))
}

/// `Σ_s m[s]·(bsums[2s] + bsums[2s+1])` as 4 i32 lanes, with `mins16` the
/// 8 minima as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mins_dot_bsums(mins16: __m128i, by: &BlockQ8K) -> __m128i {
    let bsums = load256(addr_of!(by.bsums));
    let pairs = _mm_hadd_epi16(
        _mm256_castsi256_si128(bsums),
        _mm256_extracti128_si256(bsums, 1),
    );
    _mm_madd_epi16(mins16, pairs)
}

/// The weight side of the per-block setup shared by the Q4_K and Q5_K
/// dots: the 8 sub-block minima as i16 and the 8 scales as i16 in both
/// 128-bit halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn row_scales_mins(packed: &[u8; 12]) -> (__m128i, __m256i) {
    let sm = unpack_scales_mins(packed);
    let sm16 = _mm256_cvtepu8_epi16(load128(sm.as_ptr()));
    let sc128 = _mm256_castsi256_si128(sm16);
    (
        _mm256_extracti128_si256(sm16, 1),
        _mm256_set_m128i(sc128, sc128),
    )
}

/// The activation side: adds the minima term `-dy·dmin·Σ m·bsums` into
/// `acc_m` and returns `d = dy·dx`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn col_minima(
    dx: f32,
    dmin_x: f32,
    mins16: __m128i,
    by: &BlockQ8K,
    acc_m: &mut __m128,
) -> f32 {
    let prod = mins_dot_bsums(mins16, by);
    *acc_m = _mm_fmadd_ps(_mm_set1_ps(-by.d * dmin_x), _mm_cvtepi32_ps(prod), *acc_m);
    by.d * dx
}

/// The per-block setup shared by the Q4_K and Q5_K dots: returns
/// `d = dy·dx` and the 8 sub-block scales as i16 in both 128-bit halves,
/// and adds the minima term `-dy·dmin·Σ m·bsums` into `acc_m`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn block_scales(
    dx: f32,
    dmin_x: f32,
    packed: &[u8; 12],
    by: &BlockQ8K,
    acc_m: &mut __m128,
) -> (f32, __m256i) {
    let (mins16, scales) = row_scales_mins(packed);
    (col_minima(dx, dmin_x, mins16, by, acc_m), scales)
}

/// `ggml_vec_dot_q4_K_q8_K` over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_k_q8_k(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len());
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (bx, by) in x.iter().zip(y) {
        prefetch_block_ahead(bx);
        let (d, scales) = block_scales(
            f16_to_f32(bx.d),
            f16_to_f32(bx.dmin),
            &bx.scales,
            by,
            &mut acc_m,
        );
        let q4 = bx.qs.as_ptr();
        let q8 = by.qs.as_ptr();
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let q4bits = load256(q4.add(32 * j));
            let q4l = _mm256_and_si256(q4bits, m4);
            let q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
            let pl = _mm256_maddubs_epi16(q4l, load256(q8.add(64 * j)));
            let ph = _mm256_maddubs_epi16(q4h, load256(q8.add(64 * j + 32)));
            let pl = _mm256_madd_epi16(broadcast_i16_lane(scales, 2 * j), pl);
            let ph = _mm256_madd_epi16(broadcast_i16_lane(scales, 2 * j + 1), ph);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    let m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    let m = _mm_add_ss(m, _mm_movehdup_ps(m));
    hsum_ps(acc) + _mm_cvtss_f32(m)
}

/// One Q4_K weight row against a Q8_K panel: `out[t]` =
/// `dot_q4_k_q8_k(x, column t)`, bit for bit: the same integer lanes, the
/// same f32 accumulators and steps, kept per column.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q4_k_q8_k(x: &[BlockQ4K], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    check_panel(x.len(), panel);
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_ps(); GEMM_COLS];
    let mut acc_m = [_mm256_setzero_ps(); 4];
    for (b, bx) in x.iter().enumerate() {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let (mins16, scales) = row_scales_mins(&bx.scales);
        let q4 = bx.qs.as_ptr();
        let mut ia = [_mm256_setzero_si256(); GEMM_COLS];
        for j in 0..4 {
            let bits = load256(q4.add(32 * j));
            let lo = _mm256_and_si256(bits, m4);
            sub_block(&mut ia, p, 2 * j, lo, broadcast_i16_lane(scales, 2 * j));
            let hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            sub_block(
                &mut ia,
                p,
                2 * j + 1,
                hi,
                broadcast_i16_lane(scales, 2 * j + 1),
            );
        }
        step_mins(&mut acc_m, p, f16_to_f32(bx.dmin), mins16);
        step(&mut acc, p, f16_to_f32(bx.d), &ia);
    }
    finish_min(&acc, &acc_m, out);
}
