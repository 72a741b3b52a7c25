//! ggml's float-to-integer rounding helpers, made total (no panics, no UB).

/// ggml's `nearest_int`: round half to even (ggml adds 1.5·2²³ and reads the
/// mantissa, which is round-half-even for |x| ≤ 2²²). ggml asserts the range;
/// here values beyond it saturate and NaN gives 0, so quantizers never panic.
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// The smaller of `i` and `hi`, then the larger of that and `lo`
/// (ggml's `MAX(lo, MIN(hi, i))`).
#[inline]
pub(crate) fn clamp_i32(i: i32, lo: i32, hi: i32) -> i32 {
    i.min(hi).max(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_is_round_half_even_and_total() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-2.6), -3);
        assert_eq!(nearest_int(f32::NAN), 0);
        assert_eq!(nearest_int(1e30), i32::MAX);
    }
}
