//! AVX2/FMA/F16C kernels for the dot products that dominate decode time,
//! and the activation quantizers that feed them.
//!
//! Every kernel is an `unsafe fn` compiled with
//! `#[target_feature(enable = "avx2,fma,f16c")]`; its only safety
//! precondition is that the CPU has those features, which `quants::tables`
//! guarantees (the AVX2 table is handed out only on such a CPU). Memory
//! accesses go through block slices, so bounds come from the slices.
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

/// The two alternating accumulators of the 32-element block dots: block
/// `k` of `n` is added by `fma(k, acc)` into the first (even `k`) or the
/// second (odd `k`), returned for the caller to add up. Both stay in
/// registers (an array of two indexed by `k & 1` was kept in memory: a
/// store-to-load round trip per block, about 7 cycles a block).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn sum_alternating(
    n: usize,
    mut fma: impl FnMut(usize, __m256) -> __m256,
) -> (__m256, __m256) {
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut k = 0;
    while k + 1 < n {
        a0 = fma(k, a0);
        a1 = fma(k + 1, a1);
        k += 2;
    }
    if k < n {
        a0 = fma(k, a0);
    }
    (a0, a1)
}

/// f16 → f32 with the F16C instruction (exact, as `half`'s conversion).
///
/// Written as `vmovd` + `vcvtph2ps` in `asm!`: from the intrinsics LLVM
/// emits a `vpinsrw` into whatever register it picks, often a loop's
/// accumulator, which chains each block's scale to the previous block's sum
/// (a false dependency that held the Q8_0 dot to ~7 cycles a block).
/// `vmovd` writes the whole register.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_to_f32(h: f16) -> f32 {
    let out: f32;
    // SAFETY: two register-only instructions (AVX and F16C, which the
    // target features of every caller guarantee); no memory, no stack.
    std::arch::asm!(
        "vmovd {x}, {h:e}",
        "vcvtph2ps {x}, {x}",
        h = in(reg) u32::from(h.to_bits()),
        x = out(xmm_reg) out,
        options(pure, nomem, nostack, preserves_flags),
    );
    out
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
