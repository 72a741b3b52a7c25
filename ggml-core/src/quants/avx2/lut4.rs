//! AVX2 dots of the 4-bit lookup-table types (IQ4_NL, MXFP4 against Q8_0;
//! IQ4_XS against Q8_K): nibbles become table values with one `pshufb`.

use std::arch::x86_64::*;

use super::k_gemm::{check_panel, finish, step};
use super::legacy::{dot_q8_0_cols_with, mul_sum_i8};
use super::{f16_to_f32, hsum_ps, load128, load256, sum_alternating};
use crate::quants::blocks::iq4_nl::{BlockIq4Nl, KVALUES_IQ4NL};
use crate::quants::blocks::iq4_xs::BlockIq4Xs;
use crate::quants::blocks::k_quants::panel::BLOCK_BYTES;
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::blocks::mxfp4::{e8m0_to_f32_half, BlockMxfp4, KVALUES_MXFP4};
use crate::quants::blocks::q8_0::BlockQ8_0;
use crate::quants::gemm::GEMM_COLS;
use crate::quants::prefetch::prefetch_block_ahead;

/// The 16-entry i8 table in both 128-bit halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn table(values: &[i8; 16]) -> __m256i {
    let t = load128(values.as_ptr());
    _mm256_set_m128i(t, t)
}

/// The 32 table values of 16 nibble bytes at `qs` (low nibbles are elements
/// 0..16, high nibbles 16..32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn lookup(table: __m256i, qs: *const u8) -> __m256i {
    let raw = load128(qs);
    let nib = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),
        _mm256_set1_epi8(0x0f),
    );
    _mm256_shuffle_epi8(table, nib)
}

/// `ggml_vec_dot_iq4_nl_q8_0` over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_iq4_nl_q8_0(x: &[BlockIq4Nl], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len());
    let t = table(&KVALUES_IQ4NL);
    let (a0, a1) = sum_alternating(x.len(), |k, acc| {
        // SAFETY: k < x.len() == y.len() (`sum_alternating` passes k < n).
        let (bx, by) = (x.get_unchecked(k), y.get_unchecked(k));
        prefetch_block_ahead(bx);
        let d = _mm256_set1_ps(f16_to_f32(bx.d) * f16_to_f32(by.d));
        let q = mul_sum_i8(lookup(t, bx.qs.as_ptr()), load256(by.qs.as_ptr()));
        _mm256_fmadd_ps(d, q, acc)
    });
    hsum_ps(_mm256_add_ps(a0, a1))
}

/// `ggml_vec_dot_mxfp4_q8_0` over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_mxfp4_q8_0(x: &[BlockMxfp4], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len());
    let t = table(&KVALUES_MXFP4);
    let (a0, a1) = sum_alternating(x.len(), |k, acc| {
        // SAFETY: k < x.len() == y.len() (`sum_alternating` passes k < n).
        let (bx, by) = (x.get_unchecked(k), y.get_unchecked(k));
        prefetch_block_ahead(bx);
        let d = _mm256_set1_ps(e8m0_to_f32_half(bx.e) * f16_to_f32(by.d));
        let q = mul_sum_i8(lookup(t, bx.qs.as_ptr()), load256(by.qs.as_ptr()));
        _mm256_fmadd_ps(d, q, acc)
    });
    hsum_ps(_mm256_add_ps(a0, a1))
}

/// The 6-bit scale of IQ4_XS sub-block `ib` (0..8), before the `- 32`.
#[inline]
pub(crate) fn sub_scale(bx: &BlockIq4Xs, ib: usize) -> i16 {
    let sh = u16::from_le(bx.scales_h);
    ((bx.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) as i16 | ((((sh >> (2 * ib)) & 3) as i16) << 4)
}

/// `ggml_vec_dot_iq4_xs_q8_K` over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_iq4_xs_q8_k(x: &[BlockIq4Xs], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len());
    let t = table(&KVALUES_IQ4NL);
    let mut acc = _mm256_setzero_ps();
    for (bx, by) in x.iter().zip(y) {
        prefetch_block_ahead(bx);
        let mut sumi = _mm256_setzero_si256();
        for ib in 0..8 {
            let ls = sub_scale(bx, ib);
            let qx = lookup(t, bx.qs.as_ptr().add(16 * ib));
            let qy = load256(by.qs.as_ptr().add(32 * ib));
            // |qx| ≤ 127 and qy ≠ -128, so maddubs cannot saturate
            let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, _mm256_set1_epi16(ls - 32)));
        }
        let d = f16_to_f32(bx.d) * by.d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}

