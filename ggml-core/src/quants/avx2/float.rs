//! AVX2 dots of F32, F16 and BF16 rows (f32 accumulation with FMA, four
//! independent accumulators of 8 lanes, scalar tail).

use std::arch::x86_64::*;

use super::{hsum_ps, load128};
use crate::quants::blocks::float::bf16_bits_to_f32;
use crate::quants::prefetch::prefetch_ahead;

/// `Σ x[i]·y[i]` in 32-element steps, `$load(p, i)` giving 8 f32 lanes of
/// row `p` at element `i`, `$tail` one element.
macro_rules! dot_kernel {
    ($n:expr, $x:expr, $y:expr, $load:expr, $tail:expr, $esize:expr) => {{
        let (n, x, y) = ($n, $x, $y);
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            prefetch_ahead(x.as_ptr().add($esize * i), 32 * $esize);
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps($load(x, i + 8 * k), $load(y, i + 8 * k), *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps($load(x, i), $load(y, i), acc[0]);
            i += 8;
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut s = hsum_ps(sum);
        while i < n {
            s += $tail(x, i) * $tail(y, i);
            i += 1;
        }
        s
    }};
}

/// 8 lanes of an f32 row at element `i` (caller keeps `i + 8` in bounds).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f32(p: &[u8], i: usize) -> __m256 {
    _mm256_loadu_ps(p.as_ptr().add(4 * i) as *const f32)
}

fn tail_f32(p: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]])
}

/// 8 lanes of an f16 row at element `i` (caller keeps `i + 8` in bounds).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16(p: &[u8], i: usize) -> __m256 {
    _mm256_cvtph_ps(load128(p.as_ptr().add(2 * i)))
}

fn tail_f16(p: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([p[2 * i], p[2 * i + 1]])).to_f32()
}

/// 8 lanes of a bf16 row at element `i` (caller keeps `i + 8` in bounds).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_bf16(p: &[u8], i: usize) -> __m256 {
    let w = _mm256_cvtepu16_epi32(load128(p.as_ptr().add(2 * i)));
    _mm256_castsi256_ps(_mm256_slli_epi32(w, 16))
}

fn tail_bf16(p: &[u8], i: usize) -> f32 {
    bf16_bits_to_f32(u16::from_le_bytes([p[2 * i], p[2 * i + 1]]))
}

/// `Σ x[i]·y[i]` over `n` f32 (little-endian bytes; both slices hold exactly `4n` bytes).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f32(n: usize, x: &[u8], y: &[u8]) -> f32 {
    assert!(x.len() == 4 * n && y.len() == 4 * n);
    dot_kernel!(n, x, y, load_f32, tail_f32, 4)
}

/// `Σ x[i]·y[i]` over `n` f16 (both slices hold exactly `2n` bytes).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_f16(n: usize, x: &[u8], y: &[u8]) -> f32 {
    assert!(x.len() == 2 * n && y.len() == 2 * n);
    dot_kernel!(n, x, y, load_f16, tail_f16, 2)
}

/// `Σ x[i]·y[i]` over `n` bf16 (both slices hold exactly `2n` bytes).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_bf16(n: usize, x: &[u8], y: &[u8]) -> f32 {
    assert!(x.len() == 2 * n && y.len() == 2 * n);
    dot_kernel!(n, x, y, load_bf16, tail_bf16, 2)
}

/// F16 → f32 for a row (`src.len() == 2 * dst.len()`, checked by the
/// caller): 8 at a time with F16C, the tail one by one (both exact).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_to_f32_row(src: &[u8], dst: &mut [f32]) {
    let n = dst.len().min(src.len() / 2);
    let mut i = 0;
    while i + 8 <= n {
        let h = load128(src.as_ptr().add(2 * i));
        _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        i += 8;
    }
    while i < n {
        let h = u16::from_le_bytes([src[2 * i], src[2 * i + 1]]);
        dst[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)));
        i += 1;
    }
}

/// f32 → F16 for a row (`dst.len() == 2 * src.len()`, checked by the
/// caller), rounding to nearest even: 8 at a time with F16C, the tail one
/// by one.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f32_to_f16_row(src: &[f32], dst: &mut [u8]) {
    let n = src.len().min(dst.len() / 2);
    let mut i = 0;
    while i + 8 <= n {
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(src.as_ptr().add(i)));
        _mm_storeu_si128(dst.as_mut_ptr().add(2 * i) as *mut __m128i, h);
        i += 8;
    }
    while i < n {
        let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(src[i]));
        let b = (_mm_cvtsi128_si32(h) as u16).to_le_bytes();
        dst[2 * i] = b[0];
        dst[2 * i + 1] = b[1];
        i += 1;
    }
}
