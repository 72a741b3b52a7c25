//! `vec_dot_cols`: one weight row dotted with several activation rows at
//! once, `out[c] = vec_dot(n, x, ys[c])` bit for bit. Prompt processing
//! multiplies every weight row with many columns; a kernel that unpacks the
//! row once per block for all of them (nibbles, scales, minima) does a
//! fraction of the single dot's work per output, and since each column keeps
//! the single dot's accumulators in the single dot's order, the result does
//! not depend on how columns are grouped.

/// Most columns one `vec_dot_cols` call takes.
pub const VEC_DOT_COLS_MAX: usize = 8;

/// `out[c] = vec_dot(n, x, ys[c])` for `ys.len() == out.len() <=`
/// [`VEC_DOT_COLS_MAX`] columns. Panics on other lengths, or when a row is
/// shorter than `n` elements (as `vec_dot`).
pub type VecDotCols = fn(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]);

/// The checks every `vec_dot_cols` starts with.
#[inline]
pub(crate) fn check_cols(ys: &[&[u8]], out: &[f32]) {
    assert_eq!(
        ys.len(),
        out.len(),
        "vec_dot_cols: {} columns, {} outputs",
        ys.len(),
        out.len()
    );
    assert!(
        ys.len() <= VEC_DOT_COLS_MAX,
        "vec_dot_cols: {} columns, at most {VEC_DOT_COLS_MAX}",
        ys.len()
    );
}

/// The body of a `vec_dot_cols`: the AVX2 kernel `$avx2::<C>(x_blocks,
/// [y_blocks; C], out)` when the CPU has AVX2/FMA/F16C, else one `$single`
/// (the type's `vec_dot`) per column.
macro_rules! cols_dispatch {
    ($bx:ty, $by:ty, $($avx2:ident)::+, $single:path, ($n:expr, $x:expr, $ys:expr, $out:expr)) => {{
        let (n, x, ys, out): (usize, &[u8], &[&[u8]], &mut [f32]) = ($n, $x, $ys, $out);
        $crate::quants::vec_dot_cols::check_cols(ys, out);
        #[cfg(target_arch = "x86_64")]
        {
            if $crate::quants::cpu_features::has_avx2_fma_f16c() {
                let xb = $crate::quants::block::row::<$bx>(x, n);
                macro_rules! go {
                    ($c:literal) => {{
                        let yb: [&[$by]; $c] =
                            std::array::from_fn(|c| $crate::quants::block::row::<$by>(ys[c], n));
                        // SAFETY: `$avx2` is compiled with `avx2,fma,f16c`,
                        // which the run-time check above proved present; the
                        // block slices are bounds-checked (`row`).
                        unsafe { $($avx2)::+::<$c>(xb, yb, out) }
                    }};
                }
                match ys.len() {
                    0 => {}
                    1 => go!(1),
                    2 => go!(2),
                    3 => go!(3),
                    4 => go!(4),
                    5 => go!(5),
                    6 => go!(6),
                    7 => go!(7),
                    _ => go!(8),
                }
                return;
            }
        }
        for (o, y) in out.iter_mut().zip(ys) {
            *o = $single(n, x, y);
        }
    }};
}
pub(crate) use cols_dispatch;
