//! The weights dotted with Q8_0 activations in 32-value blocks (Q8_0,
//! Q4_0, IQ4_NL, MXFP4) at the AVX-512 levels: the GEMM with a Q8_0 panel
//! of 8 columns, and with VNNI the decode dot, each bit for bit its AVX2
//! kernel.
//!
//! The AVX2 kernels sum `dx·dy·Σ qx·qy` per block into two alternating
//! f32 accumulators (even blocks, odd blocks), 8 lanes each, lane `i`
//! holding the i32 sum of bytes `4i..4i+4` of the block. The GEMM holds
//! two columns a 512-bit register, with the same lanes, the same fused
//! multiply-adds in the same order and the same final sums; the VNNI dot
//! keeps the AVX2 steps. The i32 lanes come from `maddubs` + `madd`
//! (AVX-512 BW) or `vpdpbusd` (VNNI): the same sums of four exact products
//! either way.

use std::arch::x86_64::*;

use super::signed_by;
use crate::quants::avx2::lut4::{lookup, table};
use crate::quants::avx2::{f16_to_f32, hsum_ps, load128, load256, sum_alternating};
use crate::quants::blocks::iq4_nl::{BlockIq4Nl, KVALUES_IQ4NL};
use crate::quants::blocks::mxfp4::{e8m0_to_f32_half, BlockMxfp4, KVALUES_MXFP4};
use crate::quants::blocks::q4_0::BlockQ4_0;
use crate::quants::blocks::q8_0::BlockQ8_0;
use crate::quants::blocks::q8_0_panel::{check_panel, BLOCK_BYTES, D_OFF};
use crate::quants::gemm::GEMM_COLS;
use crate::quants::prefetch::prefetch_block_ahead;

/// The i32 lanes `Σ x·y` of four bytes each, from `|x|` and `y` with the
/// sign of `x` (`sy`, never -128 against `|x|` = 128: `y` holds no -128).
trait Isum {
    /// # Safety
    /// The level's features.
    unsafe fn isum(ax: __m512i, sy: __m512i) -> __m512i;
}

/// AVX-512 BW: `madd(maddubs(|x|, sy), 1)` (pairs at most 2·128·127, no
/// saturation).
struct Bw;
impl Isum for Bw {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    unsafe fn isum(ax: __m512i, sy: __m512i) -> __m512i {
        _mm512_madd_epi16(_mm512_maddubs_epi16(ax, sy), _mm512_set1_epi16(1))
    }
}

/// VNNI: `vpdpbusd(0, |x|, sy)`, the four products summed in i32.
struct Vnni;
impl Isum for Vnni {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
    unsafe fn isum(ax: __m512i, sy: __m512i) -> __m512i {
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sy)
    }
}

/// The dot `Σ_b dx_b·dy_b·Σ qx·qy` of the AVX2 kernel with VNNI
/// (`sum_alternating`, `hsum_ps(a0 + a1)`), the same 256-bit steps but for
/// the i32 lanes, one `vpdpbusd` for `mul_sum_i8`'s `maddubs` + `madd`:
/// `unpack` gives a block's `dx` and 32 signed values. (Two blocks a
/// 512-bit register measured slower than AVX2 on Zen 4, whose 512-bit
/// operations take two 256-bit passes: the scales' shuffles cost more than
/// the halved loop saves.)
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_vnni_with<B>(x: &[B], y: &[BlockQ8_0], unpack: impl Fn(&B) -> (f32, __m256i)) -> f32 {
    assert_eq!(x.len(), y.len());
    let (a0, a1) = sum_alternating(x.len(), |k, acc| {
        // SAFETY: k < x.len() == y.len() (`sum_alternating` passes k < n).
        let (bx, by) = (x.get_unchecked(k), y.get_unchecked(k));
        prefetch_block_ahead(bx);
        let (dx, xq) = unpack(bx);
        let d = _mm256_set1_ps(dx * f16_to_f32(by.d));
        let sy = _mm256_sign_epi8(load256(by.qs.as_ptr()), xq);
        let q = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(xq), sy);
        _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(q), acc)
    });
    hsum_ps(_mm256_add_ps(a0, a1))
}

