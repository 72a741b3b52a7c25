//! Q8_0: 32 signed bytes and an f16 scale; also the activation type of the
//! Q4_0, Q5_0, Q8_0, IQ4_NL and MXFP4 dot products.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::int8::{dequantize_i8, dot_i8, quantize_amax_127};
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::types::GgmlType;

/// Elements per Q8_0 block.
pub const QK8_0: usize = 32;

/// ggml's `block_q8_0`: value `i` is `d * qs[i]`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    /// Block scale (delta): weight = `d * q`.
    pub d: f16,
    /// Quantized values, one byte each.
    pub qs: [i8; QK8_0],
}
impl_block!(BlockQ8_0, GgmlType::Q8_0, QK8_0, 34);

/// `dequantize_row_q8_0`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ8_0>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK8_0)) {
        dequantize_i8(b.d.to_f32(), &b.qs, y);
    }
}

/// `quantize_row_q8_0_ref`: `d = amax/127`, `q = roundf(x/d)` (half away
/// from zero), `d` stored as f16. Used for weights and activations alike
/// (the SIMD levels' quantizers are bit for bit this one). Panics unless
/// `dst` is exactly the row of `src.len()` elements.
pub fn from_float_scalar(src: &[f32], dst: &mut [u8]) {
    quantize_scalar(src, row_exact_mut::<BlockQ8_0>(dst, src.len()))
}

fn quantize_scalar(src: &[f32], yb: &mut [BlockQ8_0]) {
    for (x, b) in src.chunks_exact(QK8_0).zip(yb.iter_mut()) {
        let (d, qs) = quantize_amax_127(x);
        b.d = f16::from_f32(d);
        b.qs = qs;
    }
}

/// Scalar `ggml_vec_dot_q8_0_q8_0`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_scalar(row::<BlockQ8_0>(x, n), row::<BlockQ8_0>(y, n))
}

/// The scalar Q8_0 · Q8_0 dot of two block slices.
pub(crate) fn dot_scalar(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        sumf += dot_i8(&bx.qs, &by.qs) as f32 * (bx.d.to_f32() * by.d.to_f32());
    }
    sumf
}
