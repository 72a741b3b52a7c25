//! Q4_1: 32 4-bit values with an f16 scale and an f16 minimum.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_1::BlockQ8_1;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::types::GgmlType;

/// Elements per Q4_1 block.
pub const QK4_1: usize = 32;

/// ggml's `block_q4_1`: value `j` is `d * (qs[j] & 15) + m`, value `j + 16`
/// is `d * (qs[j] >> 4) + m`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    /// Block scale (delta): weight = `d * q`.
    pub d: f16,
    /// Block minimum: weight = `d * q + m`.
    pub m: f16,
    /// Quantized values, 4 bits each, two per byte.
    pub qs: [u8; QK4_1 / 2],
}
impl_block!(BlockQ4_1, GgmlType::Q4_1, QK4_1, 20);

/// `dequantize_row_q4_1`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ4_1>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK4_1)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for j in 0..QK4_1 / 2 {
            y[j] = (b.qs[j] & 0x0f) as f32 * d + m;
            y[j + 16] = (b.qs[j] >> 4) as f32 * d + m;
        }
    }
}

/// `quantize_row_q4_1_ref`: `d = (max - min) / 15`, `m = min`,
/// `q = min(15, trunc((x - min)/d + 0.5))`.
/// Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ4_1>(dst, src.len());
    for (x, b) in src.chunks_exact(QK4_1).zip(yb.iter_mut()) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in x {
            min = min.min(v);
            max = max.max(v);
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        b.m = f16::from_f32(min);
        let q = |v: f32| (((v - min) * id + 0.5) as i8).clamp(0, 15) as u8;
        let mut qs = [0u8; 16];
        for (j, o) in qs.iter_mut().enumerate() {
            *o = q(x[j]) | (q(x[j + 16]) << 4);
        }
        b.qs = qs;
    }
}

/// Scalar `ggml_vec_dot_q4_1_q8_1` (`dx·dy·Σ q·q8 + m·s`).
/// Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let (x, y) = (row::<BlockQ4_1>(x, n), row::<BlockQ8_1>(y, n));
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let mut sumi = 0i32;
        for j in 0..QK4_1 / 2 {
            sumi += (bx.qs[j] & 0x0f) as i32 * by.qs[j] as i32
                + (bx.qs[j] >> 4) as i32 * by.qs[j + 16] as i32;
        }
        sumf += (bx.d.to_f32() * by.d.to_f32()) * sumi as f32 + bx.m.to_f32() * by.s.to_f32();
    }
    sumf
}
