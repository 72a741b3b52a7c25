//! AVX-512 (F, BW, VL, DQ) and AVX-512 VNNI kernels: the dots and prompt
//! GEMMs of the types MoE models ship in, each bit for bit its AVX2 kernel
//! (the same f32 accumulators in the same order; the integer sums, exact
//! whatever forms them, from wider or VNNI instructions).
//!
//! Every kernel is an `unsafe fn` compiled with the level's target
//! features; its only safety precondition is that the CPU has them, which
//! `quants::tables` guarantees (a level's table is handed out only on such
//! a CPU). Memory accesses go through block slices.
#![cfg(target_arch = "x86_64")]

pub(crate) mod float;
pub(crate) mod iq4_xs;
pub(crate) mod k_gemm;
pub(crate) mod k_min;
pub(crate) mod q4_k;
pub(crate) mod q5_k;
pub(crate) mod q6_k;
pub(crate) mod q8_0;

use std::arch::x86_64::*;

/// `y` negated where `neg` is set (the bytes of `x` < 0): with `|x|`, the
/// operands of `maddubs(|x|, sign(y, x))` (`x` = 0 keeps `y`, against
/// `|x|` = 0: the product is 0 as `vpsignb`'s).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn signed_by(y: __m512i, neg: __mmask64) -> __m512i {
    _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y)
}
