//! AVX2 `ggml_vec_dot_q3_K_q8_K`.

use std::arch::x86_64::*;
use std::ptr::addr_of;

use super::{f16_to_f32, hsum_ps, load256, sum_alternating};
use crate::quants::blocks::k_quants::q3_k::BlockQ3K;
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::prefetch::prefetch_block_ahead;

/// The 16 i16 scales `sc16` as two vectors: `[n]` holds scales
/// `8n..8n + 8` in both 128-bit halves.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn scale_halves(sc16: __m256i) -> [__m256i; 2] {
    [
        _mm256_permute2x128_si256(sc16, sc16, 0x00),
        _mm256_permute2x128_si256(sc16, sc16, 0x11),
    ]
}

/// From `v` (8 i16 scales in both halves, see [`scale_halves`]): scale
/// `2j` in every lane of the low half, `2j + 1` in the high half — the
/// scales of the two 16-element sub-blocks a 32-byte vector covers.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn pair_scales(v: __m256i, j: usize) -> __m256i {
    let lo = (((4 * j + 1) << 8) | (4 * j)) as i16;
    let hi = (((4 * j + 3) << 8) | (4 * j + 2)) as i16;
    _mm256_shuffle_epi8(v, _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo)))
}

/// The 16 signed 6-bit scales (minus 32) of a Q3_K block as i8 lanes, as
/// the scalar `unpack_scales`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_scales(s: &[u8; 12]) -> __m128i {
    const KM1: u32 = 0x0303_0303;
    const KM2: u32 = 0x0f0f_0f0f;
    let a0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let a1 = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
    let a2 = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    // scale j: low nibble of s[j % 8] (high nibble for j ≥ 8), and bits
    // 2·(j / 4) of s[8 + j % 4] on top
    let w0 = (a0 & KM2) | ((a2 & KM1) << 4);
    let w1 = (a1 & KM2) | (((a2 >> 2) & KM1) << 4);
    let w2 = ((a0 >> 4) & KM2) | (((a2 >> 4) & KM1) << 4);
    let w3 = ((a1 >> 4) & KM2) | (((a2 >> 6) & KM1) << 4);
    let v = _mm_set_epi32(w3 as i32, w2 as i32, w1 as i32, w0 as i32);
    _mm_sub_epi8(v, _mm_set1_epi8(32))
}

/// `ggml_vec_dot_q3_K_q8_K` over equally long block slices. Each value is
/// taken as the unsigned `q + 4` (low bits | 4 when its `hmask` bit is
/// set), and the `-4` applied once per block through the Q8_K sums:
/// `Σ sc·q·y = Σ sc·(q+4)·y - 4·Σ sc·bsum`. All integer sums are exact:
/// `maddubs` pairs are at most 2·7·128, the scales at most 32 in magnitude.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q3_k_q8_k(x: &[BlockQ3K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len());
    let m3 = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    let (a0, a1) = sum_alternating(x.len(), |k, acc| {
        // SAFETY: k < x.len() == y.len() (`sum_alternating` passes k < n).
        let (bx, by) = (x.get_unchecked(k), y.get_unchecked(k));
        prefetch_block_ahead(bx);
        let d = f16_to_f32(bx.d) * by.d;
        let scales = bx.scales;
        let sc = unpack_scales(&scales);
        let sc16 = _mm256_cvtepi8_epi16(sc);
        let halves = scale_halves(sc16);
        let offset = _mm256_madd_epi16(sc16, load256(addr_of!(by.bsums)));
        let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 2));
        let hm = load256(bx.hmask.as_ptr());
        for (n, &half) in halves.iter().enumerate() {
            let mut qs = load256(bx.qs.as_ptr().add(32 * n));
            for j in 0..4 {
                // bits 2j of each byte (16-bit shifts keep bytes apart here)
                let ql = _mm256_and_si256(qs, m3);
                qs = _mm256_srli_epi16(qs, 2);
                let bit = _mm256_set1_epi8((1u8 << (4 * n + j)) as i8);
                let hi = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                let q = _mm256_or_si256(ql, _mm256_and_si256(hi, four));
                let p = _mm256_maddubs_epi16(q, load256(by.qs.as_ptr().add(128 * n + 32 * j)));
                let s16 = pair_scales(half, j);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s16));
            }
        }
        _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc)
    });
    hsum_ps(_mm256_add_ps(a0, a1))
}
