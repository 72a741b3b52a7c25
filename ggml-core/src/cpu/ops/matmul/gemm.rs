//! An AVX2/FMA register-tiled kernel for F32 and F16 weights (activations
//! already converted to the same type), as llamafile's `tinyBLAS` that
//! llama.cpp's CPU backend uses for these types: a tile of up to
//! [`RM`] weight rows × [`RN`] activation columns keeps one 8-lane f32
//! accumulator per output, fed by fused multiply-adds over `k` in steps of
//! 8, then summed across lanes in tinyBLAS's order. Loads per FMA drop from
//! 2 (`vec_dot`) to 7/12, so prompt-sized products are no longer bound by
//! loads.
//!
//! Every output element is computed the same way whatever the tile it falls
//! in (edge tiles use smaller instances of the same kernel), so the result
//! does not depend on how work is split across threads.

/// Weight rows per tile.
pub(super) const RM: usize = 4;
/// Activation columns per tile.
pub(super) const RN: usize = 3;

/// Element type of both operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GemmType {
    F32,
    F16,
}

impl GemmType {
    /// The tiled kernel for weights of `w` against activations of `act`
    /// with rows of `k` elements, when this CPU can run it.
    pub(super) fn select(
        w: crate::types::GgmlType,
        act: crate::types::GgmlType,
        k: usize,
    ) -> Option<GemmType> {
        use crate::types::GgmlType as T;
        if w != act || k == 0 || !k.is_multiple_of(8) || !available() {
            return None;
        }
        match w {
            T::F32 => Some(GemmType::F32),
            T::F16 => Some(GemmType::F16),
            _ => None,
        }
    }
}

/// Whether the chosen CPU level (`GGML_CPU_LEVEL` or the best the CPU
/// has) runs AVX2/FMA/F16C kernels.
#[cfg(target_arch = "x86_64")]
fn available() -> bool {
    crate::quants::simd_available()
}

#[cfg(not(target_arch = "x86_64"))]
fn available() -> bool {
    false
}

/// `out[i][j] = Σ a[i][..k] · b[j][..k]` for `m ≤ RM` rows and `n ≤ RN`
/// columns.
///
/// # Safety
/// [`GemmType::select`] returned `ty` on this CPU; `a[..m]` and `b[..n]`
/// each point at `k` readable elements of `ty`.
#[inline]
pub(super) unsafe fn tile(
    ty: GemmType,
    k: usize,
    a: &[*const u8; RM],
    m: usize,
    b: &[*const u8; RN],
    n: usize,
    out: &mut [[f32; RN]; RM],
) {
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! pick {
            ($f:ident) => {
                match (m, n) {
                    (4, 3) => x86::$f::<4, 3>(k, a, b, out),
                    (4, 2) => x86::$f::<4, 2>(k, a, b, out),
                    (4, 1) => x86::$f::<4, 1>(k, a, b, out),
                    (3, 3) => x86::$f::<3, 3>(k, a, b, out),
                    (3, 2) => x86::$f::<3, 2>(k, a, b, out),
                    (3, 1) => x86::$f::<3, 1>(k, a, b, out),
                    (2, 3) => x86::$f::<2, 3>(k, a, b, out),
                    (2, 2) => x86::$f::<2, 2>(k, a, b, out),
                    (2, 1) => x86::$f::<2, 1>(k, a, b, out),
                    (1, 3) => x86::$f::<1, 3>(k, a, b, out),
                    (1, 2) => x86::$f::<1, 2>(k, a, b, out),
                    (1, 1) => x86::$f::<1, 1>(k, a, b, out),
                    _ => {}
                }
            };
        }
        match ty {
            GemmType::F32 => pick!(tile_f32),
            GemmType::F16 => pick!(tile_f16),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (ty, k, a, m, b, n, out);
        unreachable!("GemmType::select is None off x86_64");
    }
}

/// Widen `k` F16 values at `src` to f32 at `dst` (exact), so that the F16
/// product can run the F32 kernel on them: the same fused multiply-adds on
/// the same values, so the same bits as the F16 kernel, without converting
/// each operand again for every tile it enters.
///
/// # Safety
/// [`GemmType::select`] returned a type on this CPU (so `k` is a multiple of
/// 8 and F16C is present); `src` holds `k` F16 values, `dst` room for `k` f32.
#[inline]
pub(super) unsafe fn widen_f16(k: usize, src: *const u8, dst: *mut f32) {
    #[cfg(target_arch = "x86_64")]
    x86::widen_f16(k, src, dst);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (k, src, dst);
        unreachable!("GemmType::select is None off x86_64");
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{RM, RN};
    use std::arch::x86_64::*;

    /// tinyBLAS's `hsum`: high half + low half, then pairs, then the last two.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum(x: __m256) -> f32 {
        let x = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
        let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
        let x = _mm_add_ss(x, _mm_movehdup_ps(x));
        _mm_cvtss_f32(x)
    }

    macro_rules! tile_fn {
        ($name:ident, $esize:expr, $load:ident) => {
            #[target_feature(enable = "avx2,fma,f16c")]
            pub(super) unsafe fn $name<const M: usize, const N: usize>(
                k: usize,
                a: &[*const u8; RM],
                b: &[*const u8; RN],
                out: &mut [[f32; RN]; RM],
            ) {
                let mut acc = [[_mm256_setzero_ps(); N]; M];
                let mut l = 0;
                while l < k {
                    let off = l * $esize;
                    let mut bv = [_mm256_setzero_ps(); N];
                    for j in 0..N {
                        bv[j] = $load!(b[j].add(off));
                    }
                    for i in 0..M {
                        let av = $load!(a[i].add(off));
                        for j in 0..N {
                            acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
                        }
                    }
                    l += 8;
                }
                for i in 0..M {
                    for j in 0..N {
                        out[i][j] = hsum(acc[i][j]);
                    }
                }
            }
        };
    }

    macro_rules! load_f32 {
        ($p:expr) => {
            _mm256_loadu_ps($p as *const f32)
        };
    }
    macro_rules! load_f16 {
        ($p:expr) => {
            _mm256_cvtph_ps(_mm_loadu_si128($p as *const __m128i))
        };
    }

    tile_fn!(tile_f32, 4, load_f32);
    tile_fn!(tile_f16, 2, load_f16);

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn widen_f16(k: usize, src: *const u8, dst: *mut f32) {
        let mut l = 0;
        while l < k {
            _mm256_storeu_ps(dst.add(l), load_f16!(src.add(2 * l)));
            l += 8;
        }
    }
}
