//! AVX2 Q6_K kernels: `ggml_vec_dot_q6_K_q8_K` (decode) and the GEMM with
//! a panel of 8 columns (prompts), bit for bit the dot per column.

use std::arch::x86_64::*;
use std::ptr::addr_of;

use super::k_gemm::{check_panel, col_bsums, finish, step, sub_block};
use super::{f16_to_f32, hsum_ps, load128, load256};
use crate::quants::blocks::k_quants::panel::BLOCK_BYTES;
use crate::quants::blocks::k_quants::q6_k::BlockQ6K;
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::gemm::GEMM_COLS;
use crate::quants::prefetch::prefetch_block_ahead;

/// `ggml_vec_dot_q6_K_q8_K` over equally long block slices. The `-32`
/// offset is applied once per block through the Q8_K sums:
/// `Σ sc·(q-32)·y = Σ sc·q·y - 32·Σ sc·bsum`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q6_k_q8_k(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len());
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(0x03);
    let m2s = [0x03u8, 0x0c, 0x30, 0xc0].map(|m| _mm256_set1_epi8(m as i8));
    let mut acc = _mm256_setzero_ps();
    for (bx, by) in x.iter().zip(y) {
        prefetch_block_ahead(bx);
        let d = f16_to_f32(bx.d) * by.d;
        let sc = load128(bx.scales.as_ptr());
        let offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), load256(addr_of!(by.bsums)));
        let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
        for h in 0..2 {
            let ql_a = load256(bx.ql.as_ptr().add(64 * h));
            let ql_b = load256(bx.ql.as_ptr().add(64 * h + 32));
            let qh = load256(bx.qh.as_ptr().add(32 * h));
            let q = [
                _mm256_or_si256(
                    _mm256_and_si256(ql_a, m4),
                    _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4),
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
            ];
            for (k, &qk) in q.iter().enumerate() {
                let p = _mm256_maddubs_epi16(qk, load256(by.qs.as_ptr().add(128 * h + 32 * k)));
                // scales of the two 16-element halves: is, is + 1
                let is = (8 * h + 2 * k) as u64;
                let lanes = 0x0101_0101_0101_0101u64;
                let mask = _mm_set_epi64x(((is + 1) * lanes) as i64, (is * lanes) as i64);
                let s16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, mask));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s16));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}

/// One Q6_K weight row against a Q8_K panel: `out[t]` =
/// `dot_q6_k_q8_k(x, column t)`, bit for bit: the same integer lanes
/// (products, then the `-32` offset through the column's sums), the same
/// f32 accumulator and steps, kept per column.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q6_k_q8_k(x: &[BlockQ6K], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    check_panel(x.len(), panel);
    let m4 = _mm256_set1_epi8(0x0f);
    let m2s = [0x03u8, 0x0c, 0x30, 0xc0].map(|m| _mm256_set1_epi8(m as i8));
    let mut acc = [_mm256_setzero_ps(); GEMM_COLS];
    for (b, bx) in x.iter().enumerate() {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let sc = load128(bx.scales.as_ptr());
        let sc16 = _mm256_cvtepi8_epi16(sc);
        let mut ia = [_mm256_setzero_si256(); GEMM_COLS];
        for (t, a) in ia.iter_mut().enumerate() {
            let offset = _mm256_madd_epi16(sc16, col_bsums(p, t));
            *a = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
        }
        for h in 0..2 {
            let ql_a = load256(bx.ql.as_ptr().add(64 * h));
            let ql_b = load256(bx.ql.as_ptr().add(64 * h + 32));
            let qh = load256(bx.qh.as_ptr().add(32 * h));
            let q = [
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
            ];
            for (k, &qk) in q.iter().enumerate() {
                let is = (8 * h + 2 * k) as u64;
                let lanes = 0x0101_0101_0101_0101u64;
                let mask = _mm_set_epi64x(((is + 1) * lanes) as i64, (is * lanes) as i64);
                let s16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, mask));
                sub_block(&mut ia, p, 4 * h + k, qk, s16);
            }
        }
        step(&mut acc, p, f16_to_f32(bx.d), &ia);
    }
    finish(&acc, out);
}
