//! MXFP4 (OCP microscaling FP4): 32 E2M1 values and a shared E8M0 exponent.

use bytemuck::{Pod, Zeroable};

use super::q8_0::BlockQ8_0;
use super::q8_0_panel;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::quants::gemm::{run_scalar, GEMM_COLS};
use crate::types::GgmlType;

/// Elements per MXFP4 block.
pub const QK_MXFP4: usize = 32;

/// ggml's `kvalues_mxfp4`: the E2M1 values doubled (so they are integers);
/// the scale is halved to compensate (see [`e8m0_to_f32_half`]).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// ggml's `block_mxfp4`: value `j` is `K[qs[j] & 15]·2^(e-128)`, value
/// `j + 16` uses the high nibble.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockMxfp4 {
    /// Shared E8M0 exponent: scale = `2^(e - 127)`.
    pub e: u8,
    /// E2M1 values, 4 bits each, two per byte.
    pub qs: [u8; QK_MXFP4 / 2],
}
impl_block!(BlockMxfp4, GgmlType::MXFP4, QK_MXFP4, 17);

/// ggml's `ggml_e8m0_to_fp32_half`: `2^(e - 128)`, exact for every `e`.
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

/// `dequantize_row_mxfp4`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockMxfp4>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK_MXFP4)) {
        let d = e8m0_to_f32_half(b.e);
        for j in 0..16 {
            y[j] = KVALUES_MXFP4[(b.qs[j] & 0x0f) as usize] as f32 * d;
            y[j + 16] = KVALUES_MXFP4[(b.qs[j] >> 4) as usize] as f32 * d;
        }
    }
}

/// ggml's `best_index_mxfp4`: the first index of least `|K[i]·d - x|`.
fn best_index(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (KVALUES_MXFP4[0] as f32 * d - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (k as f32 * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// `quantize_row_mxfp4_ref`: `e = floor(log2(amax)) - 2 + 127` (clamped to
/// the E8M0 range; ggml leaves out-of-range exponents undefined), nearest
/// value per element. Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockMxfp4>(dst, src.len());
    for (x, b) in src.chunks_exact(QK_MXFP4).zip(yb.iter_mut()) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let e = if amax > 0.0 {
            (amax.log2().floor() - 2.0 + 127.0).clamp(0.0, 254.0) as u8
        } else {
            0
        };
        let d = e8m0_to_f32_half(e);
        let mut qs = [0u8; 16];
        for (j, o) in qs.iter_mut().enumerate() {
            *o = best_index(x[j], d) | (best_index(x[j + 16], d) << 4);
        }
        *b = BlockMxfp4 { e, qs };
    }
}

/// Scalar `ggml_vec_dot_mxfp4_q8_0`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_scalar(row::<BlockMxfp4>(x, n), row::<BlockQ8_0>(y, n))
}

/// The scalar GEMM run of MXFP4 (see [`crate::quants::gemm`]): `out[t]`
/// = the scalar dot with column `t` of the panel. Panics when `x` is shorter
/// than the row of `n` elements or `panel` is not the panel of `n`.
pub fn gemm_scalar(n: usize, x: &[u8], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let x = row::<BlockMxfp4>(x, n);
    run_scalar(
        out,
        |t| q8_0_panel::column(n, panel, t),
        |y| dot_scalar(x, y),
    )
}

fn dot_scalar(x: &[BlockMxfp4], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let mut sumi = 0i32;
        for j in 0..16 {
            sumi += KVALUES_MXFP4[(bx.qs[j] & 0x0f) as usize] as i32 * by.qs[j] as i32;
            sumi += KVALUES_MXFP4[(bx.qs[j] >> 4) as usize] as i32 * by.qs[j + 16] as i32;
        }
        sumf += e8m0_to_f32_half(bx.e) * by.d.to_f32() * sumi as f32;
    }
    sumf
}
