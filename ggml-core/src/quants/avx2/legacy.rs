//! AVX2 dots of the 32-element block types: Q8_0, Q4_0 and Q5_0 against
//! Q8_0, Q4_1 and Q5_1 against Q8_1.

use std::arch::x86_64::*;

use super::{f16_to_f32, hsum_ps, load128, load256, sum_alternating};
use crate::quants::blocks::q4_0::BlockQ4_0;
use crate::quants::blocks::q4_1::BlockQ4_1;
use crate::quants::blocks::q5_0::BlockQ5_0;
use crate::quants::blocks::q5_1::BlockQ5_1;
use crate::quants::blocks::q8_0::BlockQ8_0;
use crate::quants::blocks::q8_1::BlockQ8_1;
use crate::quants::prefetch::prefetch_block_ahead;

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
    let (a0, a1) = sum_alternating(x.len(), |k, acc| {
        // SAFETY: k < x.len() == y.len() (`sum_alternating` passes k < n).
        let (bx, by) = (x.get_unchecked(k), y.get_unchecked(k));
        prefetch_block_ahead(bx);
        let d = _mm256_set1_ps(f16_to_f32(bx.d) * f16_to_f32(by.d));
        let q = mul_sum_i8(load256(bx.qs.as_ptr()), load256(by.qs.as_ptr()));
        _mm256_fmadd_ps(d, q, acc)
    });
    hsum_ps(_mm256_add_ps(a0, a1))
}

/// One row of 32-element blocks against `C` Q8_0 activation rows, for the
/// dots of the form `Σ_b dx_b·dy_b·Σ qx·qy` with two alternating
/// accumulators (Q8_0, Q4_0, IQ4_NL, MXFP4): `unpack` gives a block's `dx`
/// and its 32 signed values (never -128 against -128: `y` holds none),
/// made once for all columns; each column keeps the single dot's
/// accumulators in its order, so `out[c]` is the single dot bit for bit.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q8_0_cols_with<B, const C: usize>(
    x: &[B],
    ys: [&[BlockQ8_0]; C],
    out: &mut [f32],
    unpack: impl Fn(&B) -> (f32, __m256i),
) {
    assert_eq!(out.len(), C);
    for y in ys {
        assert_eq!(x.len(), y.len());
    }
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); 2]; C];
    for (k, bx) in x.iter().enumerate() {
        let (dx, xq) = unpack(bx);
        let ax = _mm256_sign_epi8(xq, xq);
        for c in 0..C {
            let by = ys[c].get_unchecked(k);
            let d = _mm256_set1_ps(dx * f16_to_f32(by.d));
            // as `mul_sum_i8`
            let sy = _mm256_sign_epi8(load256(by.qs.as_ptr()), xq);
            let p16 = _mm256_maddubs_epi16(ax, sy);
            let q = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            acc[c][k & 1] = _mm256_fmadd_ps(d, q, acc[c][k & 1]);
        }
    }
    for c in 0..C {
        out[c] = hsum_ps(_mm256_add_ps(acc[c][0], acc[c][1]));
    }
}

/// One Q8_0 weight row against `C` Q8_0 activation rows:
/// `out[c] = dot_q8_0_q8_0(x, ys[c])`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q8_0_q8_0_cols<const C: usize>(
    x: &[BlockQ8_0],
    ys: [&[BlockQ8_0]; C],
    out: &mut [f32],
) {
    dot_q8_0_cols_with(x, ys, out, |bx: &BlockQ8_0| {
        (f16_to_f32(bx.d), load256(bx.qs.as_ptr()))
    })
}

/// One Q4_0 weight row against `C` Q8_0 activation rows:
/// `out[c] = dot_q4_0_q8_0(x, ys[c])`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_0_q8_0_cols<const C: usize>(
    x: &[BlockQ4_0],
    ys: [&[BlockQ8_0]; C],
    out: &mut [f32],
) {
    let m4 = _mm256_set1_epi8(0x0f);
    let eight = _mm256_set1_epi8(8);
    dot_q8_0_cols_with(x, ys, out, |bx: &BlockQ4_0| {
        let raw = load128(bx.qs.as_ptr());
        let nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
        (f16_to_f32(bx.d), _mm256_sub_epi8(nib, eight))
    })
}

