//! AVX2 Q6_K kernels: the dot with one Q8_K row (decode) and the GEMM with
//! a panel of 8 (prompts), both computing
//! [`crate::quants::k_quants::q6_k`]'s formula, so with the same bits.
//! The `-32` offset is applied once per block through the Q8_K sums:
//! `Σ sc·(q-32)·y = Σ sc·q·y - 32·Σ sc·bsum`.

use std::arch::x86_64::*;
use std::ptr::addr_of;

use super::k_gemm::{check_panel, col_scales, hsum_epi32, reduce, step, sub_block, weighted_bsums};
use super::{f16_to_f32, load128, load256};
use crate::quants::gemm::GEMM_COLS;
use crate::quants::k_quants::acc_offset;
use crate::quants::k_quants::panel::BLOCK_BYTES;
use crate::quants::k_quants::q6_k::BlockQ6K;
use crate::quants::k_quants::q8_k::BlockQ8K;

/// The unsigned 6-bit codes (0..64) of the four 32-value sub-blocks of
/// half `h` of a block: sub-block `4h + k` is element `k`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn codes(bx: &BlockQ6K, h: usize) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0f);
    let m2s = [0x03u8, 0x0c, 0x30, 0xc0].map(|m| _mm256_set1_epi8(m as i8));
    let ql_a = load256(bx.ql.as_ptr().add(64 * h));
    let ql_b = load256(bx.ql.as_ptr().add(64 * h + 32));
    let qh = load256(bx.qh.as_ptr().add(32 * h));
    [
        _mm256_or_si256(
            _mm256_and_si256(ql_a, m4),
            _mm256_slli_epi16(_mm256_and_si256(qh, m2s[0]), 4),
        ),
        _mm256_or_si256(
            _mm256_and_si256(ql_b, m4),
            _mm256_slli_epi16(_mm256_and_si256(qh, m2s[1]), 2),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(ql_a, 4), m4),
            _mm256_and_si256(qh, m2s[2]),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(ql_b, 4), m4),
            _mm256_srli_epi16(_mm256_and_si256(qh, m2s[3]), 2),
        ),
    ]
}

/// The Q6_K dot over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q6_k_q8_k(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len());
    let mut acc = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let sc = load128(bx.scales.as_ptr());
        let offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), load256(addr_of!(by.bsums)));
        let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
        for h in 0..2 {
            for (k, qk) in codes(bx, h).into_iter().enumerate() {
                let p = _mm256_maddubs_epi16(qk, load256(by.qs.as_ptr().add(128 * h + 32 * k)));
                // scales of the two 16-element halves: is, is + 1
                let is = (8 * h + 2 * k) as u64;
                let lanes = 0x0101_0101_0101_0101u64;
                let mask = _mm_set_epi64x(((is + 1) * lanes) as i64, (is * lanes) as i64);
                let s16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, mask));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s16));
            }
        }
        acc = acc_offset(acc, by.d, f16_to_f32(bx.d), hsum_epi32(sumi));
    }
    acc
}

/// One Q6_K weight row against a Q8_K panel: `out[t]` =
/// `dot_q6_k_q8_k(x, column t)`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q6_k_q8_k(x: &[BlockQ6K], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    check_panel(x.len(), panel);
    let mut acc = _mm256_setzero_ps();
    for (b, bx) in x.iter().enumerate() {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let sc = bx.scales;
        let mut ia = [_mm256_setzero_si256(); GEMM_COLS];
        for h in 0..2 {
            for (k, qk) in codes(bx, h).into_iter().enumerate() {
                let is = 8 * h + 2 * k;
                let scale = _mm256_set_m128i(
                    _mm_set1_epi16(sc[is + 1] as i16),
                    _mm_set1_epi16(sc[is] as i16),
                );
                sub_block(&mut ia, p, 4 * h + k, qk, scale);
            }
        }
        let qsum = reduce(&ia);
        let pairs: [__m256i; 8] = std::array::from_fn(|k| {
            let lo = sc[2 * k] as i16 as u16 as u32;
            let hi = sc[2 * k + 1] as i16 as u16 as u32;
            _mm256_set1_epi32((lo | (hi << 16)) as i32)
        });
        let csum = weighted_bsums(p, &pairs);
        let isum = _mm256_sub_epi32(qsum, _mm256_slli_epi32(csum, 5));
        acc = step(acc, col_scales(p), f16_to_f32(bx.d), isum);
    }
    _mm256_storeu_ps(out.as_mut_ptr(), acc);
}
