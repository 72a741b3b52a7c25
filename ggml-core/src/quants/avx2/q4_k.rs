//! AVX2 Q4_K kernels: the dot with one Q8_K row (decode) and the GEMM with
//! a panel of 8 (prompts), both computing
//! [`crate::quants::k_quants::q4_k`]'s formula, so with the same bits.

use std::arch::x86_64::*;
use std::ptr::addr_of;

use super::k_gemm::{
    check_panel, col_scales, hsum_epi32, hsum_epi32_128, reduce, step_min, sub_block,
    weighted_bsums,
};
use super::{f16_to_f32, load128, load256};
use crate::quants::gemm::GEMM_COLS;
use crate::quants::k_quants::acc_min;
use crate::quants::k_quants::panel::BLOCK_BYTES;
use crate::quants::k_quants::q4_k::{unpack_scales_mins, BlockQ4K};
use crate::quants::k_quants::q8_k::BlockQ8K;

/// 16-bit lane `j` of each 128-bit half broadcast over that half.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn broadcast_i16_lane(v: __m256i, j: usize) -> __m256i {
    let idx = (((2 * j + 1) << 8) | (2 * j)) as i16;
    _mm256_shuffle_epi8(v, _mm256_set1_epi16(idx))
}

/// `Σ_s m[s]·(bsums[2s] + bsums[2s+1])`, with `mins16` the 8 minima as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mins_dot_bsums(mins16: __m128i, by: &BlockQ8K) -> i32 {
    let bsums = load256(addr_of!(by.bsums));
    let pairs = _mm_hadd_epi16(
        _mm256_castsi256_si128(bsums),
        _mm256_extracti128_si256(bsums, 1),
    );
    hsum_epi32_128(_mm_madd_epi16(mins16, pairs))
}

/// The weight side of a Q4_K / Q5_K block's setup: the 8 sub-block minima
/// as i16 and the 8 scales as i16 in both 128-bit halves.
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

/// The Q4_K dot over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_k_q8_k(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len());
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let (mins16, scales) = row_scales_mins(&bx.scales);
        let msum = mins_dot_bsums(mins16, by);
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
        let (d, dmin) = (f16_to_f32(bx.d), f16_to_f32(bx.dmin));
        acc = acc_min(acc, by.d, d, dmin, hsum_epi32(sumi), msum);
    }
    acc
}

/// One Q4_K weight row against a Q8_K panel: `out[t]` =
/// `dot_q4_k_q8_k(x, column t)`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q4_k_q8_k(x: &[BlockQ4K], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    check_panel(x.len(), panel);
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    for (b, bx) in x.iter().enumerate() {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let sm = unpack_scales_mins(&bx.scales);
        let q4 = bx.qs.as_ptr();
        let mut ia = [_mm256_setzero_si256(); GEMM_COLS];
        for j in 0..4 {
            let bits = load256(q4.add(32 * j));
            let lo = _mm256_and_si256(bits, m4);
            sub_block(&mut ia, p, 2 * j, lo, _mm256_set1_epi16(sm[2 * j] as i16));
            let hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            sub_block(
                &mut ia,
                p,
                2 * j + 1,
                hi,
                _mm256_set1_epi16(sm[2 * j + 1] as i16),
            );
        }
        let isum = reduce(&ia);
        // the minimum of sub-block k weighs both of its 16-value sums
        let mins: [__m256i; 8] = std::array::from_fn(|k| _mm256_set1_epi16(sm[8 + k] as i16));
        let msum = weighted_bsums(p, &mins);
        let (d, dmin) = (f16_to_f32(bx.d), f16_to_f32(bx.dmin));
        acc = step_min(acc, col_scales(p), d, dmin, isum, msum);
    }
    _mm256_storeu_ps(out.as_mut_ptr(), acc);
}
