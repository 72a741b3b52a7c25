//! GGUF block quantization: the block structs with ggml's byte layouts, and
//! their CPU kernels — row dequantization (`to_float`), quantization
//! (`from_float`) and the dot products of a weight row with an activation row
//! (`vec_dot`), as ggml's `type_traits_cpu` pairs them, in one table per
//! SIMD level.
//!
//! Semantics follow ggml exactly: dequantization is bit-for-bit ggml's
//! `dequantize_row_*`; weight quantization is the reference quantizers
//! (`quantize_row_*_ref`); activation quantization (Q8_0, Q8_1, Q8_K) is
//! ggml's reference rounding; the dots accumulate integers per block and
//! scale once per block, as ggml's scalar `ggml_vec_dot_*`; the AVX2 dots
//! keep ggml's AVX2 accumulators and order, and the AVX-512 ones are bit
//! for bit the AVX2 ones. For prompt processing, `gemm` (Q8_0, Q4_0,
//! IQ4_NL, MXFP4, Q4_K, Q5_K, Q6_K, IQ4_XS) multiplies a weight row with a
//! packed panel of [`GEMM_COLS`] activation columns; `vec_dot_cols` dots
//! one weight row with up to [`VEC_DOT_COLS_MAX`] activation rows (Q4_0,
//! Q8_0, IQ4_NL, IQ4_XS, MXFP4) and `vec_dot_tile` (Q8_0) register tiles of
//! several weight rows × columns; all three are bit for bit `vec_dot` per
//! output. The Q8_0 / Q8_K activation quantizers of the SIMD levels equal
//! the references byte for byte.
//!
//! # Layout (imports point one way)
//! - `blocks`: each type's block struct and scalar reference kernels, the
//!   activation panels; depends on no SIMD level.
//! - `avx2`, `avx512`: the SIMD kernels on those block slices (`unsafe fn`s
//!   with the level's target features).
//! - `tables`: one [`CpuTable`] per [`CpuLevel`], each the level below's
//!   with the level's own kernels put in; [`cpu_traits`] reads the table of
//!   the level chosen once at start ([`cpu_level`]: the best the CPU has,
//!   or `GGML_CPU_LEVEL`).
//! - this module: the public paths (`quants::q8_0::from_float` and
//!   `quants::k_quants::q8_k::from_float` are the chosen level's).
//!
//! # Lengths
//! These are internal kernels called with checked shapes, but they check
//! anyway and **panic** on a mismatch: `to_float`/`from_float` require the
//! byte slice to be exactly the row of `n` elements (`n` = the f32 slice
//! length, a multiple of the block size); `vec_dot(n, x, y)` requires `n` to
//! be a multiple of the block size and `x`, `y` to hold at least the rows of
//! `n` elements (only that prefix is read).

pub mod block;
pub mod blocks;
pub mod gemm;
pub mod level;
pub(crate) mod prefetch;
pub mod tables;
pub mod traits;
pub mod vec_dot_cols;
pub mod vec_dot_tile;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

pub use block::Block;
pub use blocks::iq4_nl::BlockIq4Nl;
pub use blocks::iq4_xs::BlockIq4Xs;
pub use blocks::k_quants::q2_k::BlockQ2K;
pub use blocks::k_quants::q3_k::BlockQ3K;
pub use blocks::k_quants::q4_k::BlockQ4K;
pub use blocks::k_quants::q5_k::BlockQ5K;
pub use blocks::k_quants::q6_k::BlockQ6K;
pub use blocks::k_quants::q8_k::BlockQ8K;
pub use blocks::k_quants::QK_K;
pub use blocks::mxfp4::BlockMxfp4;
pub use blocks::q4_0::BlockQ4_0;
pub use blocks::q4_1::BlockQ4_1;
pub use blocks::q5_0::BlockQ5_0;
pub use blocks::q5_1::BlockQ5_1;
pub use blocks::q8_0::BlockQ8_0;
pub use blocks::q8_1::BlockQ8_1;
pub use blocks::{float, iq4_nl, iq4_xs, mxfp4, q4_0, q4_1, q5_0, q5_1, q8_0_panel, q8_1};
pub use gemm::{QGemm, GEMM_COLS};
pub use level::{
    cpu_level, cpu_level_checked, cpu_level_summary, detected_level, supported_levels, CpuLevel,
    CpuLevelError, CPU_LEVEL_ENV,
};
pub use tables::{cpu_table, cpu_traits, CpuTable};
pub use traits::CpuTypeTraits;
pub use vec_dot_cols::{VecDotCols, VEC_DOT_COLS_MAX};
pub use vec_dot_tile::{VecDotTile, VEC_DOT_TILE_ROWS};

