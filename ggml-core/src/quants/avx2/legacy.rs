//! AVX2 dots of the 32-element block types against Q8_0: Q8_0 and Q4_0.

use std::arch::x86_64::*;

use super::{f16_to_f32, hsum_ps, load128, load256};
use crate::quants::q4_0::BlockQ4_0;
use crate::quants::q8_0::BlockQ8_0;

/// `Σ x·y` of 32 signed bytes as 8 f32 lanes. `y` must not hold -128 (true
/// for every quantizer output: Q8 activations are in -127..=127); `x` may.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mul_sum_i8(x: __m256i, y: __m256i) -> __m256 {
    // |x| as unsigned bytes (128 for -128) times y with x's sign: exact,
    // and each pair sum is at most 2·128·127 < 2^15, so no saturation.
    let ax = _mm256_sign_epi8(x, x);
    let sy = _mm256_sign_epi8(y, x);
    let p16 = _mm256_maddubs_epi16(ax, sy);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
}

/// `ggml_vec_dot_q8_0_q8_0` over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len());
    let mut acc = [_mm256_setzero_ps(); 2];
    for (k, (bx, by)) in x.iter().zip(y).enumerate() {
        let d = _mm256_set1_ps(f16_to_f32(bx.d) * f16_to_f32(by.d));
        let q = mul_sum_i8(load256(bx.qs.as_ptr()), load256(by.qs.as_ptr()));
        acc[k & 1] = _mm256_fmadd_ps(d, q, acc[k & 1]);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1]))
}

/// `ggml_vec_dot_q4_0_q8_0` over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len());
    let m4 = _mm256_set1_epi8(0x0f);
    let eight = _mm256_set1_epi8(8);
    let mut acc = [_mm256_setzero_ps(); 2];
    for (k, (bx, by)) in x.iter().zip(y).enumerate() {
        let d = _mm256_set1_ps(f16_to_f32(bx.d) * f16_to_f32(by.d));
        // low nibbles are elements 0..16, high nibbles 16..32
        let raw = load128(bx.qs.as_ptr());
        let nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
        let qx = _mm256_sub_epi8(nib, eight);
        let q = mul_sum_i8(qx, load256(by.qs.as_ptr()));
        acc[k & 1] = _mm256_fmadd_ps(d, q, acc[k & 1]);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1]))
}
