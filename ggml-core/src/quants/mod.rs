//! GGUF block quantization: the block structs with ggml's byte layouts, and
//! their CPU kernels — row dequantization (`to_float`), quantization
//! (`from_float`) and the dot products of a weight row with an activation row
//! (`vec_dot`), as ggml's `type_traits_cpu` pairs them.
//!
//! Semantics follow ggml exactly: dequantization is bit-for-bit ggml's
//! `dequantize_row_*`; weight quantization is the reference quantizers
//! (`quantize_row_*_ref`); activation quantization (Q8_0, Q8_1, Q8_K) is
//! ggml's reference rounding; the dots accumulate integers per block and
//! scale once per block, as ggml's scalar `ggml_vec_dot_*`; the AVX2 dots
//! keep ggml's AVX2 accumulators and order. AVX2/FMA/F16C kernels (chosen
//! at run time) exist for F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
//! Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4; Q8_1 and Q8_K use
//! the scalar dot. For prompt processing, `gemm` (Q8_0, Q4_0, IQ4_NL, MXFP4,
//! Q4_K, Q5_K, Q6_K, IQ4_XS) multiplies a weight row with a packed panel of
//! [`GEMM_COLS`] activation columns; `vec_dot_cols` dots one weight row with
//! up to [`VEC_DOT_COLS_MAX`] activation rows (AVX2 for Q4_0, Q8_0, IQ4_NL,
//! IQ4_XS, MXFP4) and `vec_dot_tile` (Q8_0) register tiles of several weight
//! rows × columns; all three are bit for bit `vec_dot` per output. The Q8_0
//! / Q8_K activation quantizers have AVX2 versions equal byte for byte to
//! the references.
//!
//! # Lengths
//! These are internal kernels called with checked shapes, but they check
//! anyway and **panic** on a mismatch: `to_float`/`from_float` require the
//! byte slice to be exactly the row of `n` elements (`n` = the f32 slice
//! length, a multiple of the block size); `vec_dot(n, x, y)` requires `n` to
//! be a multiple of the block size and `x`, `y` to hold at least the rows of
//! `n` elements (only that prefix is read).

mod amax;
pub mod block;
mod cpu_features;
pub mod float;
pub mod gemm;
mod int8;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod k_quants;
pub mod mxfp4;
pub(crate) mod prefetch;
pub mod q4_0;
pub mod q4_1;
pub mod q5_0;
pub mod q5_1;
pub mod q8_0;
pub mod q8_0_panel;
pub mod q8_1;
mod rounding;
pub mod vec_dot_cols;
pub mod vec_dot_tile;

#[cfg(target_arch = "x86_64")]
mod avx2;

pub use block::Block;
pub use gemm::{QGemm, GEMM_COLS};
pub use iq4_nl::BlockIq4Nl;
pub use iq4_xs::BlockIq4Xs;
pub use k_quants::q2_k::BlockQ2K;
pub use k_quants::q3_k::BlockQ3K;
pub use k_quants::q4_k::BlockQ4K;
pub use k_quants::q5_k::BlockQ5K;
pub use k_quants::q6_k::BlockQ6K;
pub use k_quants::q8_k::BlockQ8K;
pub use k_quants::QK_K;
pub use mxfp4::BlockMxfp4;
pub use q4_0::BlockQ4_0;
pub use q4_1::BlockQ4_1;
pub use q5_0::BlockQ5_0;
pub use q5_1::BlockQ5_1;
pub use q8_0::BlockQ8_0;
pub use q8_1::BlockQ8_1;
pub use vec_dot_cols::{VecDotCols, VEC_DOT_COLS_MAX};
pub use vec_dot_tile::{VecDotTile, VEC_DOT_TILE_ROWS};

use crate::types::GgmlType;

