//! Q6_K GEMM at the AVX-512 levels: a weight row against a Q8_K panel of
//! 8 columns, bit for bit the AVX2 GEMM (and so the AVX2 dot) per column:
//! the AVX2 kernel's codes, scales and `-32` offsets, the integer lanes
//! two columns a register ([`super::k_gemm`]), the AVX2 f32 steps.

use std::arch::x86_64::*;

use super::k_gemm::{join, split, sub_block, sub_block_vnni};
use crate::quants::avx2::k_gemm::{check_panel, col_bsums, finish, step};
use crate::quants::avx2::{f16_to_f32, load128, load256};
use crate::quants::blocks::k_quants::panel::BLOCK_BYTES;
use crate::quants::blocks::k_quants::q6_k::BlockQ6K;
use crate::quants::gemm::GEMM_COLS;

/// `fn $name(x, panel, out)`: the Q6_K GEMM with the features `$feat`
/// and the integer step `$sub`.
macro_rules! gemm_q6_k {
    ($name:ident, $feat:literal, $sub:ident) => {
        /// One Q6_K weight row against a Q8_K panel: `out[t]` =
        /// `dot_q6_k_q8_k(x, column t)` of AVX2, bit for bit.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $name(x: &[BlockQ6K], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
            check_panel(x.len(), panel);
            let m4 = _mm256_set1_epi8(0x0f);
            let m2s = [0x03u8, 0x0c, 0x30, 0xc0].map(|m| _mm256_set1_epi8(m as i8));
            let mut acc = [_mm256_setzero_ps(); GEMM_COLS];
            for (b, bx) in x.iter().enumerate() {
                let p = panel.as_ptr().add(b * BLOCK_BYTES);
                let sc = load128(bx.scales.as_ptr());
                let sc16 = _mm256_cvtepi8_epi16(sc);
                let init: [__m256i; GEMM_COLS] = std::array::from_fn(|t| {
                    let offset = _mm256_madd_epi16(sc16, col_bsums(p, t));
                    _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5))
                });
                let mut ia = join(&init);
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
                        $sub(&mut ia, p, 4 * h + k, qk, s16);
                    }
                }
                step(&mut acc, p, f16_to_f32(bx.d), &split(&ia));
            }
            finish(&acc, out);
        }
    };
}

gemm_q6_k!(
    gemm_q6_k_q8_k,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    sub_block
);
gemm_q6_k!(
    gemm_q6_k_q8_k_vnni,
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c",
    sub_block_vnni
);
