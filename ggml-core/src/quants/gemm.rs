//! `gemm`: the prompt-processing kernels of the quantized types. One weight row is
//! multiplied with a *panel* of [`GEMM_COLS`] activation columns packed
//! side by side, block by block, so that the kernel reads every column's
//! 32 values of a sub-block from one place and keeps one integer
//! accumulator per column in a register (see
//! [`crate::quants::k_quants::panel`] for the layout).
//!
//! Each output is bit for bit the type's `vec_dot` of the weight row with
//! that column: the integer sums of a block are exact whatever their order,
//! and the f32 steps per block (`acc += dx·dy·isum`, then `acc -= dmin·dy·msum`
//! or nothing for the offset types, each one fused multiply-add) are the
//! same in both. So how many columns went through a panel, or none, never
//! changes a result, and thread counts and ubatch sizes give identical bits.

/// Activation columns in one panel.
pub const GEMM_COLS: usize = 8;

/// The prompt kernels of a weight type, as a `type_traits_cpu` entry.
#[derive(Debug)]
pub struct QGemm {
    /// Bytes of a panel of columns of `n` elements.
    pub panel_bytes: fn(n: usize) -> usize,
    /// Pack up to [`GEMM_COLS`] activation rows (`vec_dot_type` bytes, each
    /// at least the row of `n` elements) into `panel` (exactly
    /// `panel_bytes(n)` bytes); missing columns are packed as zeros.
    /// Panics on other lengths.
    pub pack: fn(n: usize, ys: &[&[u8]], panel: &mut [u8]),
    /// `out[c] = vec_dot(n, x, column c of panel)` bit for bit (0 for the
    /// zero columns). Panics when `x` is shorter than the row of `n`
    /// elements or `panel` is not `panel_bytes(n)` bytes.
    pub run: fn(n: usize, x: &[u8], panel: &[u8], out: &mut [f32; GEMM_COLS]),
}

/// The scalar `run` of a type: `out[t]` = `dot` of the weight row with
/// column `t` of the panel, unpacked by `column`.
pub(crate) fn run_scalar<Y>(
    out: &mut [f32; GEMM_COLS],
    column: impl Fn(usize) -> Vec<Y>,
    dot: impl Fn(&[Y]) -> f32,
) {
    for (t, o) in out.iter_mut().enumerate() {
        *o = dot(&column(t));
    }
}
