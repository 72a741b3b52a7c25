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

/// The `type_traits_cpu` entry of a weight type with a GEMM: `GEMM` (a
/// [`QGemm`] over the panel module `$panel`), its `run` (the AVX2 kernel
/// `$avx2` when the CPU has it, else the type's scalar dot `dot_scalar`
/// per column of the panel) and `gemm_scalar_for_tests`. `$qk` is the
/// block size.
macro_rules! gemm_entry {
    ($name:literal, $block:ty, $qk:expr, $($avx2:ident)::+, $($panel:ident)::+) => {
        #[doc = concat!("The prompt kernels of ", $name, " (see [`crate::quants::gemm`]).")]
        pub static GEMM: $crate::quants::gemm::QGemm = $crate::quants::gemm::QGemm {
            panel_bytes: $($panel)::+::panel_bytes,
            pack: $($panel)::+::pack,
            run: gemm_run,
        };

        /// `out[t] = vec_dot(n, x, column t of panel)`, AVX2 when available.
        fn gemm_run(
            n: usize,
            x: &[u8],
            p: &[u8],
            out: &mut [f32; $crate::quants::gemm::GEMM_COLS],
        ) {
            let x = $crate::quants::block::row::<$block>(x, n);
            $crate::quants::cpu_features::dispatch!($($avx2)::+, gemm_scalar, (x, p, out))
        }

        fn gemm_scalar(x: &[$block], p: &[u8], out: &mut [f32; $crate::quants::gemm::GEMM_COLS]) {
            $crate::quants::gemm::run_scalar(out, |t| $($panel)::+::column(x.len() * $qk, p, t), |y| {
                dot_scalar(x, y)
            })
        }

        /// The scalar `run`, for the panels' tests.
        #[cfg(test)]
        pub(crate) fn gemm_scalar_for_tests(
            n: usize,
            x: &[u8],
            p: &[u8],
            out: &mut [f32; $crate::quants::gemm::GEMM_COLS],
        ) {
            gemm_scalar($crate::quants::block::row::<$block>(x, n), p, out)
        }
    };
}
pub(crate) use gemm_entry;

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