/// CPU facts about a type, as ggml's `type_traits_cpu`: how to convert rows
/// and which type activations are converted to for the dot product.
#[derive(Debug)]
pub struct CpuTypeTraits {
    /// The type these facts describe.
    pub ty: GgmlType,
    /// Activation type for `vec_dot`, as ggml pairs them: the type itself for
    /// F32/F16/BF16, Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4, Q8_1 for
    /// Q4_1/Q5_1 (and Q8_1), Q8_K for the K-quants, IQ4_XS (and Q8_K).
    pub vec_dot_type: GgmlType,
    /// Dequantize / convert `n = dst.len()` elements (a multiple of the block
    /// size) from exactly `row_size(n)` raw bytes to f32. Panics otherwise.
    pub to_float: fn(src: &[u8], dst: &mut [f32]),
    /// Quantize / convert f32 to exactly `row_size(src.len())` raw bytes
    /// (reference quality; for Q8_0/Q8_1/Q8_K ggml's activation rounding).
    /// Panics on a length mismatch.
    pub from_float: fn(src: &[f32], dst: &mut [u8]),
    /// Dot product of `n` elements: `x` = weight row bytes of `ty`, `y` =
    /// activation row bytes of `vec_dot_type` (each at least a row of `n`).
    /// Uses AVX2/FMA/F16C when the CPU has them (detected once), else scalar.
    pub vec_dot: fn(n: usize, x: &[u8], y: &[u8]) -> f32,
    /// The scalar reference of `vec_dot`, kept for tests.
    pub vec_dot_scalar: fn(n: usize, x: &[u8], y: &[u8]) -> f32,
    /// One weight row against up to [`VEC_DOT_COLS_MAX`] activation rows,
    /// bit for bit `vec_dot` per column, for the types whose row unpacking
    /// is worth sharing (prompt processing); `None`: call `vec_dot` per
    /// column.
    pub vec_dot_cols: Option<VecDotCols>,
    /// Up to [`VEC_DOT_TILE_ROWS`] weight rows against up to
    /// [`VEC_DOT_COLS_MAX`] activation rows in register tiles, bit for bit
    /// `vec_dot` per output, for the types with such a micro-kernel
    /// (Q8_0); `None`: `vec_dot_cols` per row.
    pub vec_dot_tile: Option<VecDotTile>,
    /// The prompt kernels (a weight row against a packed panel of
    /// [`GEMM_COLS`] columns, bit for bit `vec_dot` per column) for the
    /// types that have them (Q4_K, Q5_K, Q6_K); `None`: `vec_dot_cols` or
    /// `vec_dot` per column.
    pub gemm: Option<&'static QGemm>,
}

/// The traits of a quant module `$m`; `simd` when it has a `vec_dot` of its
/// own, else its scalar dot serves as both; `simd, cols` when it also has a
/// `vec_dot_cols`.
macro_rules! traits {
    ($ty:ident, $dot_ty:ident, $m:path) => {
        traits!(@ $ty, $dot_ty, $m, vec_dot_scalar)
    };
    ($ty:ident, $dot_ty:ident, $m:path, simd) => {
        traits!(@ $ty, $dot_ty, $m, vec_dot)
    };
    ($ty:ident, $dot_ty:ident, $m:path, simd, cols) => {
        traits!(@ $ty, $dot_ty, $m, vec_dot, vec_dot_cols)
    };
    ($ty:ident, $dot_ty:ident, $m:path, simd, cols, tile) => {
        traits!(@ $ty, $dot_ty, $m, vec_dot, vec_dot_cols, vec_dot_tile)
    };
    ($ty:ident, $dot_ty:ident, $m:path, simd, cols, tile, gemm) => {{
        use $m as m;
        CpuTypeTraits {
            gemm: Some(&m::GEMM),
            ..traits!(@ $ty, $dot_ty, $m, vec_dot, vec_dot_cols, vec_dot_tile)
        }
    }};
    ($ty:ident, $dot_ty:ident, $m:path, simd, cols, gemm) => {{
        use $m as m;
        CpuTypeTraits {
            gemm: Some(&m::GEMM),
            ..traits!(@ $ty, $dot_ty, $m, vec_dot, vec_dot_cols)
        }
    }};
    ($ty:ident, $dot_ty:ident, $m:path, simd, gemm) => {{
        use $m as m;
        CpuTypeTraits {
            gemm: Some(&m::GEMM),
            ..traits!(@ $ty, $dot_ty, $m, vec_dot)
        }
    }};
    (@opt $m:ident) => {
        None
    };
    (@opt $m:ident, $f:ident) => {
        Some($m::$f)
    };
    (@ $ty:ident, $dot_ty:ident, $m:path, $vec_dot:ident $(, $cols:ident $(, $tile:ident)?)?) => {{
        use $m as m;
        CpuTypeTraits {
            ty: GgmlType::$ty,
            vec_dot_type: GgmlType::$dot_ty,
            to_float: m::to_float,
            from_float: m::from_float,
            vec_dot: m::$vec_dot,
            vec_dot_scalar: m::vec_dot_scalar,
            vec_dot_cols: traits!(@opt m $(, $cols)?),
            vec_dot_tile: traits!(@opt m $($(, $tile)?)?),
            gemm: None,
        }
    }};
}

