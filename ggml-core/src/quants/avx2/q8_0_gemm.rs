//! The AVX2 GEMM of the weights dotted with Q8_0 activations in 32-value
//! blocks with two alternating accumulators (Q8_0, Q4_0, IQ4_NL, MXFP4): a
//! weight row against a Q8_0 panel of 8 columns
//! ([`crate::quants::blocks::q8_0_panel`]), `out[t]` bit for bit the single dot
//! with column `t`. The columns go in two passes of 4 so that each
//! column's two alternating f32 accumulators (the single dot's) stay in
//! registers; the row's block is unpacked once per pass.

use std::arch::x86_64::*;

use super::lut4::{lookup, table};
use super::{f16_to_f32, hsum_ps, load128, load256};
use crate::quants::blocks::iq4_nl::{BlockIq4Nl, KVALUES_IQ4NL};
use crate::quants::blocks::mxfp4::{e8m0_to_f32_half, BlockMxfp4, KVALUES_MXFP4};
use crate::quants::blocks::q4_0::BlockQ4_0;
use crate::quants::blocks::q8_0::BlockQ8_0;
use crate::quants::blocks::q8_0_panel::{check_panel, BLOCK_BYTES, D_OFF};
use crate::quants::gemm::GEMM_COLS;

/// Columns per pass over the row.
const PASS: usize = 4;

/// `out[t] = Σ_b dx_b·dy_bt·Σ qx·qy` with the single dots' two alternating
/// accumulators, `unpack` giving a block's `dx` and 32 signed values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemm_with<B>(
    x: &[B],
    panel: &[u8],
    out: &mut [f32; GEMM_COLS],
    unpack: impl Fn(&B) -> (f32, __m256i),
) {
    check_panel(x.len(), panel);
    let ones = _mm256_set1_epi16(1);
    // block `b` of the pass into `acc[t]` (even blocks into the first of
    // the single dot's two accumulators, odd into the second: two arrays
    // indexed by constants, so that they stay in registers)
    let step = |g: usize, b: usize, acc: &mut [__m256; PASS]| {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let dy = p.add(D_OFF) as *const f32;
        // SAFETY: callers pass b < n = x.len()
        let (dx, xq) = unpack(x.get_unchecked(b));
        let dx = _mm256_set1_ps(dx);
        let ax = _mm256_sign_epi8(xq, xq);
        for (t, a) in acc.iter_mut().enumerate() {
            let c = PASS * g + t;
            // dx·dy, the single dot's scalar product, in every lane
            let d = _mm256_mul_ps(_mm256_broadcast_ss(&*dy.add(c)), dx);
            // as `mul_sum_i8`
            let sy = _mm256_sign_epi8(load256(p.add(32 * c)), xq);
            let p16 = _mm256_maddubs_epi16(ax, sy);
            let q = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            *a = _mm256_fmadd_ps(d, q, *a);
        }
    };
    let n = x.len();
    for g in 0..GEMM_COLS / PASS {
        let mut even = [_mm256_setzero_ps(); PASS];
        let mut odd = [_mm256_setzero_ps(); PASS];
        let mut b = 0;
        while b + 1 < n {
            step(g, b, &mut even);
            step(g, b + 1, &mut odd);
            b += 2;
        }
        if b < n {
            step(g, b, &mut even);
        }
        for t in 0..PASS {
            out[PASS * g + t] = hsum_ps(_mm256_add_ps(even[t], odd[t]));
        }
    }
}

/// One Q8_0 weight row against a Q8_0 panel: `out[t]` =
/// `dot_q8_0_q8_0(x, column t)`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q8_0_q8_0(x: &[BlockQ8_0], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    gemm_with(x, panel, out, |bx: &BlockQ8_0| {
        (f16_to_f32(bx.d), load256(bx.qs.as_ptr()))
    })
}

/// One Q4_0 weight row against a Q8_0 panel: `out[t]` =
/// `dot_q4_0_q8_0(x, column t)`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_q4_0_q8_0(x: &[BlockQ4_0], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let m4 = _mm256_set1_epi8(0x0f);
    let eight = _mm256_set1_epi8(8);
    gemm_with(x, panel, out, |bx: &BlockQ4_0| {
        let raw = load128(bx.qs.as_ptr());
        let nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
        (f16_to_f32(bx.d), _mm256_sub_epi8(nib, eight))
    })
}

/// One IQ4_NL weight row against a Q8_0 panel: `out[t]` =
/// `dot_iq4_nl_q8_0(x, column t)`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_iq4_nl_q8_0(x: &[BlockIq4Nl], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let t = table(&KVALUES_IQ4NL);
    gemm_with(x, panel, out, |bx: &BlockIq4Nl| {
        (f16_to_f32(bx.d), lookup(t, bx.qs.as_ptr()))
    })
}

/// One MXFP4 weight row against a Q8_0 panel: `out[t]` =
/// `dot_mxfp4_q8_0(x, column t)`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn gemm_mxfp4_q8_0(x: &[BlockMxfp4], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let t = table(&KVALUES_MXFP4);
    gemm_with(x, panel, out, |bx: &BlockMxfp4| {
        (e8m0_to_f32_half(bx.e), lookup(t, bx.qs.as_ptr()))
    })
}
