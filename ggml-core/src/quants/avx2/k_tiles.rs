//! Register-blocked tiles of the K-quant dots for prompt processing: `R`
//! weight rows × `C` Q8_K activation rows at once, `out[r][c]` equal bit for
//! bit to the single dot of row `r` with column `c`.
//!
//! Within a tile the weight side of a block (unpacked quants, scales,
//! minima) is made once for the `C` columns and the activation side (the
//! loaded quants, the pairwise bsums, `d`) once for the `R` rows; the
//! per-output integer sums stay in registers across each block. Every
//! output keeps the single dot's f32 accumulators and updates them once per
//! block in block order (the integer sums in between are exact whatever
//! their order), so the results are the single dot's bits.

use std::arch::x86_64::*;
use std::ptr::addr_of;

use half::f16;

use super::{f16_to_f32, hsum_ps, load128, load256};
use crate::quants::k_quants::q4_k::{unpack_scales_mins, BlockQ4K};
use crate::quants::k_quants::q5_k::BlockQ5K;
use crate::quants::k_quants::q6_k::BlockQ6K;
use crate::quants::k_quants::q8_k::BlockQ8K;

/// Check that every row and column has the same number of blocks.
#[inline]
fn check_lens<X, const R: usize, const C: usize>(xs: &[&[X]; R], ys: &[&[BlockQ8K]; C]) -> usize {
    let nb = xs.first().map_or(0, |x| x.len());
    for x in xs {
        assert_eq!(x.len(), nb, "k_tiles: rows of different lengths");
    }
    for y in ys {
        assert_eq!(
            y.len(),
            nb,
            "k_tiles: a column's length differs from the rows'"
        );
    }
    nb
}

/// The Q4_K / Q5_K tile: `head(bx)` gives a block's `d`, `dmin` and packed
/// scales, `quants(bx, j, h)` its 32 unsigned values of sub-block `2j + h`
/// (as the single dots build them).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_q4_q5<B, const R: usize, const C: usize>(
    xs: [&[B]; R],
    ys: [&[BlockQ8K]; C],
    out: &mut [[f32; C]; R],
    head: impl Fn(&B) -> (f16, f16, &[u8; 12]),
    quants: impl Fn(&B, usize, usize) -> __m256i,
) {
    const { assert!(C <= 4) };
    let nb = check_lens(&xs, &ys);
    let n_sub = std::hint::black_box(8usize);
    // the shuffle that broadcasts 16-bit lane `s` of each 128-bit half
    let lane: [__m256i; 8] =
        std::array::from_fn(|s| _mm256_set1_epi16((((2 * s + 1) << 8) | (2 * s)) as i16));
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    let mut acc_m = [[_mm_setzero_ps(); C]; R];
    for b in 0..nb {
        // activation side, shared by the rows
        let mut dy = [0f32; C];
        let mut pairs = [_mm_setzero_si128(); C];
        for c in 0..C {
            let by = ys[c].get_unchecked(b);
            dy[c] = by.d;
            let bsums = load256(addr_of!(by.bsums));
            pairs[c] = _mm_hadd_epi16(
                _mm256_castsi256_si128(bsums),
                _mm256_extracti128_si256(bsums, 1),
            );
        }
        // weight side, shared by the columns; the minima term per output.
        // The products `dy·dx` and `-dy·dmin` of a row are one vector
        // multiply for the columns (the same IEEE products as one by one).
        let mut dy4 = [0f32; 4];
        dy4[..C].copy_from_slice(&dy);
        let dyv = _mm_loadu_ps(dy4.as_ptr());
        let ndyv = _mm_xor_ps(dyv, _mm_set1_ps(-0.0));
        let mut scales = [_mm256_setzero_si256(); R];
        let mut d = [[0f32; 4]; R];
        let mut ndm = [[0f32; 4]; R];
        for r in 0..R {
            let (hd, hdmin, packed) = head(xs[r].get_unchecked(b));
            let (dx, dmin_x) = (f16_to_f32(hd), f16_to_f32(hdmin));
            _mm_storeu_ps(d[r].as_mut_ptr(), _mm_mul_ps(dyv, _mm_set1_ps(dx)));
            _mm_storeu_ps(ndm[r].as_mut_ptr(), _mm_mul_ps(ndyv, _mm_set1_ps(dmin_x)));
            let sm = unpack_scales_mins(packed);
            let sm16 = _mm256_cvtepu8_epi16(load128(sm.as_ptr()));
            let mins16 = _mm256_extracti128_si256(sm16, 1);
            let sc128 = _mm256_castsi256_si128(sm16);
            scales[r] = _mm256_set_m128i(sc128, sc128);
            for c in 0..C {
                let prod = _mm_madd_epi16(mins16, pairs[c]);
                acc_m[r][c] = _mm_fmadd_ps(
                    _mm_broadcast_ss(&ndm[r][c]),
                    _mm_cvtepi32_ps(prod),
                    acc_m[r][c],
                );
            }
        }
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        // a loop the compiler keeps rolled (its bound is opaque): unrolled,
        // the 8 sub-blocks' loads are hoisted and the sums spill
        for s in 0..n_sub {
            let (j, h) = (s / 2, s % 2);
            let mut q = [_mm256_setzero_si256(); R];
            let mut sc = [_mm256_setzero_si256(); R];
            for r in 0..R {
                q[r] = quants(xs[r].get_unchecked(b), j, h);
                sc[r] = _mm256_shuffle_epi8(scales[r], *lane.get_unchecked(s));
            }
            for c in 0..C {
                let y = load256(ys[c].get_unchecked(b).qs.as_ptr().add(32 * s));
                for r in 0..R {
                    let p = _mm256_madd_epi16(sc[r], _mm256_maddubs_epi16(q[r], y));
                    sumi[r][c] = _mm256_add_epi32(sumi[r][c], p);
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                acc[r][c] = _mm256_fmadd_ps(
                    _mm256_broadcast_ss(&d[r][c]),
                    _mm256_cvtepi32_ps(sumi[r][c]),
                    acc[r][c],
                );
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            let m = acc_m[r][c];
            let m = _mm_add_ps(m, _mm_movehl_ps(m, m));
            let m = _mm_add_ss(m, _mm_movehdup_ps(m));
            out[r][c] = hsum_ps(acc[r][c]) + _mm_cvtss_f32(m);
        }
    }
}

/// `R` Q4_K rows × `C` Q8_K columns: `out[r][c] = dot_q4_k_q8_k(xs[r],
/// ys[c])`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q4_k_q8_k_tile<const R: usize, const C: usize>(
    xs: [&[BlockQ4K]; R],
    ys: [&[BlockQ8K]; C],
    out: &mut [[f32; C]; R],
) {
    let m4 = _mm256_set1_epi8(0x0f);
    tile_q4_q5(
        xs,
        ys,
        out,
        |bx: &BlockQ4K| (bx.d, bx.dmin, &bx.scales),
        |bx: &BlockQ4K, j, h| {
            let bits = load256(bx.qs.as_ptr().add(32 * j));
            let bits = _mm256_srl_epi16(bits, _mm_cvtsi32_si128(4 * h as i32));
            _mm256_and_si256(bits, m4)
        },
    )
}

/// `R` Q5_K rows × `C` Q8_K columns: `out[r][c] = dot_q5_k_q8_k(xs[r],
/// ys[c])`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q5_k_q8_k_tile<const R: usize, const C: usize>(
    xs: [&[BlockQ5K]; R],
    ys: [&[BlockQ8K]; C],
    out: &mut [[f32; C]; R],
) {
    let m4 = _mm256_set1_epi8(0x0f);
    let sixteen = _mm256_set1_epi8(16);
    tile_q4_q5(
        xs,
        ys,
        out,
        |bx: &BlockQ5K| (bx.d, bx.dmin, &bx.scales),
        |bx: &BlockQ5K, j, h| {
            let bits = load256(bx.qs.as_ptr().add(32 * j));
            let bits = _mm256_srl_epi16(bits, _mm_cvtsi32_si128(4 * h as i32));
            // the fifth bit of sub-block 2j + h: 16 where set
            let m = _mm256_set1_epi8((1u8 << (2 * j + h)) as i8);
            let hbits = load256(bx.qh.as_ptr());
            let high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, m), m), sixteen);
            _mm256_or_si256(_mm256_and_si256(bits, m4), high)
        },
    )
}