static F32: CpuTypeTraits = CpuTypeTraits {
    ty: GgmlType::F32,
    vec_dot_type: GgmlType::F32,
    to_float: float::f32_to_float,
    from_float: float::f32_from_float,
    vec_dot: float::f32_vec_dot,
    vec_dot_scalar: float::f32_vec_dot_scalar,
    vec_dot_cols: None,
    vec_dot_tile: None,
    gemm: None,
};
static F16: CpuTypeTraits = CpuTypeTraits {
    ty: GgmlType::F16,
    vec_dot_type: GgmlType::F16,
    to_float: float::f16_to_float,
    from_float: float::f16_from_float,
    vec_dot: float::f16_vec_dot,
    vec_dot_scalar: float::f16_vec_dot_scalar,
    vec_dot_cols: None,
    vec_dot_tile: None,
    gemm: None,
};
static BF16: CpuTypeTraits = CpuTypeTraits {
    ty: GgmlType::BF16,
    vec_dot_type: GgmlType::BF16,
    to_float: float::bf16_to_float,
    from_float: float::bf16_from_float,
    vec_dot: float::bf16_vec_dot,
    vec_dot_scalar: float::bf16_vec_dot_scalar,
    vec_dot_cols: None,
    vec_dot_tile: None,
    gemm: None,
};
static Q4_0: CpuTypeTraits = traits!(Q4_0, Q8_0, q4_0, simd, cols, gemm);
static Q4_1: CpuTypeTraits = traits!(Q4_1, Q8_1, q4_1, simd);
static Q5_0: CpuTypeTraits = traits!(Q5_0, Q8_0, q5_0, simd);
static Q5_1: CpuTypeTraits = traits!(Q5_1, Q8_1, q5_1, simd);
static Q8_0: CpuTypeTraits = traits!(Q8_0, Q8_0, q8_0, simd, cols, tile, gemm);
static Q8_1: CpuTypeTraits = traits!(Q8_1, Q8_1, q8_1);
static Q2K: CpuTypeTraits = traits!(Q2K, Q8K, k_quants::q2_k, simd);
static Q3K: CpuTypeTraits = traits!(Q3K, Q8K, k_quants::q3_k, simd);
static Q4K: CpuTypeTraits = traits!(Q4K, Q8K, k_quants::q4_k, simd, gemm);
static Q5K: CpuTypeTraits = traits!(Q5K, Q8K, k_quants::q5_k, simd, gemm);
static Q6K: CpuTypeTraits = traits!(Q6K, Q8K, k_quants::q6_k, simd, gemm);
static Q8K: CpuTypeTraits = traits!(Q8K, Q8K, k_quants::q8_k);
static IQ4NL: CpuTypeTraits = traits!(IQ4NL, Q8_0, iq4_nl, simd, cols, gemm);
static IQ4XS: CpuTypeTraits = traits!(IQ4XS, Q8K, iq4_xs, simd, cols, gemm);
static MXFP4: CpuTypeTraits = traits!(MXFP4, Q8_0, mxfp4, simd, cols, gemm);

/// The CPU traits of `ty`, or `None` for types without CPU kernels here
/// (the integer types and F64).
pub fn cpu_traits(ty: GgmlType) -> Option<&'static CpuTypeTraits> {
    use GgmlType as T;
    Some(match ty {
        T::F32 => &F32,
        T::F16 => &F16,
        T::BF16 => &BF16,
        T::Q4_0 => &Q4_0,
        T::Q4_1 => &Q4_1,
        T::Q5_0 => &Q5_0,
        T::Q5_1 => &Q5_1,
        T::Q8_0 => &Q8_0,
        T::Q8_1 => &Q8_1,
        T::Q2K => &Q2K,
        T::Q3K => &Q3K,
        T::Q4K => &Q4K,
        T::Q5K => &Q5K,
        T::Q6K => &Q6K,
        T::Q8K => &Q8K,
        T::IQ4NL => &IQ4NL,
        T::IQ4XS => &IQ4XS,
        T::MXFP4 => &MXFP4,
        T::I8 | T::I16 | T::I32 | T::I64 | T::F64 => return None,
    })
}

/// Whether `vec_dot` runs AVX2 kernels on this CPU (for logs and benches).
pub fn simd_available() -> bool {
    cpu_features::has_avx2_fma_f16c()
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
