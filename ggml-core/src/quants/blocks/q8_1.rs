//! Q8_1: Q8_0 plus `s = d * sum(qs)`; the activation type of the Q4_1 and
//! Q5_1 dot products, whose minimum term needs the block sum.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::int8::{dequantize_i8, dot_i8, quantize_amax_127};
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::types::GgmlType;

/// Elements per Q8_1 block.
pub const QK8_1: usize = 32;

/// ggml's `block_q8_1`: value `i` is `d * qs[i]`; `s = d * Σ qs`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_1 {
    /// Block scale (delta): value = `d * q`.
    pub d: f16,
    /// `d` times the sum of the block's quantized values.
    pub s: f16,
    /// Quantized values, one byte each.
    pub qs: [i8; QK8_1],
}
impl_block!(BlockQ8_1, GgmlType::Q8_1, QK8_1, 36);

/// `d * qs` (ggml has no Q8_1 dequantizer; this is the obvious one).
/// Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ8_1>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK8_1)) {
        dequantize_i8(b.d.to_f32(), &b.qs, y);
    }
}

/// `quantize_row_q8_1_ref`: as Q8_0, plus `s = f16(d * Σ qs)`.
/// Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ8_1>(dst, src.len());
    for (x, b) in src.chunks_exact(QK8_1).zip(yb.iter_mut()) {
        let (d, qs) = quantize_amax_127(x);
        let sum: i32 = qs.iter().map(|&q| q as i32).sum();
        b.d = f16::from_f32(d);
        b.s = f16::from_f32(sum as f32 * d);
        b.qs = qs;
    }
}

/// Q8_1 · Q8_1 (`Σ dx·dy·Σ qx·qy`; ggml has none, this one serves tests and
/// completeness). Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let (x, y) = (row::<BlockQ8_1>(x, n), row::<BlockQ8_1>(y, n));
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        sumf += dot_i8(&bx.qs, &by.qs) as f32 * (bx.d.to_f32() * by.d.to_f32());
    }
    sumf
}
