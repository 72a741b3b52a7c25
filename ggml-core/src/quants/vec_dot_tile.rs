//! `vec_dot_tile`: several weight rows dotted with several activation rows
//! at once, `out[r * ys.len() + c] = vec_dot(n, xs[r], ys[c])` bit for bit —
//! the register-blocked micro-kernel of prompt processing.
//!
//! Where [`crate::quants::vec_dot_cols`] shares one weight row's unpacking
//! among the columns, a tile also shares each column's loads and block
//! setup among [`VEC_DOT_TILE_ROWS`] rows, and keeps the per-output integer
//! sums of a block in registers (AVX2: tiles of 2 rows × 4 columns). Each
//! output keeps the single dot's f32 accumulators and their order, so the
//! result does not depend on the tiling.
//!
//! Only Q8_0 has one (AVX2, 2 rows × 4 columns). The K-quants went further:
//! their prompt kernels are [`crate::quants::gemm`]'s, a weight row
//! against a packed panel of 8 columns with one integer accumulator per
//! column in a register, which measured about twice as fast as these tiles
//! (`cargo bench -p ggml-core --bench quant_dot -- --prompt-only`).

use super::vec_dot_cols::VEC_DOT_COLS_MAX;

/// Most weight rows one `vec_dot_tile` call takes.
pub const VEC_DOT_TILE_ROWS: usize = 2;

/// Columns of one register tile of the AVX2 kernels (a call's columns are
/// cut into tiles of this many, the last one narrower).
pub(crate) const TILE_COLS: usize = 4;

/// `out[r * ys.len() + c] = vec_dot(n, xs[r], ys[c])` for `xs.len() <=`
/// [`VEC_DOT_TILE_ROWS`] weight rows, `ys.len() <=` [`VEC_DOT_COLS_MAX`]
/// activation rows and `out.len() == xs.len() * ys.len()`. Panics on other
/// lengths, or when a row is shorter than `n` elements (as `vec_dot`).
pub type VecDotTile = fn(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]);

/// The checks every `vec_dot_tile` starts with.
#[inline]
pub(crate) fn check_tile(xs: &[&[u8]], ys: &[&[u8]], out: &[f32]) {
    assert!(
        xs.len() <= VEC_DOT_TILE_ROWS,
        "vec_dot_tile: {} rows, at most {VEC_DOT_TILE_ROWS}",
        xs.len()
    );
    assert!(
        ys.len() <= VEC_DOT_COLS_MAX,
        "vec_dot_tile: {} columns, at most {VEC_DOT_COLS_MAX}",
        ys.len()
    );
    assert_eq!(
        out.len(),
        xs.len() * ys.len(),
        "vec_dot_tile: {} rows x {} columns, {} outputs",
        xs.len(),
        ys.len(),
        out.len()
    );
}
