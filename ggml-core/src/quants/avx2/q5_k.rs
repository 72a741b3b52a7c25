//! AVX2 Q5_K kernels: `ggml_vec_dot_q5_K_q8_K` (decode) and the GEMM with
//! a panel of 8 columns (prompts), bit for bit the dot per column.

use std::arch::x86_64::*;

use super::k_gemm::{check_panel, finish_min, step, step_mins, sub_block};
use super::q4_k::{block_scales, broadcast_i16_lane, row_scales_mins};
use super::{f16_to_f32, hsum_ps, load256};
use crate::quants::blocks::k_quants::panel::BLOCK_BYTES;
use crate::quants::blocks::k_quants::q5_k::BlockQ5K;
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::gemm::GEMM_COLS;
use crate::quants::prefetch::prefetch_block_ahead;

/// 16 in each byte whose bit `bit` is set in `h`, else 0.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn high_bit(h: __m256i, bit: usize) -> __m256i {
    let m = _mm256_set1_epi8((1u8 << bit) as i8);
    _mm256_and_si256(
        _mm256_cmpeq_epi8(_mm256_and_si256(h, m), m),
        _mm256_set1_epi8(16),
    )
}

/// `ggml_vec_dot_q5_K_q8_K` over equally long block slices.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_k_q8_k(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len());
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (bx, by) in x.iter().zip(y) {
        prefetch_block_ahead(bx);
        let (d, scales) = block_scales(
            f16_to_f32(bx.d),
            f16_to_f32(bx.dmin),
            &bx.scales,
            by,
            &mut acc_m,
        );
        let hbits = load256(bx.qh.as_ptr());
        let q5 = bx.qs.as_ptr();
        let q8 = by.qs.as_ptr();
        let mut sumi = _mm256_setzero_si256();
        for j in 0..4 {
            let bits = load256(q5.add(32 * j));
            let ql = _mm256_or_si256(_mm256_and_si256(bits, m4), high_bit(hbits, 2 * j));
            let qh = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                high_bit(hbits, 2 * j + 1),
            );
            let pl = _mm256_maddubs_epi16(ql, load256(q8.add(64 * j)));
            let ph = _mm256_maddubs_epi16(qh, load256(q8.add(64 * j + 32)));
            let pl = _mm256_madd_epi16(broadcast_i16_lane(scales, 2 * j), pl);
            let ph = _mm256_madd_epi16(broadcast_i16_lane(scales, 2 * j + 1), ph);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    let m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    let m = _mm_add_ss(m, _mm_movehdup_ps(m));
    hsum_ps(acc) + _mm_cvtss_f32(m)
}

/// One Q5_K weight row against a Q8_K panel: `out[t]` =
/// `dot_q5_k_q8_k(x, column t)`, bit for bit (as the Q4_K GEMM).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q5_k_q8_k(x: &[BlockQ5K], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    check_panel(x.len(), panel);
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_ps(); GEMM_COLS];
    let mut acc_m = [_mm256_setzero_ps(); 4];
    for (b, bx) in x.iter().enumerate() {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let (mins16, scales) = row_scales_mins(&bx.scales);
        let hbits = load256(bx.qh.as_ptr());
        let q5 = bx.qs.as_ptr();
        let mut ia = [_mm256_setzero_si256(); GEMM_COLS];
        for j in 0..4 {
            let bits = load256(q5.add(32 * j));
            let lo = _mm256_or_si256(_mm256_and_si256(bits, m4), high_bit(hbits, 2 * j));
            sub_block(&mut ia, p, 2 * j, lo, broadcast_i16_lane(scales, 2 * j));
            let hi = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                high_bit(hbits, 2 * j + 1),
            );
            sub_block(
                &mut ia,
                p,
                2 * j + 1,
                hi,
                broadcast_i16_lane(scales, 2 * j + 1),
            );
        }
        step_mins(&mut acc_m, p, f16_to_f32(bx.dmin), mins16);
        step(&mut acc, p, f16_to_f32(bx.d), &ia);
    }
    finish_min(&acc, &acc_m, out);
}