/// `ggml_vec_dot_q4_0_q8_0` over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len());
    let m4 = _mm256_set1_epi8(0x0f);
    let eight = _mm256_set1_epi8(8);
    let (a0, a1) = sum_alternating(x.len(), |k, acc| {
        // SAFETY: k < x.len() == y.len() (`sum_alternating` passes k < n).
        let (bx, by) = (x.get_unchecked(k), y.get_unchecked(k));
        prefetch_block_ahead(bx);
        let d = _mm256_set1_ps(f16_to_f32(bx.d) * f16_to_f32(by.d));
        // low nibbles are elements 0..16, high nibbles 16..32
        let raw = load128(bx.qs.as_ptr());
        let nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
        let qx = _mm256_sub_epi8(nib, eight);
        let q = mul_sum_i8(qx, load256(by.qs.as_ptr()));
        _mm256_fmadd_ps(d, q, acc)
    });
    hsum_ps(_mm256_add_ps(a0, a1))
}

/// The 32 bits of `qh` (little-endian) as 32 bytes: `0x10` where bit `i`
/// is set, 0 where clear (lane `i` ↔ bit `i`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fifth_bits(qh: [u8; 4]) -> __m256i {
    let bits = _mm256_set1_epi32(u32::from_le_bytes(qh) as i32);
    // byte i holds byte i / 8 of qh
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    // every bit but bit i % 8 set: all ones exactly when bit i is set
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    let set = _mm256_or_si256(_mm256_shuffle_epi8(bits, shuf), others);
    let ones = _mm256_cmpeq_epi8(set, _mm256_set1_epi8(-1));
    _mm256_and_si256(ones, _mm256_set1_epi8(0x10))
}

/// The 32 nibbles of `qs` as bytes 0..16 in element order: low nibbles are
/// elements 0..16, high nibbles 16..32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
    let raw = load128(qs.as_ptr());
    let both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0f))
}

/// `Σ x·y` of 32 unsigned bytes `x` (at most 31) and signed bytes `y` (any,
/// -128 included) as 8 i32 lanes: `maddubs` pairs are at most 2·31·128.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mul_sum_u5_i8(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

/// `ggml_vec_dot_q5_0_q8_0` over equally long block slices. The unsigned
/// values `q` (0..32) go through `maddubs` and the `-16` as `16·Σ y`, also
/// through `maddubs`; the 16-bit difference of the pairs is at most 2·16·128
/// in magnitude, so the sum is exact for every Q8_0 byte. One accumulator,
/// as ggml's AVX2 kernel (and llamafile's tinyBLAS) keeps for Q5_0.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len());
    let sixteen = _mm256_set1_epi8(16);
    let mut acc = _mm256_setzero_ps();
    for (bx, by) in x.iter().zip(y) {
        prefetch_block_ahead(bx);
        let d = _mm256_set1_ps(f16_to_f32(bx.d) * f16_to_f32(by.d));
        let qs = bx.qs;
        let q = _mm256_or_si256(nibbles(&qs), fifth_bits(bx.qh));
        let qy = load256(by.qs.as_ptr());
        let p = _mm256_sub_epi16(
            _mm256_maddubs_epi16(q, qy),
            _mm256_maddubs_epi16(sixteen, qy),
        );
        let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        acc = _mm256_fmadd_ps(d, s, acc);
    }
    hsum_ps(acc)
}

/// `ggml_vec_dot_q4_1_q8_1` over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    assert_eq!(x.len(), y.len());
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut acc_m = [0f32; 2];
    for (k, (bx, by)) in x.iter().zip(y).enumerate() {
        prefetch_block_ahead(bx);
        let d = _mm256_set1_ps(f16_to_f32(bx.d) * f16_to_f32(by.d));
        let qs = bx.qs;
        let s = mul_sum_u5_i8(nibbles(&qs), load256(by.qs.as_ptr()));
        acc[k & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[k & 1]);
        acc_m[k & 1] += f16_to_f32(bx.m) * f16_to_f32(by.s);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1])) + (acc_m[0] + acc_m[1])
}

/// `ggml_vec_dot_q5_1_q8_1` over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_1_q8_1(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    assert_eq!(x.len(), y.len());
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut acc_m = [0f32; 2];
    for (k, (bx, by)) in x.iter().zip(y).enumerate() {
        prefetch_block_ahead(bx);
        let d = _mm256_set1_ps(f16_to_f32(bx.d) * f16_to_f32(by.d));
        let qs = bx.qs;
        let q = _mm256_or_si256(nibbles(&qs), fifth_bits(bx.qh));
        let s = mul_sum_u5_i8(q, load256(by.qs.as_ptr()));
        acc[k & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc[k & 1]);
        acc_m[k & 1] += f16_to_f32(bx.m) * f16_to_f32(by.s);
    }
    hsum_ps(_mm256_add_ps(acc[0], acc[1])) + (acc_m[0] + acc_m[1])
}
