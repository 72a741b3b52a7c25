//! The AVX-512 dot of BF16 rows, bit for bit the AVX2 one
//! (`quants::avx2::float`): the AVX2 kernel's four 8-lane accumulators
//! live two to a 512-bit register (the low half accumulator 0 or 2, the
//! high half 1 or 3), fed by the same fused multiply-adds on the same
//! elements; the 8-element tail, the sum `(a0 + a1) + (a2 + a3)` and the
//! scalar tail are the AVX2 kernel's, on the extracted halves. (The F16
//! dot in this form measured 0.81x the AVX2 one on Zen 4, the BF16 one
//! 1.11x, `cargo bench -p ggml-core --bench levels -- f16 bf16`: F16 keeps
//! AVX2's, whose 256-bit `vcvtph2ps` is cheaper there.)

use std::arch::x86_64::*;

use crate::quants::avx2::hsum_ps;
use crate::quants::blocks::float::bf16_bits_to_f32;
use crate::quants::prefetch::prefetch_ahead;

/// `Σ x[i]·y[i]`, `$load16(p, i)` giving 16 f32 lanes of row `p` at element
/// `i`, `$load8` 8 lanes, `$tail` one element (as the AVX2 `dot_kernel!`).
macro_rules! dot_kernel {
    ($n:expr, $x:expr, $y:expr, $load16:expr, $load8:expr, $tail:expr, $esize:expr) => {{
        let (n, x, y) = ($n, $x, $y);
        // [a0 | a1] and [a2 | a3] of the AVX2 kernel
        let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let mut i = 0;
        while i + 32 <= n {
            prefetch_ahead(x.as_ptr().add($esize * i), 32 * $esize);
            lo = _mm512_fmadd_ps($load16(x, i), $load16(y, i), lo);
            hi = _mm512_fmadd_ps($load16(x, i + 16), $load16(y, i + 16), hi);
            i += 32;
        }
        let mut a0 = _mm512_castps512_ps256(lo);
        let a1 = _mm512_extractf32x8_ps::<1>(lo);
        let a2 = _mm512_castps512_ps256(hi);
        let a3 = _mm512_extractf32x8_ps::<1>(hi);
        while i + 8 <= n {
            a0 = _mm256_fmadd_ps($load8(x, i), $load8(y, i), a0);
            i += 8;
        }
        let sum = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
        let mut s = hsum_ps(sum);
        while i < n {
            s += $tail(x, i) * $tail(y, i);
            i += 1;
        }
        s
    }};
}

/// The 256-bit row bytes at `p + off` (caller keeps them in bounds).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn load256(p: &[u8], off: usize) -> __m256i {
    _mm256_loadu_si256(p.as_ptr().add(off) as *const __m256i)
}

/// The 128-bit row bytes at `p + off` (caller keeps them in bounds).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn load128(p: &[u8], off: usize) -> __m128i {
    _mm_loadu_si128(p.as_ptr().add(off) as *const __m128i)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn bf16x16(p: &[u8], i: usize) -> __m512 {
    let w = _mm512_cvtepu16_epi32(load256(p, 2 * i));
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(w))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn bf16x8(p: &[u8], i: usize) -> __m256 {
    let w = _mm256_cvtepu16_epi32(load128(p, 2 * i));
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w))
}

fn bf16_at(p: &[u8], i: usize) -> f32 {
    bf16_bits_to_f32(u16::from_le_bytes([p[2 * i], p[2 * i + 1]]))
}

/// `Σ x[i]·y[i]` over `n` bf16 (both slices hold exactly `2n` bytes).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn dot_bf16(n: usize, x: &[u8], y: &[u8]) -> f32 {
    assert!(x.len() == 2 * n && y.len() == 2 * n);
    dot_kernel!(n, x, y, bf16x16, bf16x8, bf16_at, 2)
}
