//! Q5_0: 32 5-bit values `q - 16` (low nibbles in `qs`, fifth bits in `qh`)
//! and an f16 scale.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::amax::abs_max;
use super::q8_0::BlockQ8_0;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::types::GgmlType;

/// Elements per Q5_0 block.
pub const QK5_0: usize = 32;

/// ggml's `block_q5_0`: value `j` (`j < 16`) is
/// `d * ((qs[j] & 15 | bit j of qh << 4) - 16)`; value `j + 16` uses the
/// high nibble and bit `j + 16`. `qh` is a little-endian `u32`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_0 {
    /// Block scale (delta): weight = `d * q`.
    pub d: f16,
    /// Fifth bit of each of the 32 quantized values.
    pub qh: [u8; 4],
    /// Low 4 bits of each quantized value, two per byte.
    pub qs: [u8; QK5_0 / 2],
}
impl_block!(BlockQ5_0, GgmlType::Q5_0, QK5_0, 22);

/// The 5-bit values (0..32) of a Q5_0/Q5_1 block, in element order.
#[inline]
pub(crate) fn unpack_q5(qh: [u8; 4], qs: &[u8; 16]) -> [u8; 32] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0u8; 32];
    for j in 0..16 {
        q[j] = (qs[j] & 0x0f) | ((((qh >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

/// Packs 5-bit values (0..32) into `(qh, qs)`.
#[inline]
pub(crate) fn pack_q5(q: &[u8; 32]) -> ([u8; 4], [u8; 16]) {
    let mut qh = 0u32;
    let mut qs = [0u8; 16];
    for j in 0..16 {
        qs[j] = (q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4);
        qh |= (((q[j] >> 4) & 1) as u32) << j;
        qh |= (((q[j + 16] >> 4) & 1) as u32) << (j + 16);
    }
    (qh.to_le_bytes(), qs)
}

/// `dequantize_row_q5_0`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ5_0>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK5_0)) {
        let d = b.d.to_f32();
        for (v, &q) in y.iter_mut().zip(unpack_q5(b.qh, &b.qs).iter()) {
            *v = (q as i32 - 16) as f32 * d;
        }
    }
}

/// `quantize_row_q5_0_ref`: `d = max / -16`, `q = min(31, trunc(x/d + 16.5))`.
/// Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ5_0>(dst, src.len());
    for (x, b) in src.chunks_exact(QK5_0).zip(yb.iter_mut()) {
        let (_, max) = abs_max(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        let mut q = [0u8; 32];
        for (o, &v) in q.iter_mut().zip(x) {
            *o = ((v * id + 16.5) as i8).clamp(0, 31) as u8;
        }
        (b.qh, b.qs) = pack_q5(&q);
    }
}

/// Scalar `ggml_vec_dot_q5_0_q8_0`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let (x, y) = (row::<BlockQ5_0>(x, n), row::<BlockQ8_0>(y, n));
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let q = unpack_q5(bx.qh, &bx.qs);
        let sumi: i32 = q
            .iter()
            .zip(by.qs.iter())
            .map(|(&a, &b)| (a as i32 - 16) * b as i32)
            .sum();
        sumf += sumi as f32 * (bx.d.to_f32() * by.d.to_f32());
    }
    sumf
}
