//! Q5_K: Q4_K with a fifth bit per value in `qh`.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::panel;
use super::q4_k::{dot_block_scales_mins, quantize_super_block_qkx, unpack_scales_mins};
use super::q8_k::BlockQ8K;
use super::QK_K;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::quants::gemm::{run_scalar, GEMM_COLS};
use crate::types::GgmlType;

/// ggml's `block_q5_K`. As [`super::q4_k::BlockQ4K`], with element
/// `64c + l` (`l < 32`) adding 16 when bit `2c` of `qh[l]` is set and element
/// `64c + 32 + l` when bit `2c + 1` is.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5K {
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// Super-block scale of the sub-block minimums.
    pub dmin: f16,
    /// Eight 6-bit sub-block scales and eight 6-bit minimums, packed into 12 bytes.
    pub scales: [u8; 12],
    /// High (fifth) bit of each quantized value.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits of each quantized value, two per byte.
    pub qs: [u8; QK_K / 2],
}
impl_block!(BlockQ5K, GgmlType::Q5K, QK_K, 176);

/// The 5-bit value of element `e`.
#[inline]
fn q5(b: &BlockQ5K, e: usize) -> u8 {
    let (c, half, l) = (e / 64, (e % 64) / 32, e % 32);
    let low = (b.qs[32 * c + l] >> (4 * half)) & 0x0f;
    let high = (b.qh[l] >> (2 * c + half)) & 1;
    low | (high << 4)
}

/// `dequantize_row_q5_K`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ5K>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
        let sm = unpack_scales_mins(&b.scales);
        for (s, ys) in y.chunks_exact_mut(32).enumerate() {
            let (ds, ms) = (d * sm[s] as f32, min * sm[8 + s] as f32);
            for (l, v) in ys.iter_mut().enumerate() {
                *v = ds * q5(b, 32 * s + l) as f32 - ms;
            }
        }
    }
}

/// `quantize_row_q5_K_ref`. Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ5K>(dst, src.len());
    for (x, b) in src.chunks_exact(QK_K).zip(yb.iter_mut()) {
        let mut l_all = [0u8; QK_K];
        let (d, dmin, scales) = quantize_super_block_qkx(x, 31, -0.5, 15, &mut l_all);
        let mut qs = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 8];
        for c in 0..4 {
            for l in 0..32 {
                let (lo, hi) = (l_all[64 * c + l], l_all[64 * c + 32 + l]);
                qs[32 * c + l] = (lo & 0x0f) | ((hi & 0x0f) << 4);
                qh[l] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
            }
        }
        *b = BlockQ5K {
            d,
            dmin,
            scales,
            qh,
            qs,
        };
    }
}

/// Scalar `ggml_vec_dot_q5_K_q8_K`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_scalar(row::<BlockQ5K>(x, n), row::<BlockQ8K>(y, n))
}

/// The scalar GEMM run of Q5_K (see [`crate::quants::gemm`]): `out[t]`
/// = the scalar dot with column `t` of the panel. Panics when `x` is shorter
/// than the row of `n` elements or `panel` is not the panel of `n`.
pub fn gemm_scalar(n: usize, x: &[u8], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let x = row::<BlockQ5K>(x, n);
    run_scalar(out, |t| panel::column(n, panel, t), |y| dot_scalar(x, y))
}

fn dot_scalar(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        sumf += dot_block_scales_mins(bx.d, bx.dmin, &bx.scales, by, |s, l| {
            q5(bx, 32 * s + l) as i32
        });
    }
    sumf
}
