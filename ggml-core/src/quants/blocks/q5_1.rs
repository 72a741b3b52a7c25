//! Q5_1: 32 5-bit values with an f16 scale and an f16 minimum.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q5_0::{pack_q5, unpack_q5};
use super::q8_1::BlockQ8_1;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::types::GgmlType;

/// Elements per Q5_1 block.
pub const QK5_1: usize = 32;

/// ggml's `block_q5_1`: the bits as [`super::q5_0::BlockQ5_0`], value
/// `d * q + m`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_1 {
    /// Block scale (delta): weight = `d * q`.
    pub d: f16,
    /// Block minimum: weight = `d * q + m`.
    pub m: f16,
    /// Fifth bit of each of the 32 quantized values.
    pub qh: [u8; 4],
    /// Low 4 bits of each quantized value, two per byte.
    pub qs: [u8; QK5_1 / 2],
}
impl_block!(BlockQ5_1, GgmlType::Q5_1, QK5_1, 24);

/// `dequantize_row_q5_1`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ5_1>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK5_1)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (v, &q) in y.iter_mut().zip(unpack_q5(b.qh, &b.qs).iter()) {
            *v = q as f32 * d + m;
        }
    }
}

/// `quantize_row_q5_1_ref`: `d = (max - min) / 31`, `m = min`,
/// `q = trunc((x - min)/d + 0.5)` (clamped to 31).
/// Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ5_1>(dst, src.len());
    for (x, b) in src.chunks_exact(QK5_1).zip(yb.iter_mut()) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in x {
            min = min.min(v);
            max = max.max(v);
        }
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        b.m = f16::from_f32(min);
        let mut q = [0u8; 32];
        for (o, &v) in q.iter_mut().zip(x) {
            *o = (((v - min) * id + 0.5) as u8).min(31);
        }
        (b.qh, b.qs) = pack_q5(&q);
    }
}

/// Scalar `ggml_vec_dot_q5_1_q8_1` (`dx·dy·Σ q·q8 + m·s`).
/// Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let (x, y) = (row::<BlockQ5_1>(x, n), row::<BlockQ8_1>(y, n));
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let q = unpack_q5(bx.qh, &bx.qs);
        let sumi: i32 = q
            .iter()
            .zip(by.qs.iter())
            .map(|(&a, &b)| a as i32 * b as i32)
            .sum();
        sumf += (bx.d.to_f32() * by.d.to_f32()) * sumi as f32 + bx.m.to_f32() * by.s.to_f32();
    }
    sumf
}
