//! AVX2 activation quantizers: `quantize_row_q8_0_ref` and
//! `quantize_row_q8_K_ref` bit for bit (prompt processing quantizes every
//! activation row once per matrix product, and the scalar rounding calls
//! into libm per value).

use std::arch::x86_64::*;

use half::f16;

use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::blocks::k_quants::QK_K;
use crate::quants::blocks::q8_0::{BlockQ8_0, QK8_0};

/// Largest lane of `v` (no NaN in `v`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hmax_ps(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    _mm_cvtss_f32(m)
}

/// `max(acc, |v|)` lane by lane, a NaN in `v` leaving `acc` (as
/// `f32::max` and ggml's `MAX` loops skip NaNs).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn max_abs(acc: __m256, v: __m256) -> __m256 {
    let abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0), v);
    // maxps returns its second operand when either is NaN
    _mm256_max_ps(abs, acc)
}

/// Rounded lanes to i32 as Rust's saturating `as` cast and then a clamp to
/// `-128..=127` would give them: NaN becomes 0, the rest is clamped in
/// float (exact) and converted.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn clamp_to_i32(r: __m256) -> __m256i {
    let ord = _mm256_cmp_ps(r, r, _CMP_ORD_Q);
    let r = _mm256_and_ps(r, ord);
    let r = _mm256_min_ps(
        _mm256_max_ps(r, _mm256_set1_ps(-128.0)),
        _mm256_set1_ps(127.0),
    );
    _mm256_cvttps_epi32(r)
}

/// Four vectors of 8 i32 (each in -128..=127) as 32 bytes in lane order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pack_i8(q: [__m256i; 4]) -> __m256i {
    let a = _mm256_packs_epi32(q[0], q[1]);
    let b = _mm256_packs_epi32(q[2], q[3]);
    let p = _mm256_packs_epi16(a, b);
    // the packs interleave 128-bit lanes: 0 2 4 6 1 3 5 7 (in 4-byte groups)
    _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// `quantize_row_q8_0_ref`: `d = amax/127`, `q = roundf(x/d)` (half away
/// from zero), saturated as the scalar `as i8` cast.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_row_q8_0(x: &[f32], y: &mut [BlockQ8_0]) {
    assert_eq!(x.len(), y.len() * QK8_0);
    let sign = _mm256_set1_ps(-0.0);
    let half = _mm256_set1_ps(0.5);
    let one = _mm256_set1_ps(1.0);
    for (xs, b) in x.chunks_exact(QK8_0).zip(y.iter_mut()) {
        let p = xs.as_ptr();
        let v = [0, 1, 2, 3].map(|i| _mm256_loadu_ps(p.add(8 * i)));
        let mut acc = _mm256_setzero_ps();
        for &vi in &v {
            acc = max_abs(acc, vi);
        }
        let amax = hmax_ps(acc);
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let q = v.map(|vi| {
            let s = _mm256_mul_ps(vi, id);
            // half away from zero, exactly: trunc, plus ±1 where the
            // dropped fraction is at least one half
            let t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(s, t));
            let up = _mm256_cmp_ps(frac, half, _CMP_GE_OQ);
            let step = _mm256_or_ps(_mm256_and_ps(s, sign), one);
            clamp_to_i32(_mm256_add_ps(t, _mm256_and_ps(up, step)))
        });
        b.d = f16::from_f32(d);
        _mm256_storeu_si256(b.qs.as_mut_ptr() as *mut __m256i, pack_i8(q));
    }
}

/// `quantize_row_q8_K_ref`: with `max` the first value of largest
/// magnitude, `q = clamp(nearest_int(-127/max · x), -128, 127)` (round half
/// to even), `d = 1/(-127/max)`, and the 16-value sums; an all-zero block
/// is all zeros.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_row_q8_k(x: &[f32], y: &mut [BlockQ8K]) {
    assert_eq!(x.len(), y.len() * QK_K);
    for (xs, b) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let p = xs.as_ptr();
        let mut acc = _mm256_setzero_ps();
        for i in 0..QK_K / 8 {
            acc = max_abs(acc, _mm256_loadu_ps(p.add(8 * i)));
        }
        let amax = hmax_ps(acc);
        if amax == 0.0 {
            *b = bytemuck::Zeroable::zeroed();
            continue;
        }
        // the first value with that magnitude (a NaN never equals it)
        let target = _mm256_set1_ps(amax);
        let abs_mask = _mm256_set1_ps(-0.0);
        let mut max = amax;
        for i in 0..QK_K / 8 {
            let v = _mm256_loadu_ps(p.add(8 * i));
            let hit = _mm256_cmp_ps(_mm256_andnot_ps(abs_mask, v), target, _CMP_EQ_OQ);
            let bits = _mm256_movemask_ps(hit);
            if bits != 0 {
                max = xs[8 * i + bits.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let is = _mm256_set1_ps(iscale);
        let mut bsums = [0i16; QK_K / 16];
        for g in 0..QK_K / 32 {
            let q = [0, 1, 2, 3].map(|i| {
                let s = _mm256_mul_ps(_mm256_loadu_ps(p.add(32 * g + 8 * i)), is);
                clamp_to_i32(_mm256_round_ps(
                    s,
                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
                ))
            });
            // sums of 16: lanes 0..8 + 8..16, and 16..24 + 24..32
            for (h, pair) in [(0, [q[0], q[1]]), (1, [q[2], q[3]])] {
                let s = _mm256_add_epi32(pair[0], pair[1]);
                let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                let s = _mm_hadd_epi32(s, s);
                let s = _mm_hadd_epi32(s, s);
                bsums[2 * g + h] = _mm_cvtsi128_si32(s) as i16;
            }
            _mm256_storeu_si256(b.qs.as_mut_ptr().add(32 * g) as *mut __m256i, pack_i8(q));
        }
        b.bsums = bsums;
        b.d = 1.0 / iscale;
    }
}
