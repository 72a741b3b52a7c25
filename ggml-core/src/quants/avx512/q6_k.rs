//! Q6_K at the AVX-512 levels: the GEMM, a weight row against a Q8_K
//! panel of 8 columns, bit for bit the AVX2 GEMM (and so the AVX2 dot) per
//! column: the AVX2 kernel's codes, scales and `-32` offsets, the integer
//! lanes two columns a register ([`super::k_gemm`]), the AVX2 f32 steps;
//! and the decode dot, bit for bit the AVX2 dot, two sub-blocks a
//! register.

use std::arch::x86_64::*;

use std::ptr::addr_of;

use super::k_gemm::{join, split, Bw, Step, Vnni};
use crate::quants::avx2::k_gemm::{check_panel, col_bsums, finish, step};
use crate::quants::avx2::{f16_to_f32, hsum_ps, load128, load256};
use crate::quants::blocks::k_quants::panel::BLOCK_BYTES;
use crate::quants::blocks::k_quants::q6_k::BlockQ6K;
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::gemm::GEMM_COLS;
use crate::quants::prefetch::prefetch_block_ahead;

/// `fn $name(x, panel, out)`: the Q6_K GEMM with the features `$feat`
/// and the integer steps `$s`.
macro_rules! gemm_q6_k {
    ($name:ident, $feat:literal, $s:ty) => {
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
                        <$s as Step>::sub_block(&mut ia, p, 4 * h + k, qk, s16);
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
    Bw
);
gemm_q6_k!(
    gemm_q6_k_q8_k_vnni,
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c",
    Vnni
);

/// `fn $name(x, y) -> f32`: the Q6_K decode dot with the features `$feat`,
/// with the integer steps `$s`.
macro_rules! dot_q6_k {
    ($name:ident, $feat:literal, $s:ty) => {
        /// `dot_q6_k_q8_k` of AVX2, bit for bit: the AVX2 kernel's codes,
        /// scales, `-32` offset and f32 steps, two 32-value sub-blocks a
        /// 512-bit register, whose i32 halves are added before the
        /// block's step (the same exact integer sum as AVX2's).
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $name(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
            assert_eq!(x.len(), y.len());
            let m4 = _mm512_set1_epi8(0x0f);
            let m30 = _mm512_set1_epi8(0x30);
            // the high bits of codes k (low half) and k + 1 (high half)
            // moved to bits 4..6: << 4, << 2 for k = 0; >> 0, >> 2 for k = 2
            let shl01 = _mm512_inserti64x4::<1>(_mm512_set1_epi16(4), _mm256_set1_epi16(2));
            let shr23 = _mm512_inserti64x4::<1>(_mm512_set1_epi16(0), _mm256_set1_epi16(2));
            let lanes = 0x0101_0101_0101_0101u64;
            let mut acc = _mm256_setzero_ps();
            for (bx, by) in x.iter().zip(y) {
                prefetch_block_ahead(bx);
                let d = f16_to_f32(bx.d) * by.d;
                let sc = load128(bx.scales.as_ptr());
                let offset =
                    _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), load256(addr_of!(by.bsums)));
                let init = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
                let mut sumi =
                    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(init), _mm256_setzero_si256());
                for h in 0..2 {
                    let ql = _mm512_loadu_si512(bx.ql.as_ptr().add(64 * h) as *const _);
                    let qh = _mm512_broadcast_i64x4(load256(bx.qh.as_ptr().add(32 * h)));
                    let q01 = _mm512_or_si512(
                        _mm512_and_si512(ql, m4),
                        _mm512_and_si512(_mm512_sllv_epi16(qh, shl01), m30),
                    );
                    let q23 = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                        _mm512_and_si512(_mm512_srlv_epi16(qh, shr23), m30),
                    );
                    for (k2, q) in [q01, q23].into_iter().enumerate() {
                        let p = _mm512_maddubs_epi16(
                            q,
                            _mm512_loadu_si512(by.qs.as_ptr().add(128 * h + 64 * k2) as *const _),
                        );
                        // scales is, is + 1 (code k), is + 2, is + 3 (code k + 1)
                        let is = (8 * h + 4 * k2) as u64;
                        let m_lo = _mm_set_epi64x(((is + 1) * lanes) as i64, (is * lanes) as i64);
                        let m_hi =
                            _mm_set_epi64x(((is + 3) * lanes) as i64, ((is + 2) * lanes) as i64);
                        let s8 = _mm256_set_m128i(
                            _mm_shuffle_epi8(sc, m_hi),
                            _mm_shuffle_epi8(sc, m_lo),
                        );
                        sumi = <$s as Step>::madd_add(sumi, p, _mm512_cvtepi8_epi16(s8));
                    }
                }
                let sumi = _mm256_add_epi32(
                    _mm512_castsi512_si256(sumi),
                    _mm512_extracti64x4_epi64::<1>(sumi),
                );
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
            }
            hsum_ps(acc)
        }
    };
}

dot_q6_k!(
    dot_q6_k_q8_k,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    Bw
);
dot_q6_k!(
    dot_q6_k_q8_k_vnni,
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c",
    Vnni
);
