//! AVX2 Q5_K kernels: the dot with one Q8_K row (decode) and the GEMM with
//! a panel of 8 (prompts), both computing
//! [`crate::quants::k_quants::q5_k`]'s formula, so with the same bits.

use std::arch::x86_64::*;

use super::k_gemm::{
    check_panel, col_scales, hsum_epi32, reduce, step_min, sub_block, weighted_bsums,
};
use super::q4_k::{broadcast_i16_lane, mins_dot_bsums, row_scales_mins};
use super::{f16_to_f32, load256};
use crate::quants::gemm::GEMM_COLS;
use crate::quants::k_quants::acc_min;
use crate::quants::k_quants::panel::BLOCK_BYTES;
use crate::quants::k_quants::q4_k::unpack_scales_mins;
use crate::quants::k_quants::q5_k::BlockQ5K;
use crate::quants::k_quants::q8_k::BlockQ8K;

/// 16 in each byte whose bit `bit` is set in `h`, else 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn high_bit(h: __m256i, bit: usize) -> __m256i {
    let m = _mm256_set1_epi8((1u8 << bit) as i8);
    _mm256_and_si256(
        _mm256_cmpeq_epi8(_mm256_and_si256(h, m), m),
        _mm256_set1_epi8(16),
    )
}

/// The 5-bit codes of sub-blocks `2j` and `2j + 1`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn codes(bx: &BlockQ5K, hbits: __m256i, j: usize) -> (__m256i, __m256i) {
    let m4 = _mm256_set1_epi8(0x0f);
    let bits = load256(bx.qs.as_ptr().add(32 * j));
    (
        _mm256_or_si256(_mm256_and_si256(bits, m4), high_bit(hbits, 2 * j)),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
            high_bit(hbits, 2 * j + 1),
        ),
    )
}

/// The Q5_K dot over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_k_q8_k(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len());
    let mut acc = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let (mins16, scales) = row_scales_mins(&bx.scales);
        let msum = mins_dot_bsums(mins16, by);
        let hbits = load256(bx.qh.as_ptr());
        let q8 = by.qs.as_ptr();
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let (ql, qh) = codes(bx, hbits, j);
            let pl = _mm256_maddubs_epi16(ql, load256(q8.add(64 * j)));
            let ph = _mm256_maddubs_epi16(qh, load256(q8.add(64 * j + 32)));
            let pl = _mm256_madd_epi16(broadcast_i16_lane(scales, 2 * j), pl);
            let ph = _mm256_madd_epi16(broadcast_i16_lane(scales, 2 * j + 1), ph);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        let (d, dmin) = (f16_to_f32(bx.d), f16_to_f32(bx.dmin));
        acc = acc_min(acc, by.d, d, dmin, hsum_epi32(sumi), msum);
    }
    acc
}

/// One Q5_K weight row against a Q8_K panel: `out[t]` =
/// `dot_q5_k_q8_k(x, column t)`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q5_k_q8_k(x: &[BlockQ5K], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    check_panel(x.len(), panel);
    let mut acc = _mm256_setzero_ps();
    for (b, bx) in x.iter().enumerate() {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let sm = unpack_scales_mins(&bx.scales);
        let hbits = load256(bx.qh.as_ptr());
        let mut ia = [_mm256_setzero_si256(); GEMM_COLS];
        for j in 0..4 {
            let (lo, hi) = codes(bx, hbits, j);
            sub_block(&mut ia, p, 2 * j, lo, _mm256_set1_epi16(sm[2 * j] as i16));
            sub_block(
                &mut ia,
                p,
                2 * j + 1,
                hi,
                _mm256_set1_epi16(sm[2 * j + 1] as i16),
            );
        }
        let isum = reduce(&ia);
        let mins: [__m256i; 8] = std::array::from_fn(|k| _mm256_set1_epi16(sm[8 + k] as i16));
        let msum = weighted_bsums(p, &mins);
        let (d, dmin) = (f16_to_f32(bx.d), f16_to_f32(bx.dmin));
        acc = step_min(acc, col_scales(p), d, dmin, isum, msum);
    }
    _mm256_storeu_ps(out.as_mut_ptr(), acc);
}
