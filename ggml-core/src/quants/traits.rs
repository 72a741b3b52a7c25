//! One entry of a level's kernel table, as ggml's `type_traits_cpu`: a
//! type's row conversions, the type its activations are converted to, and
//! its dot-product kernels (decode and prompt).

use super::gemm::QGemm;
use super::vec_dot_cols::VecDotCols;
use super::vec_dot_tile::VecDotTile;
use crate::types::GgmlType;

/// CPU facts about a type at one SIMD level, as ggml's `type_traits_cpu`:
/// how to convert rows and which type activations are converted to for the
/// dot product.
#[derive(Debug, Clone, Copy)]
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
    /// activation row bytes of `vec_dot_type` (each at least a row of `n`),
    /// with the level's kernel (the level below's where it has none).
    pub vec_dot: fn(n: usize, x: &[u8], y: &[u8]) -> f32,
    /// The scalar reference of `vec_dot`, kept for tests.
    pub vec_dot_scalar: fn(n: usize, x: &[u8], y: &[u8]) -> f32,
    /// One weight row against up to [`crate::quants::VEC_DOT_COLS_MAX`]
    /// activation rows, bit for bit `vec_dot` per column, for the types
    /// whose row unpacking is worth sharing (prompt processing); `None`:
    /// call `vec_dot` per column.
    pub vec_dot_cols: Option<VecDotCols>,
    /// Up to [`crate::quants::VEC_DOT_TILE_ROWS`] weight rows against up to
    /// [`crate::quants::VEC_DOT_COLS_MAX`] activation rows in register
    /// tiles, bit for bit `vec_dot` per output, for the types with such a
    /// micro-kernel (Q8_0); `None`: `vec_dot_cols` per row.
    pub vec_dot_tile: Option<VecDotTile>,
    /// The prompt kernels (a weight row against a packed panel of
    /// [`crate::quants::GEMM_COLS`] columns, bit for bit `vec_dot` per
    /// column) for the types that have them; `None`: `vec_dot_cols` or
    /// `vec_dot` per column.
    pub gemm: Option<&'static QGemm>,
}
