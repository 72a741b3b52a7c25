//! Q4_0: 32 4-bit values `q - 8` and an f16 scale.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::amax::abs_max;
use super::q8_0::BlockQ8_0;
use super::q8_0_panel;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::quants::gemm::{run_scalar, GEMM_COLS};
use crate::types::GgmlType;

/// Elements per Q4_0 block.
pub const QK4_0: usize = 32;

/// ggml's `block_q4_0`: value `j` is `d * ((qs[j] & 15) - 8)`, value `j + 16`
/// is `d * ((qs[j] >> 4) - 8)`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    /// Block scale (delta): weight = `d * q`.
    pub d: f16,
    /// Quantized values, 4 bits each (offset by 8), two per byte.
    pub qs: [u8; QK4_0 / 2],
}
impl_block!(BlockQ4_0, GgmlType::Q4_0, QK4_0, 18);

/// `dequantize_row_q4_0`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ4_0>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK4_0)) {
        let d = b.d.to_f32();
        for j in 0..QK4_0 / 2 {
            y[j] = ((b.qs[j] & 0x0f) as i32 - 8) as f32 * d;
            y[j + 16] = ((b.qs[j] >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// `quantize_row_q4_0_ref`: `d = max / -8` with `max` the value of largest
/// magnitude, `q = min(15, trunc(x/d + 8.5))`.
/// Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ4_0>(dst, src.len());
    for (x, b) in src.chunks_exact(QK4_0).zip(yb.iter_mut()) {
        let (_, max) = abs_max(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d = f16::from_f32(d);
        let q = |v: f32| ((v * id + 8.5) as i8).clamp(0, 15) as u8;
        let mut qs = [0u8; 16];
        for (j, o) in qs.iter_mut().enumerate() {
            *o = q(x[j]) | (q(x[j + 16]) << 4);
        }
        b.qs = qs;
    }
}

/// Scalar `ggml_vec_dot_q4_0_q8_0`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_scalar(row::<BlockQ4_0>(x, n), row::<BlockQ8_0>(y, n))
}

/// The scalar GEMM run of Q4_0 (see [`crate::quants::gemm`]): `out[t]`
/// = the scalar dot with column `t` of the panel. Panics when `x` is shorter
/// than the row of `n` elements or `panel` is not the panel of `n`.
pub fn gemm_scalar(n: usize, x: &[u8], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let x = row::<BlockQ4_0>(x, n);
    run_scalar(
        out,
        |t| q8_0_panel::column(n, panel, t),
        |y| dot_scalar(x, y),
    )
}

fn dot_scalar(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let mut sumi = 0i32;
        for j in 0..QK4_0 / 2 {
            let v0 = (bx.qs[j] & 0x0f) as i32 - 8;
            let v1 = (bx.qs[j] >> 4) as i32 - 8;
            sumi += v0 * by.qs[j] as i32 + v1 * by.qs[j + 16] as i32;
        }
        sumf += sumi as f32 * (bx.d.to_f32() * by.d.to_f32());
    }
    sumf
}