/// `R` Q6_K rows × `C` Q8_K columns: `out[r][c] = dot_q6_k_q8_k(xs[r],
/// ys[c])`, bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_q6_k_q8_k_tile<const R: usize, const C: usize>(
    xs: [&[BlockQ6K]; R],
    ys: [&[BlockQ8K]; C],
    out: &mut [[f32; C]; R],
) {
    let nb = check_lens(&xs, &ys);
    let m4 = _mm256_set1_epi8(0x0f);
    let m2s = [0x03u8, 0x0c, 0x30, 0xc0].map(|m| _mm256_set1_epi8(m as i8));
    let lanes = 0x0101_0101_0101_0101u64;
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    for b in 0..nb {
        let mut sc = [_mm_setzero_si128(); R];
        let mut sumi = [[_mm256_setzero_si256(); C]; R];
        for r in 0..R {
            let bx = xs[r].get_unchecked(b);
            sc[r] = load128(bx.scales.as_ptr());
            let sc16 = _mm256_cvtepi8_epi16(sc[r]);
            for c in 0..C {
                let by = ys[c].get_unchecked(b);
                let offset = _mm256_madd_epi16(sc16, load256(addr_of!(by.bsums)));
                sumi[r][c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
            }
        }
        for h in 0..2 {
            for (k, &m2) in m2s.iter().enumerate() {
                let is = (8 * h + 2 * k) as u64;
                let mask = _mm_set_epi64x(((is + 1) * lanes) as i64, (is * lanes) as i64);
                let mut q = [_mm256_setzero_si256(); R];
                let mut s16 = [_mm256_setzero_si256(); R];
                for r in 0..R {
                    let bx = xs[r].get_unchecked(b);
                    // as `dot_q6_k_q8_k`: low 4 bits from ql, high 2 from qh
                    let ql = load256(bx.ql.as_ptr().add(64 * h + 32 * (k & 1)));
                    let ql = if k < 2 { ql } else { _mm256_srli_epi16(ql, 4) };
                    let qh = _mm256_and_si256(load256(bx.qh.as_ptr().add(32 * h)), m2);
                    let qh = match k {
                        0 => _mm256_slli_epi16(qh, 4),
                        1 => _mm256_slli_epi16(qh, 2),
                        2 => qh,
                        _ => _mm256_srli_epi16(qh, 2),
                    };
                    q[r] = _mm256_or_si256(_mm256_and_si256(ql, m4), qh);
                    s16[r] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc[r], mask));
                }
                for c in 0..C {
                    let y = load256(ys[c].get_unchecked(b).qs.as_ptr().add(128 * h + 32 * k));
                    for r in 0..R {
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[r], y), s16[r]);
                        sumi[r][c] = _mm256_add_epi32(sumi[r][c], p);
                    }
                }
            }
        }
        for r in 0..R {
            let dx = f16_to_f32(xs[r].get_unchecked(b).d);
            for c in 0..C {
                let d = dx * ys[c].get_unchecked(b).d;
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[r][c]), acc[r][c]);
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            out[r][c] = hsum_ps(acc[r][c]);
        }
    }
}
