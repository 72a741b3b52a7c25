//! Q6_K: 6-bit values (low 4 bits in `ql`, high 2 in `qh`) in 16-element
//! sub-blocks with signed 8-bit scales and an f16 super-scale.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::panel;
use super::q8_k::BlockQ8K;
use super::scale_search::{make_qx_quants, GROUP_MAX_EPS};
use super::QK_K;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::quants::blocks::rounding::{clamp_i32, nearest_int};
use crate::quants::gemm::{run_scalar, GEMM_COLS};
use crate::types::GgmlType;

/// ggml's `block_q6_K`. Element `e = 128n + 32k + l` (`k < 4`, `l < 32`) has
/// low bits from `ql[64n + l + 32·(k & 1)]` (low nibble for `k < 2`, high
/// otherwise) and high bits `(qh[32n + l] >> 2k) & 3`; value
/// `d · scales[e / 16] · (q - 32)`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ6K {
    /// Low 4 bits of each quantized value.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of each quantized value, four per byte.
    pub qh: [u8; QK_K / 4],
    /// Signed 8-bit scale of each 16-weight sub-block.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale of the sub-block scales.
    pub d: f16,
}
impl_block!(BlockQ6K, GgmlType::Q6K, QK_K, 210);

/// The signed 6-bit value (-32..32) of element `e`.
#[inline]
fn q6(b: &BlockQ6K, e: usize) -> i32 {
    let (n, k, l) = (e / 128, (e % 128) / 32, e % 32);
    let lbyte = b.ql[64 * n + l + 32 * (k & 1)];
    let low = if k < 2 { lbyte & 0x0f } else { lbyte >> 4 };
    let high = (b.qh[32 * n + l] >> (2 * k)) & 3;
    (low | (high << 4)) as i32 - 32
}

/// `dequantize_row_q6_K`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ6K>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (s, ys) in y.chunks_exact_mut(16).enumerate() {
            let ds = d * b.scales[s] as f32;
            for (l, v) in ys.iter_mut().enumerate() {
                *v = ds * q6(b, 16 * s + l) as f32;
            }
        }
    }
}

/// `quantize_row_q6_K_ref`: per 16 values `make_qx_quants(32)`, 8-bit scales
/// relative to the largest, values re-quantized with the stored scales.
/// Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ6K>(dst, src.len());
    for (x, b) in src.chunks_exact(QK_K).zip(yb.iter_mut()) {
        let mut l_all = [0i8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
        for ib in 0..QK_K / 16 {
            let s = make_qx_quants(
                32,
                &x[16 * ib..16 * ib + 16],
                &mut l_all[16 * ib..16 * ib + 16],
            );
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            *b = BlockQ6K::zeroed();
            continue;
        }
        let iscale = -128.0 / max_scale;
        b.d = f16::from_f32(1.0 / iscale);
        let mut sc = [0i8; QK_K / 16];
        for (o, &s) in sc.iter_mut().zip(&scales) {
            *o = clamp_i32(nearest_int(iscale * s), -128, 127) as i8;
        }
        b.scales = sc;
        let d_all = b.d.to_f32();
        for j in 0..QK_K / 16 {
            let d = d_all * sc[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let l = nearest_int(x[16 * j + ii] / d);
                l_all[16 * j + ii] = (clamp_i32(l, -32, 31) + 32) as i8;
            }
        }
        let mut ql = [0u8; QK_K / 2];
        let mut qh = [0u8; QK_K / 4];
        for n in 0..2 {
            for l in 0..32 {
                let e = 128 * n + l;
                let q = [0, 32, 64, 96].map(|o| l_all[e + o] as u8);
                ql[64 * n + l] = (q[0] & 0x0f) | ((q[2] & 0x0f) << 4);
                ql[64 * n + l + 32] = (q[1] & 0x0f) | ((q[3] & 0x0f) << 4);
                qh[32 * n + l] =
                    (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
        b.ql = ql;
        b.qh = qh;
    }
}

/// Scalar `ggml_vec_dot_q6_K_q8_K`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_scalar(row::<BlockQ6K>(x, n), row::<BlockQ8K>(y, n))
}

/// The scalar GEMM run of Q6_K (see [`crate::quants::gemm`]): `out[t]`
/// = the scalar dot with column `t` of the panel. Panics when `x` is shorter
/// than the row of `n` elements or `panel` is not the panel of `n`.
pub fn gemm_scalar(n: usize, x: &[u8], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let x = row::<BlockQ6K>(x, n);
    run_scalar(out, |t| panel::column(n, panel, t), |y| dot_scalar(x, y))
}

fn dot_scalar(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let mut isum = 0i32;
        for s in 0..QK_K / 16 {
            let isuml: i32 = (0..16)
                .map(|l| q6(bx, 16 * s + l) * by.qs[16 * s + l] as i32)
                .sum();
            isum += bx.scales[s] as i32 * isuml;
        }
        sumf += bx.d.to_f32() * by.d * isum as f32;
    }
    sumf
}