/// One IQ4_NL weight row against `C` Q8_0 activation rows:
/// `out[c] = dot_iq4_nl_q8_0(x, ys[c])`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_iq4_nl_q8_0_cols<const C: usize>(
    x: &[BlockIq4Nl],
    ys: [&[BlockQ8_0]; C],
    out: &mut [f32],
) {
    let t = table(&KVALUES_IQ4NL);
    dot_q8_0_cols_with(x, ys, out, |bx: &BlockIq4Nl| {
        (f16_to_f32(bx.d), lookup(t, bx.qs.as_ptr()))
    })
}

/// One MXFP4 weight row against `C` Q8_0 activation rows:
/// `out[c] = dot_mxfp4_q8_0(x, ys[c])`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_mxfp4_q8_0_cols<const C: usize>(
    x: &[BlockMxfp4],
    ys: [&[BlockQ8_0]; C],
    out: &mut [f32],
) {
    let t = table(&KVALUES_MXFP4);
    dot_q8_0_cols_with(x, ys, out, |bx: &BlockMxfp4| {
        (e8m0_to_f32_half(bx.e), lookup(t, bx.qs.as_ptr()))
    })
}

/// One IQ4_XS weight row against `C` Q8_K activation rows:
/// `out[c] = dot_iq4_xs_q8_k(x, ys[c])`, bit for bit: the table lookups,
/// absolute values and sub-block scales are made once for all columns.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_iq4_xs_q8_k_cols<const C: usize>(
    x: &[BlockIq4Xs],
    ys: [&[BlockQ8K]; C],
    out: &mut [f32],
) {
    assert_eq!(out.len(), C);
    for y in ys {
        assert_eq!(x.len(), y.len());
    }
    let t = table(&KVALUES_IQ4NL);
    let mut acc = [_mm256_setzero_ps(); C];
    for (b, bx) in x.iter().enumerate() {
        let mut sumi = [_mm256_setzero_si256(); C];
        for ib in 0..8 {
            let ls = sub_scale(bx, ib);
            let qx = lookup(t, bx.qs.as_ptr().add(16 * ib));
            let ax = _mm256_sign_epi8(qx, qx);
            let scale = _mm256_set1_epi16(ls - 32);
            for c in 0..C {
                let qy = load256(ys[c].get_unchecked(b).qs.as_ptr().add(32 * ib));
                let p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx));
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p16, scale));
            }
        }
        let dx = f16_to_f32(bx.d);
        for c in 0..C {
            let d = dx * ys[c].get_unchecked(b).d;
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for c in 0..C {
        out[c] = hsum_ps(acc[c]);
    }
}

/// One IQ4_XS weight row against a Q8_K panel of 8 columns
/// ([`crate::quants::blocks::k_quants::panel`]): `out[t]` =
/// `dot_iq4_xs_q8_k(x, column t)`, bit for bit (the same integer lanes,
/// one f32 accumulator per column, stepped as the dot steps it).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_iq4_xs_q8_k(x: &[BlockIq4Xs], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    check_panel(x.len(), panel);
    let t = table(&KVALUES_IQ4NL);
    let mut acc = [_mm256_setzero_ps(); GEMM_COLS];
    for (b, bx) in x.iter().enumerate() {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let mut ia = [_mm256_setzero_si256(); GEMM_COLS];
        for ib in 0..8 {
            let qx = lookup(t, bx.qs.as_ptr().add(16 * ib));
            let ax = _mm256_sign_epi8(qx, qx);
            let scale = _mm256_set1_epi16(sub_scale(bx, ib) - 32);
            let q = p.add(ib * GEMM_COLS * 32);
            for (c, a) in ia.iter_mut().enumerate() {
                let sy = _mm256_sign_epi8(load256(q.add(32 * c)), qx);
                let p16 = _mm256_maddubs_epi16(ax, sy);
                *a = _mm256_add_epi32(*a, _mm256_madd_epi16(p16, scale));
            }
        }
        step(&mut acc, p, f16_to_f32(bx.d), &ia);
    }
    finish(&acc, out);
}
