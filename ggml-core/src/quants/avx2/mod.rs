//! AVX2/FMA/F16C kernels for the dot products that dominate decode time,
//! and the activation quantizers that feed them.
//!
//! Every kernel is an `unsafe fn` compiled with
//! `#[target_feature(enable = "avx2,fma,f16c")]`; its only safety
//! precondition is that the CPU has those features, which the callers check
//! at run time (see `cpu_features::dispatch`). Memory accesses go through
//! block slices, so bounds come from the slices.
#![cfg(target_arch = "x86_64")]

pub(crate) mod float;
pub(crate) mod k_gemm;
pub(crate) mod legacy;
pub(crate) mod lut4;
pub(crate) mod q2_k;
pub(crate) mod q3_k;
pub(crate) mod q4_k;
pub(crate) mod q5_k;
pub(crate) mod q6_k;
pub(crate) mod q8_0_gemm;
pub(crate) mod q8_0_tiles;
pub(crate) mod quantize;

use std::arch::x86_64::*;

use half::f16;

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// f16 → f32 with the F16C instruction (exact, as `half`'s conversion).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_to_f32(h: f16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h.to_bits() as i32)))
}

/// 32 unaligned bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn load256<T>(p: *const T) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// 16 unaligned bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn load128<T>(p: *const T) -> __m128i {
    _mm_loadu_si128(p as *const __m128i)
}