use crate::types::GgmlType;

/// Q8_0 ([`blocks::q8_0`]), with its activation quantizer at the chosen
/// level.
pub mod q8_0 {
    pub use super::blocks::q8_0::*;

    /// `quantize_row_q8_0` at the chosen SIMD level, bit for bit
    /// [`from_float_scalar`]. Panics unless `dst` is exactly the row of
    /// `src.len()` elements.
    pub fn from_float(src: &[f32], dst: &mut [u8]) {
        (super::chosen(super::GgmlType::Q8_0).from_float)(src, dst)
    }
}

/// The K-quants ([`blocks::k_quants`]), with Q8_K's activation quantizer
/// at the chosen level.
pub mod k_quants {
    pub use super::blocks::k_quants::{panel, q2_k, q3_k, q4_k, q5_k, q6_k, QK_K};

    /// Q8_K ([`super::blocks::k_quants::q8_k`]), with its activation
    /// quantizer at the chosen level.
    pub mod q8_k {
        pub use crate::quants::blocks::k_quants::q8_k::*;

        /// `quantize_row_q8_K` at the chosen SIMD level, bit for bit
        /// [`from_float_scalar`]. Panics unless `dst` is exactly the row of
        /// `src.len()` elements.
        pub fn from_float(src: &[f32], dst: &mut [u8]) {
            (crate::quants::chosen(crate::types::GgmlType::Q8K).from_float)(src, dst)
        }
    }
}

/// The chosen level's entry of a type that has one.
fn chosen(ty: GgmlType) -> &'static CpuTypeTraits {
    match cpu_traits(ty) {
        Some(t) => t,
        None => unreachable!("{ty} has CPU traits"),
    }
}

/// Whether the chosen level runs SIMD kernels (AVX2 or above), for the ops
/// with AVX2 paths of their own, logs and benches.
pub fn simd_available() -> bool {
    cpu_level() >= CpuLevel::Avx2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_match_the_type_table() {
        fn check<B: Block>() {
            assert_eq!(size_of::<B>(), B::TYPE.type_size(), "{}", B::TYPE);
            assert_eq!(B::QK, B::TYPE.blck_size(), "{}", B::TYPE);
        }
        check::<BlockQ4_0>();
        check::<BlockQ4_1>();
        check::<BlockQ5_0>();
        check::<BlockQ5_1>();
        check::<BlockQ8_0>();
        check::<BlockQ8_1>();
        check::<BlockQ2K>();
        check::<BlockQ3K>();
        check::<BlockQ4K>();
        check::<BlockQ5K>();
        check::<BlockQ6K>();
        check::<BlockQ8K>();
        check::<BlockIq4Nl>();
        check::<BlockIq4Xs>();
        check::<BlockMxfp4>();
    }

    #[test]
    fn every_float_and_block_type_has_traits() {
        for t in GgmlType::ALL {
            let has = cpu_traits(t).is_some();
            let int_or_f64 = matches!(
                t,
                GgmlType::I8 | GgmlType::I16 | GgmlType::I32 | GgmlType::I64 | GgmlType::F64
            );
            assert_eq!(has, !int_or_f64, "{t}");
            if let Some(tr) = cpu_traits(t) {
                assert_eq!(tr.ty, t);
            }
        }
    }
}
