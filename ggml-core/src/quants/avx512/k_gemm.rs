//! The integer part of the K-quant GEMM kernels at the AVX-512 levels: a
//! weight sub-block (32 codes) against the 8 panel columns
//! ([`crate::quants::blocks::k_quants::panel`]) two columns per 512-bit
//! register (the columns' sub-blocks lie side by side in the panel), with
//! the same i32 lanes as the AVX2 `sub_block` (`madd(scale,
//! maddubs(codes, q))` per column; VNNI's `vpdpwssd` fuses the `madd` and
//! the add, exactly). The f32 steps stay the AVX2 ones, so a GEMM output
//! is bit for bit the AVX2 kernel's.

use std::arch::x86_64::*;

use crate::quants::gemm::GEMM_COLS;

/// Column pairs: register `u` holds column `2u` (low half) and `2u + 1`.
pub(crate) const PAIRS: usize = GEMM_COLS / 2;

/// The 8 columns' i32 lanes from the 4 column pairs.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn split(ia: &[__m512i; PAIRS]) -> [__m256i; GEMM_COLS] {
    std::array::from_fn(|t| {
        let v = ia[t / 2];
        if t % 2 == 0 {
            _mm512_castsi512_si256(v)
        } else {
            _mm512_extracti64x4_epi64::<1>(v)
        }
    })
}

/// The 4 column pairs from the 8 columns' i32 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn join(ia: &[__m256i; GEMM_COLS]) -> [__m512i; PAIRS] {
    std::array::from_fn(|u| {
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(ia[2 * u]), ia[2 * u + 1])
    })
}

/// The integer steps of a level (AVX-512 BW: [`Bw`]; VNNI: [`Vnni`]).
pub(crate) trait Step {
    /// `acc + madd(a, b)`; with VNNI `vpdpwssd(acc, a, b)`: the same two
    /// i16 products added into the same i32 lane (both wrap alike; the
    /// magnitudes here stay far inside i32).
    ///
    /// # Safety
    /// The level's features.
    unsafe fn madd_add(acc: __m512i, a: __m512i, b: __m512i) -> __m512i;

    /// `ia[u] = madd_add(ia[u], scale, maddubs(codes, q))` over the 4
    /// column pairs of sub-block `s` of the panel block at `p`.
    ///
    /// # Safety
    /// The level's features; `p` points at a whole panel block.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    unsafe fn sub_block(
        ia: &mut [__m512i; PAIRS],
        p: *const u8,
        s: usize,
        codes: __m256i,
        scale: __m256i,
    ) {
        let q = p.add(s * GEMM_COLS * 32);
        let (codes, scale) = (_mm512_broadcast_i64x4(codes), _mm512_broadcast_i64x4(scale));
        for (u, a) in ia.iter_mut().enumerate() {
            let prod = _mm512_maddubs_epi16(codes, _mm512_loadu_si512(q.add(64 * u) as *const _));
            *a = Self::madd_add(*a, scale, prod);
        }
    }
}

/// AVX-512 BW's steps.
pub(crate) struct Bw;
impl Step for Bw {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    unsafe fn madd_add(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
        _mm512_add_epi32(acc, _mm512_madd_epi16(a, b))
    }
}

/// VNNI's steps.
pub(crate) struct Vnni;
impl Step for Vnni {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    unsafe fn madd_add(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
        _mm512_dpwssd_epi32(acc, a, b)
    }
}
