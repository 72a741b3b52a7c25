//! Q3_K: 3-bit values (2 low bits in `qs`, the third in `hmask`) in
//! 16-element sub-blocks with 6-bit signed scales and an f16 super-scale.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_k::BlockQ8K;
use super::scale_search::make_q3_quants;
use super::QK_K;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::quants::blocks::rounding::{clamp_i32, nearest_int};
use crate::types::GgmlType;

/// ggml's `block_q3_K`. Element `e = 128n + 32j + l` has low bits
/// `(qs[32n + l] >> 2j) & 3` and, when bit `e / 32` of `hmask[e % 32]` is
/// clear, 4 subtracted; sub-block `s = e / 16` has the 6-bit scale
/// `(low nibble of scales[s % 8], high if s ≥ 8) | (2 bits of scales[8 + s % 4]
/// at 2·(s / 4)) << 4`, minus 32. Value `d · scale · q`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ3K {
    /// High (third) bit of each quantized value.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of each quantized value, four per byte.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit sub-block scales, packed into 12 bytes.
    pub scales: [u8; 12],
    /// Super-block scale of the sub-block scales.
    pub d: f16,
}
impl_block!(BlockQ3K, GgmlType::Q3K, QK_K, 110);

/// The 16 signed sub-block scales (already minus 32).
#[inline]
pub(crate) fn unpack_scales(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

/// The signed 3-bit value (-4..4) of element `e`.
#[inline]
fn q3(b: &BlockQ3K, e: usize) -> i32 {
    let (n, j, l) = (e / 128, (e % 128) / 32, e % 32);
    let low = ((b.qs[32 * n + l] >> (2 * j)) & 3) as i32;
    let high_set = b.hmask[l] & (1 << (e / 32)) != 0;
    low - if high_set { 0 } else { 4 }
}

/// `dequantize_row_q3_K`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ3K>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d_all = b.d.to_f32();
        let sc = unpack_scales(&b.scales);
        for (s, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d_all * sc[s] as f32;
            for (l, v) in ys.iter_mut().enumerate() {
                *v = dl * q3(b, 16 * s + l) as f32;
            }
        }
    }
}

/// `quantize_row_q3_K_ref`: per 16 values `make_q3_quants`, 6-bit scales
/// relative to the largest, then the values re-quantized with the stored
/// scales. Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ3K>(dst, src.len());
    for (x, b) in src.chunks_exact(QK_K).zip(yb.iter_mut()) {
        let mut l_all = [0i8; QK_K];
        let mut scales = [0f32; QK_K / 16];
        let (mut max_scale, mut amax) = (0f32, 0f32);
        for j in 0..QK_K / 16 {
            scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut l_all[16 * j..16 * j + 16]);
            if scales[j].abs() > amax {
                amax = scales[j].abs();
                max_scale = scales[j];
            }
        }
        let mut sb = [0u8; 12];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                let l = (clamp_i32(nearest_int(iscale * s), -32, 31) + 32) as u8;
                if j < 8 {
                    sb[j] = l & 0x0f;
                } else {
                    sb[j - 8] |= (l & 0x0f) << 4;
                }
                sb[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
            }
            b.d = f16::from_f32(1.0 / iscale);
        } else {
            b.d = f16::ZERO;
        }
        b.scales = sb;
        let sc = unpack_scales(&sb);
        let d_all = b.d.to_f32();
        for j in 0..QK_K / 16 {
            let d = d_all * sc[j] as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                let l = nearest_int(x[16 * j + ii] / d);
                l_all[16 * j + ii] = (clamp_i32(l, -4, 3) + 4) as i8;
            }
        }
        let mut hmask = [0u8; QK_K / 8];
        for (e, l) in l_all.iter_mut().enumerate() {
            if *l > 3 {
                hmask[e % 32] |= 1 << (e / 32);
                *l -= 4;
            }
        }
        let mut qs = [0u8; QK_K / 4];
        for n in 0..2 {
            for l in 0..32 {
                let e = 128 * n + l;
                qs[32 * n + l] =
                    (l_all[e] | (l_all[e + 32] << 2) | (l_all[e + 64] << 4) | (l_all[e + 96] << 6))
                        as u8;
            }
        }
        b.hmask = hmask;
        b.qs = qs;
    }
}

/// Scalar `ggml_vec_dot_q3_K_q8_K`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let (x, y) = (row::<BlockQ3K>(x, n), row::<BlockQ8K>(y, n));
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let sc = unpack_scales(&bx.scales);
        let mut isum = 0i32;
        // sub-block s = 8n + 2j + h holds elements 128n + 32j + 16h + l:
        // bits 2j of qs[32n + 16h + l], high bit 4n + j of hmask[16h + l]
        for (s, &scale) in sc.iter().enumerate() {
            let (n, j, h) = (s / 8, (s % 8) / 2, s % 2);
            let qs = &bx.qs[32 * n + 16 * h..32 * n + 16 * h + 16];
            let hm = &bx.hmask[16 * h..16 * h + 16];
            let q8 = &by.qs[16 * s..16 * s + 16];
            let bit = 1u8 << (4 * n + j);
            let mut isuml = 0i32;
            for l in 0..16 {
                let q = ((qs[l] >> (2 * j)) & 3) as i32 - if hm[l] & bit != 0 { 0 } else { 4 };
                isuml += q * q8[l] as i32;
            }
            isum += scale as i32 * isuml;
        }
        sumf += bx.d.to_f32() * by.d * isum as f32;
    }
    sumf
}
