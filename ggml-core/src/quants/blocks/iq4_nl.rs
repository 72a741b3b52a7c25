//! IQ4_NL: 32 4-bit indices into a fixed non-linear 16-value table, f16 scale.
//! Also the shared IQ4 scale search used by IQ4_XS.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::amax::abs_max;
use super::q8_0::BlockQ8_0;
use super::q8_0_panel;
use crate::quants::block::{impl_block, row, row_exact, row_exact_mut};
use crate::quants::gemm::{run_scalar, GEMM_COLS};
use crate::types::GgmlType;

/// Elements per IQ4_NL block.
pub const QK4_NL: usize = 32;

/// ggml's `kvalues_iq4nl`.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// ggml's `block_iq4_nl`: value `j` is `d·K[qs[j] & 15]`, value `j + 16` is
/// `d·K[qs[j] >> 4]` with `K` = [`KVALUES_IQ4NL`].
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIq4Nl {
    /// Block scale (delta): weight = `d * q`.
    pub d: f16,
    /// 4-bit indices into the non-linear table, two per byte.
    pub qs: [u8; QK4_NL / 2],
}
impl_block!(BlockIq4Nl, GgmlType::IQ4NL, QK4_NL, 18);

/// ggml's `best_index_int8`: index of the table value nearest `x` (ties to
/// the lower index).
pub(crate) fn best_index(values: &[i8; 16], x: f32) -> u8 {
    if x <= values[0] as f32 {
        return 0;
    }
    if x >= values[15] as f32 {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < values[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (values[mu - 1] as f32) < values[mu] as f32 - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// The scale search of ggml's `quantize_row_iq4_nl_impl` (no importance
/// weights, so weights `x²`) for one 32-value group: returns the scale;
/// 0 for a group below `GROUP_MAX_EPS`. Weights are `(x/amax)²` instead of
/// `x²` — the same minimizer, but no overflow for huge inputs.
pub(crate) fn iq4_group_scale(xb: &[f32], ntry: i32) -> f32 {
    let values = &KVALUES_IQ4NL;
    let (amax, max) = abs_max(xb);
    if amax < 1e-15 {
        return 0.0;
    }
    let mut w = [0f32; QK4_NL];
    for (w, &v) in w.iter_mut().zip(xb) {
        *w = (v / amax) * (v / amax);
    }
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (&v, &w) in xb.iter().zip(&w) {
            let q = values[best_index(values, id * v) as usize] as f32;
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let d0 = if ntry > 0 {
        -max / values[0] as f32
    } else {
        max / values[0] as f32
    };
    let (sumqx, sumq2) = sums(1.0 / d0);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { d0 };
    let mut best = d * sumqx;
    for itry in -ntry..=ntry {
        let id = (itry as f32 + values[0] as f32) / max;
        let (sumqx, sumq2) = sums(id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Indices of `xb` for scale `d` (all 8, value 1·d ≈ 0, when `d == 0`).
pub(crate) fn iq4_indices(xb: &[f32], d: f32, out: &mut [u8]) {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (o, &v) in out.iter_mut().zip(xb) {
        *o = best_index(&KVALUES_IQ4NL, id * v);
    }
}

/// Packs 32 indices as IQ4 nibbles (low nibble `j`, high `j + 16`).
pub(crate) fn pack_nibbles(l: &[u8]) -> [u8; 16] {
    let mut q = [0u8; 16];
    for (j, o) in q.iter_mut().enumerate() {
        *o = l[j] | (l[j + 16] << 4);
    }
    q
}

/// `dequantize_row_iq4_nl`. Panics unless `src` is exactly the row of `dst.len()` elements.
pub fn to_float(src: &[u8], dst: &mut [f32]) {
    let xb = row_exact::<BlockIq4Nl>(src, dst.len());
    for (b, y) in xb.iter().zip(dst.chunks_exact_mut(QK4_NL)) {
        let d = b.d.to_f32();
        for j in 0..16 {
            y[j] = d * KVALUES_IQ4NL[(b.qs[j] & 0x0f) as usize] as f32;
            y[j + 16] = d * KVALUES_IQ4NL[(b.qs[j] >> 4) as usize] as f32;
        }
    }
}

/// `quantize_row_iq4_nl_ref` (ggml's search with `ntry = 7`, no importance
/// weights). Panics unless `dst` is exactly the row of `src.len()` elements.
pub fn from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockIq4Nl>(dst, src.len());
    for (x, b) in src.chunks_exact(QK4_NL).zip(yb.iter_mut()) {
        let d = iq4_group_scale(x, 7);
        let dh = f16::from_f32(d);
        let mut l = [0u8; 32];
        iq4_indices(x, d, &mut l);
        *b = BlockIq4Nl {
            d: dh,
            qs: pack_nibbles(&l),
        };
    }
}

/// Σ over one 32-value group of `K[q]·q8` (nibble layout as the block's).
#[inline]
pub(crate) fn group_dot(qs: &[u8; 16], q8: &[i8]) -> i32 {
    let mut sumi = 0i32;
    for j in 0..16 {
        sumi += KVALUES_IQ4NL[(qs[j] & 0x0f) as usize] as i32 * q8[j] as i32;
        sumi += KVALUES_IQ4NL[(qs[j] >> 4) as usize] as i32 * q8[j + 16] as i32;
    }
    sumi
}

/// Scalar `ggml_vec_dot_iq4_nl_q8_0`. Panics when a row is shorter than `n` elements.
pub fn vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_scalar(row::<BlockIq4Nl>(x, n), row::<BlockQ8_0>(y, n))
}

/// The scalar GEMM run of IQ4_NL (see [`crate::quants::gemm`]): `out[t]`
/// = the scalar dot with column `t` of the panel. Panics when `x` is shorter
/// than the row of `n` elements or `panel` is not the panel of `n`.
pub fn gemm_scalar(n: usize, x: &[u8], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let x = row::<BlockIq4Nl>(x, n);
    run_scalar(
        out,
        |t| q8_0_panel::column(n, panel, t),
        |y| dot_scalar(x, y),
    )
}

fn dot_scalar(x: &[BlockIq4Nl], y: &[BlockQ8_0]) -> f32 {
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        sumf += bx.d.to_f32() * by.d.to_f32() * group_dot(&bx.qs, &by.qs) as f32;
    }
    sumf
}
