//! Register-blocked tiles of the dots against Q8_0 activations of the form
//! `Σ_b dx_b·dy_b·Σ qx·qy` with two alternating accumulators (here Q8_0):
//! `R` weight rows × `C` activation rows, `out[r][c]` bit for bit the
//! single dot.
//!
//! Such a dot does little integer work per block (one `maddubs` and one
//! `madd` per 32 values), so its per-block scale work weighs: one row against
//! one column converts `dy` from f16, multiplies and broadcasts `dx·dy` per
//! block. A tile converts the `C` columns' `dy` with one instruction, forms
//! the `R × C` products with one vector multiply per row (the same IEEE
//! products), broadcasts them from memory (a load, not an ALU operation),
//! and loads each column's quants once for the `R` rows.

use std::arch::x86_64::*;

use super::{f16_to_f32, hsum_ps, load128, load256};
use crate::quants::blocks::q8_0::BlockQ8_0;

/// Columns a tile takes at most (one 4-lane f16 conversion).
const MAX_C: usize = 4;

/// The tile: `unpack(bx)` gives a block's `dx` and its 32 signed values
/// (never -128 against -128: Q8_0 activations hold none), as the single
/// dots make them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_with<B, const R: usize, const C: usize>(
    xs: [&[B]; R],
    ys: [&[BlockQ8_0]; C],
    out: &mut [[f32; C]; R],
    unpack: impl Fn(&B) -> (f32, __m256i),
) {
    const { assert!(C <= MAX_C) };
    let nb = xs.first().map_or(0, |x| x.len());
    for x in &xs {
        assert_eq!(x.len(), nb, "q8_0_tiles: rows of different lengths");
    }
    for y in &ys {
        assert_eq!(
            y.len(),
            nb,
            "q8_0_tiles: a column's length differs from the rows'"
        );
    }
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[[_mm256_setzero_ps(); 2]; C]; R];
    for k in 0..nb {
        // the columns' dy, converted at once
        let mut h = [0u16; 8];
        for c in 0..C {
            h[c] = ys[c].get_unchecked(k).d.to_bits();
        }
        let dyv = _mm_cvtph_ps(load128(h.as_ptr()));
        let mut yq = [_mm256_setzero_si256(); C];
        for c in 0..C {
            yq[c] = load256(ys[c].get_unchecked(k).qs.as_ptr());
        }
        for r in 0..R {
            let (dx, xq) = unpack(xs[r].get_unchecked(k));
            let mut d = [0f32; MAX_C];
            _mm_storeu_ps(d.as_mut_ptr(), _mm_mul_ps(_mm_set1_ps(dx), dyv));
            let ax = _mm256_sign_epi8(xq, xq);
            for c in 0..C {
                // as `mul_sum_i8`
                let sy = _mm256_sign_epi8(yq[c], xq);
                let p16 = _mm256_maddubs_epi16(ax, sy);
                let q = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                acc[r][c][k & 1] = _mm256_fmadd_ps(_mm256_broadcast_ss(&d[c]), q, acc[r][c][k & 1]);
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            out[r][c] = hsum_ps(_mm256_add_ps(acc[r][c][0], acc[r][c][1]));
        }
    }
}

/// `R` Q8_0 rows × `C` Q8_0 columns: `out[r][c] = dot_q8_0_q8_0(xs[r],
/// ys[c])`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q8_0_q8_0_tile<const R: usize, const C: usize>(
    xs: [&[BlockQ8_0]; R],
    ys: [&[BlockQ8_0]; C],
    out: &mut [[f32; C]; R],
) {
    tile_with(xs, ys, out, |bx: &BlockQ8_0| {
        (f16_to_f32(bx.d), load256(bx.qs.as_ptr()))
    })
}
