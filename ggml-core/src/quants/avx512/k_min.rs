//! The K-quants with sub-block minima and 4-bit low codes (Q4_K, Q5_K) at
//! the AVX-512 levels: the GEMM (a weight row against a Q8_K panel of 8
//! columns) and the decode dot, generic over how a block gives its codes,
//! each bit for bit the type's AVX2 kernel: the AVX2 kernel's codes,
//! scales and minima, its f32 steps; the integer lanes two columns a
//! 512-bit register in the GEMM ([`super::k_gemm`]), two sub-blocks a
//! register in the dot (the low nibbles' sub-block in the low half, the
//! high nibbles' in the high half, the halves added before the block's
//! step: the same exact integer sums as AVX2's).

use std::arch::x86_64::*;

use super::k_gemm::{split, Step, PAIRS};
use crate::quants::avx2::k_gemm::{check_panel, finish_min, step, step_mins};
use crate::quants::avx2::q4_k::{block_scales, broadcast_i16_lane, row_scales_mins};
use crate::quants::avx2::{f16_to_f32, hsum_ps};
use crate::quants::blocks::k_quants::panel::BLOCK_BYTES;
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::gemm::GEMM_COLS;
use crate::quants::prefetch::prefetch_block_ahead;

/// A Q4_K-layout block as the AVX2 kernels read it.
pub(crate) trait MinBlock {
    /// The super-block scale and minimum scale (f16 bits as stored).
    fn d_dmin(&self) -> (half::f16, half::f16);
    /// The 12 packed bytes of sub-block scales and minima.
    fn packed(&self) -> &[u8; 12];
    /// The codes of sub-blocks `2j` and `2j + 1` (32 unsigned bytes each).
    ///
    /// # Safety
    /// AVX2.
    unsafe fn codes(&self, j: usize) -> (__m256i, __m256i);
}

/// The GEMM: `out[t]` = the AVX2 dot with column `t`, bit for bit.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn gemm<B: MinBlock, S: Step>(x: &[B], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    check_panel(x.len(), panel);
    let mut acc = [_mm256_setzero_ps(); GEMM_COLS];
    let mut acc_m = [_mm256_setzero_ps(); 4];
    for (b, bx) in x.iter().enumerate() {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        let (mins16, scales) = row_scales_mins(bx.packed());
        let mut ia = [_mm512_setzero_si512(); PAIRS];
        for j in 0..4 {
            let (lo, hi) = bx.codes(j);
            S::sub_block(&mut ia, p, 2 * j, lo, broadcast_i16_lane(scales, 2 * j));
            S::sub_block(
                &mut ia,
                p,
                2 * j + 1,
                hi,
                broadcast_i16_lane(scales, 2 * j + 1),
            );
        }
        let (d, dmin) = bx.d_dmin();
        step_mins(&mut acc_m, p, f16_to_f32(dmin), mins16);
        step(&mut acc, p, f16_to_f32(d), &split(&ia));
    }
    finish_min(&acc, &acc_m, out);
}

/// The decode dot: the AVX2 dot, bit for bit. (Installed for Q4_K with
/// VNNI only: at AVX-512 BW, and for Q5_K, it measured no faster than the
/// AVX2 dot on Zen 4, whose 512-bit operations take two 256-bit passes.)
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn dot<B: MinBlock, S: Step>(x: &[B], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len());
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
        let (d, dmin) = bx.d_dmin();
        let (d, scales) =
            block_scales(f16_to_f32(d), f16_to_f32(dmin), bx.packed(), by, &mut acc_m);
        let sc = _mm512_broadcast_i64x4(scales);
        let q8 = by.qs.as_ptr();
        let mut sumi = _mm512_setzero_si512();
        for (j, ix) in idx.iter().enumerate() {
            let (lo, hi) = bx.codes(j);
            let codes = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
            let p = _mm512_maddubs_epi16(codes, _mm512_loadu_si512(q8.add(64 * j) as *const _));
            sumi = S::madd_add(sumi, _mm512_shuffle_epi8(sc, *ix), p);
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

/// The kernels of the [`MinBlock`] `$bx`: `fn $gemm(x, panel, out)` at
/// AVX-512 BW and `fn $gemm_vnni(x, panel, out)` with VNNI, and with
/// `dot $dot_vnni`, `fn $dot_vnni(x, y) -> f32` with VNNI.
macro_rules! min_kernels {
    ($bx:ty, $gemm:ident, $gemm_vnni:ident $(, dot $dot_vnni:ident)?) => {
        /// One weight row against a Q8_K panel: `out[t]` = the AVX2 dot
        /// with column `t`, bit for bit.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
        pub(crate) unsafe fn $gemm(
            x: &[$bx],
            panel: &[u8],
            out: &mut [f32; $crate::quants::gemm::GEMM_COLS],
        ) {
            super::k_min::gemm::<$bx, super::k_gemm::Bw>(x, panel, out)
        }

        /// [`$gemm`] with VNNI.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        pub(crate) unsafe fn $gemm_vnni(
            x: &[$bx],
            panel: &[u8],
            out: &mut [f32; $crate::quants::gemm::GEMM_COLS],
        ) {
            super::k_min::gemm::<$bx, super::k_gemm::Vnni>(x, panel, out)
        }

        $(
        /// The AVX2 decode dot of this type, bit for bit, with VNNI.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        pub(crate) unsafe fn $dot_vnni(
            x: &[$bx],
            y: &[$crate::quants::blocks::k_quants::q8_k::BlockQ8K],
        ) -> f32 {
            super::k_min::dot::<$bx, super::k_gemm::Vnni>(x, y)
        }
        )?
    };
}
pub(crate) use min_kernels;
