//! The value of largest magnitude in a group: the anchor of ggml's symmetric
//! quantizers' scales.

/// `(amax, max)`: the largest `|v|` in `x` and the value `v` that has it (the
/// first such on ties); `(0, 0)` for an empty or all-zero group. NaNs never
/// win (as in ggml's loops).
#[inline]
pub(crate) fn abs_max(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}
