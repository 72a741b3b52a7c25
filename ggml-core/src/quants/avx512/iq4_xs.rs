//! IQ4_XS at the AVX-512 levels: the GEMM with a Q8_K panel of 8 columns
//! (two columns a register), bit for bit the AVX2 kernel: its table
//! values, sub-block scales and f32 steps, and the same exact i32 lanes.
//! (The decode dot stays AVX2's: two sub-blocks a 512-bit register
//! measured 0.84x of it on Zen 4.)

use std::arch::x86_64::*;

use super::k_gemm::{split, Step, PAIRS};
use super::signed_by;
use crate::quants::avx2::f16_to_f32;
use crate::quants::avx2::k_gemm::{check_panel, finish, step};
use crate::quants::avx2::lut4::{lookup, sub_scale, table};
use crate::quants::blocks::iq4_nl::KVALUES_IQ4NL;
use crate::quants::blocks::iq4_xs::BlockIq4Xs;
use crate::quants::blocks::k_quants::panel::BLOCK_BYTES;
use crate::quants::gemm::GEMM_COLS;

/// The GEMM: `out[t]` = the AVX2 dot with column `t`, bit for bit.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn gemm<S: Step>(x: &[BlockIq4Xs], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    check_panel(x.len(), panel);
    let t = table(&KVALUES_IQ4NL);
    let mut acc = [_mm256_setzero_ps(); GEMM_COLS];
    for (b, bx) in x.iter().enumerate() {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let mut ia = [_mm512_setzero_si512(); PAIRS];
        for ib in 0..8 {
            let x2 = _mm512_broadcast_i64x4(lookup(t, bx.qs.as_ptr().add(16 * ib)));
            let (ax, neg) = (_mm512_abs_epi8(x2), _mm512_movepi8_mask(x2));
            let scale = _mm512_set1_epi16(sub_scale(bx, ib) - 32);
            let q = p.add(ib * GEMM_COLS * 32);
            for (u, a) in ia.iter_mut().enumerate() {
                let sy = signed_by(_mm512_loadu_si512(q.add(64 * u) as *const _), neg);
                *a = S::madd_add(*a, _mm512_maddubs_epi16(ax, sy), scale);
            }
        }
        step(&mut acc, p, f16_to_f32(bx.d), &split(&ia));
    }
    finish(&acc, out);
}

/// `fn $gemm` at the features `$feat` with the steps `$s`.
macro_rules! iq4_xs_gemm {
    ($gemm:ident, $feat:literal, $s:ty) => {
        /// One IQ4_XS row against a Q8_K panel: `out[t]` =
        /// `dot_iq4_xs_q8_k(x, column t)` of AVX2, bit for bit.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $gemm(x: &[BlockIq4Xs], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
            gemm::<$s>(x, panel, out)
        }
    };
}

iq4_xs_gemm!(
    gemm_iq4_xs_q8_k,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    super::k_gemm::Bw
);
iq4_xs_gemm!(
    gemm_iq4_xs_q8_k_vnni,
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c",
    super::k_gemm::Vnni
);
