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

use crate::quants::VEC_DOT_COLS_MAX;

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

/// The body of a `vec_dot_tile`: the AVX2 kernel `$avx2::<R, C>([x_blocks;
/// R], [y_blocks; C], &mut [[f32; C]; R])` over tiles of 2 rows × up to
/// [`TILE_COLS`] columns when the CPU has AVX2/FMA/F16C; a single row (or no
/// AVX2) goes through `$cols` (the type's `vec_dot_cols`) per row.
macro_rules! tile_dispatch {
    ($bx:ty, $by:ty, $($avx2:ident)::+, $cols:path, ($n:expr, $xs:expr, $ys:expr, $out:expr)) => {{
        let (n, xs, ys, out): (usize, &[&[u8]], &[&[u8]], &mut [f32]) = ($n, $xs, $ys, $out);
        $crate::quants::vec_dot_tile::check_tile(xs, ys, out);
        let nc = ys.len();
        #[cfg(target_arch = "x86_64")]
        {
            if xs.len() == 2 && $crate::quants::cpu_features::has_avx2_fma_f16c() {
                let xb = [
                    $crate::quants::block::row::<$bx>(xs[0], n),
                    $crate::quants::block::row::<$bx>(xs[1], n),
                ];
                let mut c0 = 0;
                while c0 < nc {
                    let w = (nc - c0).min($crate::quants::vec_dot_tile::TILE_COLS);
                    macro_rules! go {
                        ($c:literal) => {{
                            let yb: [&[$by]; $c] = std::array::from_fn(|c| {
                                $crate::quants::block::row::<$by>(ys[c0 + c], n)
                            });
                            let mut o = [[0f32; $c]; 2];
                            // SAFETY: `$avx2` is compiled with `avx2,fma,f16c`,
                            // which the run-time check above proved present;
                            // the block slices are bounds-checked (`row`).
                            unsafe { $($avx2)::+::<2, $c>(xb, yb, &mut o) };
                            for (r, or) in o.iter().enumerate() {
                                out[r * nc + c0..][..$c].copy_from_slice(or);
                            }
                        }};
                    }
                    match w {
                        1 => go!(1),
                        2 => go!(2),
                        3 => go!(3),
                        _ => go!(4),
                    }
                    c0 += w;
                }
                return;
            }
        }
        for (r, x) in xs.iter().enumerate() {
            $cols(n, x, ys, &mut out[r * nc..(r + 1) * nc]);
        }
    }};
}
pub(crate) use tile_dispatch;
