//! Q8_K: the activation type of the K-quant and IQ4_XS dot products:
//! 256 signed bytes, an f32 scale and the sums of each 16 values.

use bytemuck::{Pod, Zeroable};

use super::QK_K;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::quants::blocks::amax::abs_max;
use crate::quants::blocks::int8::{dequantize_i8, dot_i8};
use crate::quants::blocks::rounding::nearest_int;
use crate::types::GgmlType;

/// ggml's `block_q8_K`: value `i` is `d * qs[i]`; `bsums[j] = Σ qs[16j..16j+16]`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8K {
    /// Super-block scale (f32): value = `d * q`.
    pub d: f32,
    /// Quantized values, one byte each.
    pub qs: [i8; QK_K],
    /// Sum of the quantized values of each group of 16.
    pub bsums: [i16; QK_K / 16],
}
impl_block!(BlockQ8K, GgmlType::Q8K, QK_K, 292);

/// `dequantize_row_q8_K`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ8K>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK_K)) {
        dequantize_i8(b.d, &b.qs, y);
    }
}

/// `quantize_row_q8_K_ref` (what ggml's x86 CPU backend uses): with `max` the
/// value of largest magnitude, `q = min(127, nearest_int(-127/max · x))`
/// (round half to even), `d = 1/(-127/max)`, plus the 16-value sums. An
/// all-zero block gets `d = 0` and zero sums.
/// The SIMD levels' quantizers are bit for bit this one. Panics unless
/// `dst` is exactly the row of `src.len()` elements.
pub fn from_float_scalar(src: &[f32], dst: &mut [u8]) {
    quantize_scalar(src, row_exact_mut::<BlockQ8K>(dst, src.len()))
}

fn quantize_scalar(src: &[f32], yb: &mut [BlockQ8K]) {
    for (x, b) in src.chunks_exact(QK_K).zip(yb.iter_mut()) {
        let (amax, max) = abs_max(x);
        if amax == 0.0 {
            *b = BlockQ8K::zeroed();
            continue;
        }
        let iscale = -127.0 / max;
        let mut qs = [0i8; QK_K];
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).clamp(-128, 127) as i8;
        }
        let mut bsums = [0i16; QK_K / 16];
        for (s, c) in bsums.iter_mut().zip(qs.chunks_exact(16)) {
            *s = c.iter().map(|&q| q as i16).sum();
        }
        b.qs = qs;
        b.bsums = bsums;
        b.d = 1.0 / iscale;
    }
}

/// Q8_K · Q8_K (`Σ dx·dy·Σ qx·qy`; ggml has none, this one serves tests and
/// completeness). Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let (x, y) = (row::<BlockQ8K>(x, n), row::<BlockQ8K>(y, n));
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        sumf += bx.d * by.d * dot_i8(&bx.qs, &by.qs) as f32;
    }
    sumf
}
