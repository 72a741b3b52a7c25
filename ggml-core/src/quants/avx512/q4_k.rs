//! Q4_K at the AVX-512 levels: the GEMM, a weight row against a Q8_K
//! panel of 8 columns, bit for bit the AVX2 GEMM (and so the AVX2 dot) per
//! column: the codes and scales of the AVX2 kernel, the integer lanes two
//! columns a register ([`super::k_gemm`]), the AVX2 f32 steps; and the
//! decode dot, bit for bit the AVX2 dot, two sub-blocks a register.

use std::arch::x86_64::*;

use super::k_gemm::{dpwssd, madd_add, split, sub_block, sub_block_vnni, PAIRS};
use crate::quants::avx2::k_gemm::{check_panel, finish_min, step, step_mins};
use crate::quants::avx2::q4_k::{block_scales, broadcast_i16_lane, row_scales_mins};
use crate::quants::avx2::{f16_to_f32, hsum_ps, load256};
use crate::quants::blocks::k_quants::panel::BLOCK_BYTES;
use crate::quants::blocks::k_quants::q4_k::BlockQ4K;
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::gemm::GEMM_COLS;
use crate::quants::prefetch::prefetch_block_ahead;

/// `fn $name(x, panel, out)`: the Q4_K GEMM with the features `$feat`
/// and the integer step `$sub`.
macro_rules! gemm_q4_k {
    ($name:ident, $feat:literal, $sub:ident) => {
        /// One Q4_K weight row against a Q8_K panel: `out[t]` =
        /// `dot_q4_k_q8_k(x, column t)` of AVX2, bit for bit.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $name(x: &[BlockQ4K], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
            check_panel(x.len(), panel);
            let m4 = _mm256_set1_epi8(0x0f);
            let mut acc = [_mm256_setzero_ps(); GEMM_COLS];
            let mut acc_m = [_mm256_setzero_ps(); 4];
            for (b, bx) in x.iter().enumerate() {
                let p = panel.as_ptr().add(b * BLOCK_BYTES);
                let (mins16, scales) = row_scales_mins(&bx.scales);
                let q4 = bx.qs.as_ptr();
                let mut ia = [_mm512_setzero_si512(); PAIRS];
                for j in 0..4 {
                    let bits = load256(q4.add(32 * j));
                    let lo = _mm256_and_si256(bits, m4);
                    $sub(&mut ia, p, 2 * j, lo, broadcast_i16_lane(scales, 2 * j));
                    let hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                    $sub(
                        &mut ia,
                        p,
                        2 * j + 1,
                        hi,
                        broadcast_i16_lane(scales, 2 * j + 1),
                    );
                }
                step_mins(&mut acc_m, p, f16_to_f32(bx.dmin), mins16);
                step(&mut acc, p, f16_to_f32(bx.d), &split(&ia));
            }
            finish_min(&acc, &acc_m, out);
        }
    };
}

gemm_q4_k!(
    gemm_q4_k_q8_k,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    sub_block
);
gemm_q4_k!(
    gemm_q4_k_q8_k_vnni,
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c",
    sub_block_vnni
);

/// `fn $name(x, y) -> f32`: the Q4_K decode dot with the features `$feat`,
/// `$acc(sumi, scales, products)` adding a sub-block pair's lanes.
macro_rules! dot_q4_k {
    ($name:ident, $feat:literal, $acc:ident) => {
        /// `dot_q4_k_q8_k` of AVX2, bit for bit: the AVX2 kernel's codes,
        /// scales and f32 steps, two sub-blocks a 512-bit register (the
        /// low nibbles' sub-block in the low half, the high nibbles' in
        /// the high half), whose i32 halves are added before the block's
        /// step (the same exact integer sum as AVX2's).
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $name(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
            assert_eq!(x.len(), y.len());
            let m4 = _mm256_set1_epi8(0x0f);
            // scale lane 2j for the low half, 2j + 1 for the high half
            let idx: [__m512i; 4] = std::array::from_fn(|j| {
                let lane = |l: usize| (((2 * l + 1) << 8) | (2 * l)) as i16;
                _mm512_inserti64x4::<1>(
                    _mm512_set1_epi16(lane(2 * j)),
                    _mm256_set1_epi16(lane(2 * j + 1)),
                )
            });
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
                let sc = _mm512_broadcast_i64x4(scales);
                let q4 = bx.qs.as_ptr();
                let q8 = by.qs.as_ptr();
                let mut sumi = _mm512_setzero_si512();
                for (j, ix) in idx.iter().enumerate() {
                    let bits = load256(q4.add(32 * j));
                    let lo = _mm256_and_si256(bits, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                    let codes = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                    let p =
                        _mm512_maddubs_epi16(codes, _mm512_loadu_si512(q8.add(64 * j) as *const _));
                    sumi = $acc(sumi, _mm512_shuffle_epi8(sc, *ix), p);
                }
                let sumi = _mm256_add_epi32(
                    _mm512_castsi512_si256(sumi),
                    _mm512_extracti64x4_epi64::<1>(sumi),
                );
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
            }
            let m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
            let m = _mm_add_ss(m, _mm_movehdup_ps(m));
            hsum_ps(acc) + _mm_cvtss_f32(m)
        }
    };
}

dot_q4_k!(
    dot_q4_k_q8_k,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    madd_add
);
dot_q4_k!(
    dot_q4_k_q8_k_vnni,
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c",
    dpwssd
);
