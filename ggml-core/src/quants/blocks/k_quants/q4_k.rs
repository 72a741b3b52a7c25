//! Q4_K: 4-bit values in 32-element sub-blocks, each with a 6-bit scale and a
//! 6-bit minimum, and f16 super-block scales for both.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::panel;
use super::q8_k::BlockQ8K;
use super::scale_search::make_qkx2_quants;
use super::QK_K;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::quants::blocks::rounding::{clamp_i32, nearest_int};
use crate::quants::gemm::{run_scalar, GEMM_COLS};
use crate::types::GgmlType;

/// ggml's `block_q4_K`. Element `64c + l` (`l < 32`) is `qs[32c + l] & 15` in
/// sub-block `2c`, element `64c + 32 + l` is `qs[32c + l] >> 4` in sub-block
/// `2c + 1`; sub-block `s` is valued `d·sc[s]·q - dmin·m[s]` with the 6-bit
/// `sc`, `m` packed in `scales` (see `unpack_scales_mins`).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4K {
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// Super-block scale of the sub-block minimums.
    pub dmin: f16,
    /// Eight 6-bit sub-block scales and eight 6-bit minimums, packed into 12 bytes.
    pub scales: [u8; 12],
    /// Quantized values, 4 bits each, two per byte.
    pub qs: [u8; QK_K / 2],
}
impl_block!(BlockQ4K, GgmlType::Q4K, QK_K, 144);

/// ggml's `get_scale_min_k4` for all 8 sub-blocks: bytes 0..8 are the
/// scales, 8..16 the minima. Shared with Q5_K.
///
/// Done on the three little-endian 32-bit words at once, as ggml's SIMD
/// dots do (`kmask1..3`): the decode dots call it once per 256 weights.
#[inline]
pub(crate) fn unpack_scales_mins(q: &[u8; 12]) -> [u8; 16] {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (u0, u1, u2) = (w(0), w(1), w(2));
    let sc_lo = u0 & KMASK1;
    let sc_hi = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let m_lo = u1 & KMASK1;
    let m_hi = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let mut out = [0u8; 16];
    for (i, v) in [sc_lo, sc_hi, m_lo, m_hi].into_iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// Inverse of [`unpack_scales_mins`] for 6-bit scales and minima.
pub(crate) fn pack_scales_mins(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..8 {
        let (ls, lm) = (sc[j], m[j]);
        if j < 4 {
            q[j] = ls;
            q[j + 4] = lm;
        } else {
            q[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            q[j - 4] |= (ls >> 4) << 6;
            q[j] |= (lm >> 4) << 6;
        }
    }
    q
}

/// The `make_qkx2_quants` pass shared by the Q4_K and Q5_K reference
/// quantizers: per 32 values (weights `rms + |x|`, squared error) levels,
/// then 6-bit scales and minima, `d`, `dmin`, and the values re-quantized
/// with the stored scales into `l_all` (levels `0..=nmax`).
pub(crate) fn quantize_super_block_qkx(
    x: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    l_all: &mut [u8; QK_K],
) -> (f16, f16, [u8; 12]) {
    let mut laux = [0u8; 32];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let sum_x2: f32 = xs.iter().map(|v| v * v).sum();
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut w = [0f32; 32];
        for (w, v) in w.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2_quants(
            nmax,
            xs,
            &w,
            &mut l_all[32 * j..32 * j + 32],
            &mut laux,
            rmin,
            0.1,
            nstep,
            false,
        );
        scales[j] = s;
        mins[j] = m;
        max_scale = max_scale.max(s);
        max_min = max_min.max(m);
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        ls[j] = clamp_i32(nearest_int(inv_scale * scales[j]), 0, 63) as u8;
        lm[j] = clamp_i32(nearest_int(inv_min * mins[j]), 0, 63) as u8;
    }
    let packed = pack_scales_mins(&ls, &lm);
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    let sm = unpack_scales_mins(&packed);
    for j in 0..8 {
        let dj = d.to_f32() * sm[j] as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * sm[8 + j] as f32;
        for ii in 0..32 {
            let l = nearest_int((x[32 * j + ii] + dm) / dj);
            l_all[32 * j + ii] = clamp_i32(l, 0, nmax) as u8;
        }
    }
    (d, dmin, packed)
}

/// `dequantize_row_q4_K`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockQ4K>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, min) = (b.d.to_f32(), b.dmin.to_f32());
        let sm = unpack_scales_mins(&b.scales);
        for (c, yc) in y.chunks_exact_mut(64).enumerate() {
            let (d1, m1) = (d * sm[2 * c] as f32, min * sm[8 + 2 * c] as f32);
            let (d2, m2) = (d * sm[2 * c + 1] as f32, min * sm[8 + 2 * c + 1] as f32);
            for l in 0..32 {
                let q = b.qs[32 * c + l];
                yc[l] = d1 * (q & 0x0f) as f32 - m1;
                yc[l + 32] = d2 * (q >> 4) as f32 - m2;
            }
        }
    }
}