/// The GEMM of the AVX2 `q8_0_gemm` (`out[t]` = the dot with column `t`),
/// the 8 columns in one pass, two a register: column `2u` in the low half
/// of `even[u]` / `odd[u]`, column `2u + 1` in the high half.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn gemm_with<B, I: Isum>(
    x: &[B],
    panel: &[u8],
    out: &mut [f32; GEMM_COLS],
    unpack: impl Fn(&B) -> (f32, __m256i),
) {
    check_panel(x.len(), panel);
    const PAIRS: usize = GEMM_COLS / 2;
    // lanes 0..8 from f32 lane 2u, 8..16 from 2u + 1
    let idx: [__m512i; PAIRS] = std::array::from_fn(|u| {
        let u = u as i32;
        _mm512_inserti64x4::<1>(_mm512_set1_epi32(2 * u), _mm256_set1_epi32(2 * u + 1))
    });
    let step = |b: usize, acc: &mut [__m512; PAIRS]| {
        let p = panel.as_ptr().add(b * BLOCK_BYTES);
        // SAFETY: callers pass b < x.len()
        let (dx, xq) = unpack(x.get_unchecked(b));
        // lane t: dy_t·dx, the single dot's scalar product
        let d8 = _mm256_mul_ps(
            _mm256_loadu_ps(p.add(D_OFF) as *const f32),
            _mm256_set1_ps(dx),
        );
        let d8 = _mm512_castps256_ps512(d8);
        let x2 = _mm512_broadcast_i64x4(xq);
        let (ax, neg) = (_mm512_abs_epi8(x2), _mm512_movepi8_mask(x2));
        for (u, a) in acc.iter_mut().enumerate() {
            let sy = signed_by(_mm512_loadu_si512(p.add(64 * u) as *const _), neg);
            let q = _mm512_cvtepi32_ps(I::isum(ax, sy));
            *a = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx[u], d8), q, *a);
        }
    };
    let n = x.len();
    let mut even = [_mm512_setzero_ps(); PAIRS];
    let mut odd = [_mm512_setzero_ps(); PAIRS];
    let mut b = 0;
    while b + 1 < n {
        step(b, &mut even);
        step(b + 1, &mut odd);
        b += 2;
    }
    if b < n {
        step(b, &mut even);
    }
    for u in 0..PAIRS {
        let s = _mm512_add_ps(even[u], odd[u]);
        out[2 * u] = hsum_ps(_mm512_castps512_ps256(s));
        out[2 * u + 1] = hsum_ps(_mm512_extractf32x8_ps::<1>(s));
    }
}

/// A Q8_0 block as the AVX2 kernels unpack it.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_q8_0(bx: &BlockQ8_0) -> (f32, __m256i) {
    (f16_to_f32(bx.d), load256(bx.qs.as_ptr()))
}

/// A Q4_0 block as the AVX2 kernels unpack it (nibble - 8).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_q4_0(bx: &BlockQ4_0) -> (f32, __m256i) {
    let raw = load128(bx.qs.as_ptr());
    let nib = _mm256_and_si256(
        _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),
        _mm256_set1_epi8(0x0f),
    );
    (f16_to_f32(bx.d), _mm256_sub_epi8(nib, _mm256_set1_epi8(8)))
}

/// The kernels of weight type `$bx`: `fn $gemm(x, panel, out)` at AVX-512
/// BW, and with VNNI `fn $gemm_vnni(x, panel, out)` and `fn $dot_vnni(x,
/// y) -> f32`; `$unpack` unpacks a block (with `$t = $init` made once).
macro_rules! q8_0_kernels {
    ($bx:ty, $gemm:ident, $gemm_vnni:ident, $dot_vnni:ident, |$b:ident| $unpack:expr $(, let $t:ident = $init:expr)?) => {
        /// One weight row against a Q8_0 panel: `out[t]` = the AVX2 dot
        /// with column `t`, bit for bit.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
        pub(crate) unsafe fn $gemm(x: &[$bx], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
            $(let $t = $init;)?
            gemm_with::<_, Bw>(x, panel, out, |$b: &$bx| $unpack)
        }

        /// [`$gemm`] with VNNI.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        pub(crate) unsafe fn $gemm_vnni(x: &[$bx], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
            $(let $t = $init;)?
            gemm_with::<_, Vnni>(x, panel, out, |$b: &$bx| $unpack)
        }

        /// The AVX2 dot of this weight type with Q8_0 activations, bit for
        /// bit, with VNNI.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        pub(crate) unsafe fn $dot_vnni(x: &[$bx], y: &[BlockQ8_0]) -> f32 {
            $(let $t = $init;)?
            dot_vnni_with(x, y, |$b: &$bx| $unpack)
        }
    };
}

q8_0_kernels!(
    BlockQ8_0,
    gemm_q8_0_q8_0,
    gemm_q8_0_q8_0_vnni,
    dot_q8_0_q8_0_vnni,
    |b| unpack_q8_0(b)
);
q8_0_kernels!(
    BlockQ4_0,
    gemm_q4_0_q8_0,
    gemm_q4_0_q8_0_vnni,
    dot_q4_0_q8_0_vnni,
    |b| unpack_q4_0(b)
);
q8_0_kernels!(
    BlockIq4Nl,
    gemm_iq4_nl_q8_0,
    gemm_iq4_nl_q8_0_vnni,
    dot_iq4_nl_q8_0_vnni,
    |b| (f16_to_f32(b.d), lookup(t, b.qs.as_ptr())),
    let t = table(&KVALUES_IQ4NL)
);
q8_0_kernels!(
    BlockMxfp4,
    gemm_mxfp4_q8_0,
    gemm_mxfp4_q8_0_vnni,
    dot_mxfp4_q8_0_vnni,
    |b| (e8m0_to_f32_half(b.e), lookup(t, b.qs.as_ptr())),
    let t = table(&KVALUES_MXFP4)
);
