//! Q4_K GEMM at the AVX-512 levels: a weight row against a Q8_K panel of
//! 8 columns, bit for bit the AVX2 GEMM (and so the AVX2 dot) per column:
//! the codes and scales of the AVX2 kernel, the integer lanes two columns
//! a register ([`super::k_gemm`]), the AVX2 f32 steps.

use std::arch::x86_64::*;

use super::k_gemm::{split, sub_block, sub_block_vnni, PAIRS};
use crate::quants::avx2::f16_to_f32;
use crate::quants::avx2::k_gemm::{check_panel, finish_min, step, step_mins};
use crate::quants::avx2::load256;
use crate::quants::avx2::q4_k::{broadcast_i16_lane, row_scales_mins};
use crate::quants::blocks::k_quants::panel::BLOCK_BYTES;
use crate::quants::blocks::k_quants::q4_k::BlockQ4K;
use crate::quants::gemm::GEMM_COLS;

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