/// `quantize_row_q4_K_ref`. Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ4K>(dst, src.len());
    for (x, b) in src.chunks_exact(QK_K).zip(yb.iter_mut()) {
        let mut l_all = [0u8; QK_K];
        let (d, dmin, scales) = quantize_super_block_qkx(x, 15, -1.0, 20, &mut l_all);
        let mut qs = [0u8; QK_K / 2];
        for c in 0..4 {
            for l in 0..32 {
                qs[32 * c + l] = l_all[64 * c + l] | (l_all[64 * c + 32 + l] << 4);
            }
        }
        *b = BlockQ4K {
            d,
            dmin,
            scales,
            qs,
        };
    }
}

/// Scalar `ggml_vec_dot_q4_K_q8_K`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_scalar(row::<BlockQ4K>(x, n), row::<BlockQ8K>(y, n))
}

/// The scalar GEMM run of Q4_K (see [`crate::quants::gemm`]): `out[t]`
/// = the scalar dot with column `t` of the panel. Panics when `x` is shorter
/// than the row of `n` elements or `panel` is not the panel of `n`.
pub fn gemm_scalar(n: usize, x: &[u8], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let x = row::<BlockQ4K>(x, n);
    run_scalar(out, |t| panel::column(n, panel, t), |y| dot_scalar(x, y))
}

fn dot_scalar(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        sumf += dot_block_scales_mins(bx.d, bx.dmin, &bx.scales, by, |s, l| {
            let (c, shift) = (s / 2, 4 * (s % 2));
            ((bx.qs[32 * c + l] >> shift) & 0x0f) as i32
        });
    }
    sumf
}

/// One super-block of the scalar Q4_K and Q5_K dots with Q8_K: with
/// `q(s, l)` the level of value `l` of sub-block `s`, and `sc`, `m` the
/// 6-bit scales and minima in `scales`,
/// `d·dy·Σ_s sc[s]·Σ_l q·qy − dmin·dy·Σ_s m[s]·(bsums of s)`.
#[inline]
pub(crate) fn dot_block_scales_mins(
    d: f16,
    dmin: f16,
    scales: &[u8; 12],
    by: &BlockQ8K,
    q: impl Fn(usize, usize) -> i32,
) -> f32 {
    let sm = unpack_scales_mins(scales);
    let bsums = by.bsums;
    let mut summs = 0i32;
    let mut isum = 0i32;
    for s in 0..8 {
        summs += sm[8 + s] as i32 * (bsums[2 * s] as i32 + bsums[2 * s + 1] as i32);
        let isuml: i32 = (0..32).map(|l| q(s, l) * by.qs[32 * s + l] as i32).sum();
        isum += sm[s] as i32 * isuml;
    }
    let d = d.to_f32() * by.d;
    let dmin = dmin.to_f32() * by.d;
    d * isum as f32 - dmin * summs as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `get_scale_min_k4` as ggml writes it, one sub-block at a time.
    fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
        if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            (
                (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
                (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
            )
        }
    }

    #[test]
    fn unpack_scales_mins_is_get_scale_min_k4() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let mut q = [0u8; 12];
            for b in q.iter_mut() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                *b = s as u8;
            }
            let out = unpack_scales_mins(&q);
            for j in 0..8 {
                assert_eq!((out[j], out[8 + j]), get_scale_min_k4(j, &q), "{q:?} j={j}");
            }
        }
        for b in [0u8, 0xff, 0x3f, 0xc0, 0x0f, 0xf0] {
            let q = [b; 12];
            let out = unpack_scales_mins(&q);
            for j in 0..8 {
                assert_eq!((out[j], out[8 + j]), get_scale_min_k4(j, &q));
            }
        }
    }
}
