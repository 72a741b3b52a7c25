//! AVX2 `ggml_vec_dot_q2_K_q8_K`.

use std::arch::x86_64::*;
use std::ptr::addr_of;

use super::q3_k::{pair_scales, scale_halves};
use super::{f16_to_f32, hsum_ps, load128, load256, sum_alternating};
use crate::quants::blocks::k_quants::q2_k::BlockQ2K;
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::prefetch::prefetch_block_ahead;

/// `ggml_vec_dot_q2_K_q8_K` over equally long block slices: the 4-bit
/// minima go through the Q8_K sums, the 2-bit values times 4-bit scales
/// through `maddubs` (pairs at most 2·3·128) and `madd`; all exact.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q2_k_q8_k(x: &[BlockQ2K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len());
    let m3 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0f);
    let (a0, a1) = sum_alternating(x.len(), |k, acc| {
        // SAFETY: k < x.len() == y.len() (`sum_alternating` passes k < n).
        let (bx, by) = (x.get_unchecked(k), y.get_unchecked(k));
        prefetch_block_ahead(bx);
        let dall = by.d * f16_to_f32(bx.d);
        let dmin = by.d * f16_to_f32(bx.dmin);
        let sc8 = load128(bx.scales.as_ptr());
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
        let summs = _mm256_madd_epi16(mins, load256(addr_of!(by.bsums)));
        let halves = scale_halves(_mm256_cvtepu8_epi16(_mm_and_si128(sc8, m4)));
        let mut sumi = _mm256_setzero_si256();
        for (n, &half) in halves.iter().enumerate() {
            let mut qs = load256(bx.qs.as_ptr().add(32 * n));
            for j in 0..4 {
                // bits 2j of each byte (16-bit shifts keep bytes apart here)
                let q = _mm256_and_si256(qs, m3);
                qs = _mm256_srli_epi16(qs, 2);
                let p = _mm256_maddubs_epi16(q, load256(by.qs.as_ptr().add(128 * n + 32 * j)));
                let s16 = pair_scales(half, j);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s16));
            }
        }
        let a = _mm256_fmadd_ps(_mm256_set1_ps(-dmin), _mm256_cvtepi32_ps(summs), acc);
        _mm256_fmadd_ps(_mm256_set1_ps(dall), _mm256_cvtepi32_ps(sumi), a)
    });
    hsum_ps(_mm256_add_ps(a0, a1))
}
