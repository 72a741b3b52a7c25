//! Arithmetic shared by the blocks of signed 8-bit values (Q8_0, Q8_1,
//! Q8_K): dequantization, the `amax / 127` quantization of Q8_0 and Q8_1,
//! and the integer dot product of two blocks' values.

/// `y[i] = q[i] · d`.
#[inline]
pub(crate) fn dequantize_i8(d: f32, qs: &[i8], y: &mut [f32]) {
    for (v, &q) in y.iter_mut().zip(qs) {
        *v = q as f32 * d;
    }
}

/// `quantize_row_q8_0_ref` for one block: `d = amax/127`, `q = roundf(x/d)`
/// (half away from zero); returns `d` (before any f16 rounding) and `q`.
#[inline]
pub(crate) fn quantize_amax_127<const N: usize>(x: &[f32]) -> (f32, [i8; N]) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; N];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    (d, qs)
}

/// `Σ a[i]·b[i]`, accumulated in `i32`.
#[inline]
pub(crate) fn dot_i8<const N: usize>(a: &[i8; N], b: &[i8; N]) -> i32 {
    a.iter()
        .zip(b.iter())
        .map(|(&a, &b)| a as i32 * b as i32)
        .sum()
}
