//! Q2_K: 2-bit values in 16-element sub-blocks, each with a 4-bit scale and
//! a 4-bit minimum, and f16 super-block scales for both.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_k::BlockQ8K;
use super::scale_search::make_qkx2_quants;
use super::QK_K;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::quants::blocks::rounding::{clamp_i32, nearest_int};
use crate::types::GgmlType;

/// ggml's `block_q2_K`. Element `128n + 32j + l` (`n < 2`, `j < 4`, `l < 32`)
/// is `(qs[32n + l] >> 2j) & 3`, in sub-block `s = 8n + 2j + l/16`, valued
/// `d·(scales[s] & 15)·q - dmin·(scales[s] >> 4)`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ2K {
    /// Per 16-weight sub-block: low nibble the 4-bit scale, high nibble the 4-bit minimum.
    pub scales: [u8; QK_K / 16],
    /// Quantized values, 2 bits each, four per byte.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// Super-block scale of the sub-block minimums.
    pub dmin: f16,
}
impl_block!(BlockQ2K, GgmlType::Q2K, QK_K, 84);

/// The 2-bit value of element `e` of a block.
#[inline]
fn q2(qs: &[u8; QK_K / 4], e: usize) -> u8 {
    let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
    (qs[32 * n + l] >> (2 * j)) & 3
}

/// `dequantize_row_q2_K`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ2K>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
        for (s, ys) in y.chunks_exact_mut(16).enumerate() {
            let sc = b.scales[s];
            let dl = d * (sc & 0x0f) as f32;
            let ml = min * (sc >> 4) as f32;
            for (l, v) in ys.iter_mut().enumerate() {
                *v = dl * q2(&b.qs, 16 * s + l) as f32 - ml;
            }
        }
    }
}

/// `quantize_row_q2_K_ref`: per 16 values `make_qkx2_quants` (3 levels,
/// weights `|x|`, absolute error), 4-bit scales and minima relative to the
/// largest, then the values re-quantized with the stored scales.
/// Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    let yb = row_exact_mut::<BlockQ2K>(dst, src.len());
    for (x, b) in src.chunks_exact(QK_K).zip(yb.iter_mut()) {
        let mut l_all = [0u8; QK_K];
        let mut laux = [0u8; 16];
        let mut scales = [0f32; QK_K / 16];
        let mut mins = [0f32; QK_K / 16];
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        for j in 0..QK_K / 16 {
            let xs = &x[16 * j..16 * j + 16];
            let mut w = [0f32; 16];
            for (w, v) in w.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let (s, m) = make_qkx2_quants(
                3,
                xs,
                &w,
                &mut l_all[16 * j..16 * j + 16],
                &mut laux,
                -0.5,
                0.1,
                15,
                true,
            );
            scales[j] = s;
            mins[j] = m;
            max_scale = max_scale.max(s);
            max_min = max_min.max(m);
        }
        let mut sc = [0u8; QK_K / 16];
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for (o, &s) in sc.iter_mut().zip(&scales) {
                *o = clamp_i32(nearest_int(iscale * s), 0, 15) as u8;
            }
            b.d = f16::from_f32(max_scale / Q4SCALE);
        } else {
            b.d = f16::ZERO;
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for (o, &m) in sc.iter_mut().zip(&mins) {
                *o |= (clamp_i32(nearest_int(iscale * m), 0, 15) as u8) << 4;
            }
            b.dmin = f16::from_f32(max_min / Q4SCALE);
        } else {
            b.dmin = f16::ZERO;
        }
        b.scales = sc;
        let (d_all, m_all) = (b.d.to_f32(), b.dmin.to_f32());
        for j in 0..QK_K / 16 {
            let d = d_all * (sc[j] & 0x0f) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = m_all * (sc[j] >> 4) as f32;
            for ii in 0..16 {
                let l = nearest_int((x[16 * j + ii] + dm) / d);
                l_all[16 * j + ii] = clamp_i32(l, 0, 3) as u8;
            }
        }
        let mut qs = [0u8; QK_K / 4];
        for n in 0..2 {
            for l in 0..32 {
                let e = 128 * n + l;
                qs[32 * n + l] =
                    l_all[e] | (l_all[e + 32] << 2) | (l_all[e + 64] << 4) | (l_all[e + 96] << 6);
            }
        }
        b.qs = qs;
    }
}

/// Scalar `ggml_vec_dot_q2_K_q8_K`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let (x, y) = (row::<BlockQ2K>(x, n), row::<BlockQ8K>(y, n));
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let bsums = by.bsums;
        let summs: i32 = bx
            .scales
            .iter()
            .zip(bsums.iter())
            .map(|(&sc, &bs)| (sc >> 4) as i32 * bs as i32)
            .sum();
        let mut isum = 0i32;
        // sub-block s = 8n + 2j + h holds elements 128n + 32j + 16h + l,
        // bits 2j of qs[32n + 16h + l]
        for s in 0..QK_K / 16 {
            let (n, j, h) = (s / 8, (s % 8) / 2, s % 2);
            let qs = &bx.qs[32 * n + 16 * h..32 * n + 16 * h + 16];
            let q8 = &by.qs[16 * s..16 * s + 16];
            let isuml: i32 = qs
                .iter()
                .zip(q8)
                .map(|(&q, &y)| ((q >> (2 * j)) & 3) as i32 * y as i32)
                .sum();
            isum += (bx.scales[s] & 0x0f) as i32 * isuml;
        }
        let dall = by.d * bx.d.to_f32();
        let dmin = by.d * bx.dmin.to_f32();
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}
