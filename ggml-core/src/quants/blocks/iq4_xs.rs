//! IQ4_XS: IQ4_NL values in 256-element super-blocks with 6-bit sub-block
//! scales (32 elements each) and an f16 super-scale.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq4_nl::{group_dot, iq4_group_scale, iq4_indices, pack_nibbles, KVALUES_IQ4NL};
use super::k_quants;
use super::k_quants::q8_k::BlockQ8K;
use super::k_quants::QK_K;
use super::rounding::{clamp_i32, nearest_int};
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::quants::gemm::{run_scalar, GEMM_COLS};
use crate::types::GgmlType;

/// ggml's `block_iq4_xs`. Sub-block `ib` (32 values, nibbles as IQ4_NL in
/// `qs[16ib..16ib+16]`) has the scale
/// `ls = (scales_l[ib/2] >> 4(ib%2)) & 15 | ((scales_h >> 2ib) & 3) << 4`,
/// valued `d·(ls - 32)·K[q]`. `scales_h` is a little-endian `u16`.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIq4Xs {
    /// Super-block scale of the sub-block scales.
    pub d: f16,
    /// High 2 bits of the eight 6-bit sub-block scales.
    pub scales_h: u16,
    /// Low 4 bits of the eight 6-bit sub-block scales.
    pub scales_l: [u8; QK_K / 64],
    /// 4-bit indices into the non-linear table, two per byte.
    pub qs: [u8; QK_K / 2],
}
impl_block!(BlockIq4Xs, GgmlType::IQ4XS, QK_K, 136);

/// The 8 signed sub-block scales (`ls - 32`).
#[inline]
fn sub_scales(b: &BlockIq4Xs) -> [i32; 8] {
    let h = u16::from_le(b.scales_h);
    let mut out = [0i32; 8];
    for (ib, o) in out.iter_mut().enumerate() {
        let ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) as i32
            | ((((h >> (2 * ib)) & 3) as i32) << 4);
        *o = ls - 32;
    }
    out
}

/// `dequantize_row_iq4_xs`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockIq4Xs>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let sc = sub_scales(b);
        for (ib, yb) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * sc[ib] as f32;
            for j in 0..16 {
                let q = b.qs[16 * ib + j];
                yb[j] = dl * KVALUES_IQ4NL[(q & 0x0f) as usize] as f32;
                yb[j + 16] = dl * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
            }
        }
    }
}

/// `quantize_row_iq4_xs_ref` (ggml's IQ4 search, `ntry = 7`, no importance
/// weights): group scales, 6-bit sub-scales relative to the largest, indices
/// re-chosen with the stored scales.
/// Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockIq4Xs>(dst, src.len());
    for (x, b) in src.chunks_exact(QK_K).zip(yb.iter_mut()) {
        let mut scales = [0f32; 8];
        let (mut max_scale, mut amax_scale) = (0f32, 0f32);
        for (ib, s) in scales.iter_mut().enumerate() {
            *s = iq4_group_scale(&x[32 * ib..32 * ib + 32], 7);
            if s.abs() > amax_scale {
                amax_scale = s.abs();
                max_scale = *s;
            }
        }
        let d = -max_scale / 32.0;
        let dh = f16::from_f32(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        let mut scales_l = [0u8; 4];
        let mut qs = [0u8; QK_K / 2];
        for ib in 0..8 {
            let l = clamp_i32(nearest_int(id * scales[ib]), -32, 31);
            let mut idx = [0u8; 32];
            iq4_indices(&x[32 * ib..32 * ib + 32], d * l as f32, &mut idx);
            qs[16 * ib..16 * ib + 16].copy_from_slice(&pack_nibbles(&idx));
            let l = (l + 32) as u8;
            scales_l[ib / 2] |= (l & 0x0f) << (4 * (ib % 2));
            scales_h |= ((l >> 4) as u16) << (2 * ib);
        }
        *b = BlockIq4Xs {
            d: dh,
            scales_h: scales_h.to_le(),
            scales_l,
            qs,
        };
    }
}

/// Scalar `ggml_vec_dot_iq4_xs_q8_K`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_scalar(row::<BlockIq4Xs>(x, n), row::<BlockQ8K>(y, n))
}

/// The scalar GEMM run of IQ4_XS (see [`crate::quants::gemm`]): `out[t]`
/// = the scalar dot with column `t` of the panel. Panics when `x` is shorter
/// than the row of `n` elements or `panel` is not the panel of `n`.
pub fn gemm_scalar(n: usize, x: &[u8], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let x = row::<BlockIq4Xs>(x, n);
    run_scalar(
        out,
        |t| k_quants::panel::column(n, panel, t),
        |y| dot_scalar(x, y),
    )
}

fn dot_scalar(x: &[BlockIq4Xs], y: &[BlockQ8K]) -> f32 {
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let sc = sub_scales(bx);
        let mut isum = 0i32;
        for (ib, &s) in sc.iter().enumerate() {
            let qs: &[u8; 16] = bx.qs[16 * ib..16 * ib + 16].try_into().unwrap();
            isum += s * group_dot(qs, &by.qs[32 * ib..32 * ib + 32]);
        }
        sumf += bx.d.to_f32() * by.d * isum as f32;
    }
    sumf
}
