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
