//! ggml's vectorised `expf` (`ggml_v_expf`) and the exponent pass of its
//! softmax (`ggml_vec_soft_max_f32`): `y = exp(x - max)` in chunks of 8
//! with ggml's polynomial, each chunk summed in f32 in ggml's lane order
//! and added to an f64 total, the tail with the C library's `expf`.
//! llama.cpp's softmax rows (attention without flash attention, MoE
//! gating) are computed so; doing the same gives its bits, and is about
//! four times faster than a library `exp` per element.
//!
//! The same `expf` gives ggml's SiLU rows (`ggml_vec_silu_f32`,
//! `ggml_vec_swiglu_f32`): `x / (1 + ggml_v_expf(-x))` in chunks of 8, the
//! tail with `x / (1 + expf(-x))` (`ggml_silu_f32`).
//!
//! The AVX2 kernels and the scalar ones (each lane's operations, in order,
//! with fused multiply-adds) give the same bits.

/// `f32` from its bits (the constants are ggml's hex literals).
const fn f(bits: u32) -> f32 {
    f32::from_bits(bits)
}

/// `0x1.8p23`: adding it rounds to an integer in the low mantissa bits.
const ROUND: f32 = f(0x4b40_0000);
/// `0x1.715476p+0` (log2 e).
const LOG2E: f32 = f(0x3fb8_aa3b);
/// `0x1.62e4p-1`, `0x1.7f7d1cp-20`: ln 2 in two parts.
const LN2_HI: f32 = f(0x3f31_7200);
const LN2_LO: f32 = f(0x35bf_be8e);
/// The polynomial's coefficients, highest first.
const P: [f32; 5] = [
    f(0x3c07_2010),
    f(0x3d2b_9f17),
    f(0x3e2a_af33),
    f(0x3eff_fedb),
    f(0x3f7f_fff6),
];

/// `ggml_v_expf` of one lane.
#[inline]
pub(crate) fn v_expf(x: f32) -> f32 {
    let z = x.mul_add(LOG2E, ROUND);
    let n = z - ROUND;
    let b = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let e = z.to_bits().wrapping_shl(23);
    let k = f32::from_bits(e.wrapping_add(1f32.to_bits()));
    let u = b * b;
    let j = P[0]
        .mul_add(b, P[1])
        .mul_add(u, P[2].mul_add(b, P[3]))
        .mul_add(u, P[4] * b);
    if n.abs() <= 126.0 || n.is_nan() {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// `w[i] = exp(w[i] - max)` as ggml's softmax computes it, returning the
/// sum (f64) of the new `w`.
pub(crate) fn soft_max_exp(w: &mut [f32], max: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::quants::simd_available() {
            // SAFETY: the CPU has AVX2/FMA/F16C (checked just above).
            return unsafe { x86::soft_max_exp(w, max) };
        }
    }
    soft_max_exp_scalar(w, max)
}

/// The scalar [`soft_max_exp`]: the same per-lane operations and sums.
pub(crate) fn soft_max_exp_scalar(w: &mut [f32], max: f32) -> f64 {
    let mut sum = 0f64;
    let chunks = w.len() / 8 * 8;
    for ys in w[..chunks].chunks_exact_mut(8) {
        for b in ys.iter_mut() {
            *b = v_expf(*b - max);
        }
        // ggml's order: high half + low half, then pairs, then the last two
        let h: [f32; 4] = std::array::from_fn(|i| ys[4 + i] + ys[i]);
        let p = [h[0] + h[2], h[1] + h[3]];
        sum += (p[0] + p[1]) as f64;
    }
    for b in w[chunks..].iter_mut() {
        *b = (*b - max).exp();
        sum += *b as f64;
    }
    sum
}

/// Fixed-point scale of [`soft_max_exp_cells`]'s total: each exp (at
/// most 1) is counted in units of 2^-40.
const CELL_SCALE: f64 = (1u64 << 40) as f64;
/// `2^52`: adding it to a value below 2^51 leaves that value rounded to an
/// integer in the low mantissa bits.
const MAGIC: f64 = (1u64 << 52) as f64;
/// Rows at least this long take [`soft_max_exp`] (their fixed-point total
/// could overflow 63 bits).
const CELL_ROW_MAX: usize = 1 << 22;

/// `w[i] = exp(w[i] - max)` with ggml's vectorised `expf` for every
/// element, returning the sum (f64) of the new `w` as an integer count of
/// 2^-40 units.
///
/// The attention rows of a KV cache that holds several sequences: a row's
/// other-sequence cells are masked (`-inf`, an exp of exactly 0), and
/// where in the row a sequence's cells sit depends on what else the
/// cache holds. ggml's per-8 f32 sums ([`soft_max_exp`]) group the
/// values by their place, so the same sequence gets another total when
/// batched with others; integer sums are associative, so this total, and
/// every exp, depend only on the values. Its error against the exact sum
/// is at most `w.len()` half-units (1e-10 of a total of at least 1 for
/// 512 cells).
///
/// `max` must be finite and at least every non-NaN element (the softmax's
/// row maximum); a NaN element makes the sum NaN. Rows of
/// [`CELL_ROW_MAX`] elements or more are summed as [`soft_max_exp`] does.
pub(crate) fn soft_max_exp_cells(w: &mut [f32], max: f32) -> f64 {
    if w.len() >= CELL_ROW_MAX {
        return soft_max_exp(w, max);
    }
    #[cfg(target_arch = "x86_64")]
    {
        if crate::quants::simd_available() {
            // SAFETY: the CPU has AVX2/FMA/F16C (checked just above).
            return unsafe { x86::soft_max_exp_cells(w, max) };
        }
    }
    soft_max_exp_cells_scalar(w, max)
}

/// One exp's fixed-point count: `round(e * 2^40)`, exact in an f64.
#[inline]
fn cell_units(e: f32) -> u64 {
    (e as f64)
        .mul_add(CELL_SCALE, MAGIC)
        .to_bits()
        .wrapping_sub(MAGIC.to_bits())
}

/// The exps of `w` one lane at a time: their fixed-point count (wrapping)
/// and whether one is NaN.
fn cells_scalar(w: &mut [f32], max: f32) -> (u64, bool) {
    let (mut units, mut nan) = (0u64, false);
    for b in w.iter_mut() {
        let e = v_expf(*b - max);
        *b = e;
        nan |= e.is_nan();
        units = units.wrapping_add(cell_units(e));
    }
    (units, nan)
}

/// The total of a fixed-point count; NaN when an exp was.
fn cells_total(units: u64, nan: bool) -> f64 {
    if nan {
        f64::NAN
    } else {
        units as f64 / CELL_SCALE
    }
}

/// The scalar [`soft_max_exp_cells`]: the same exps and the same total.
pub(crate) fn soft_max_exp_cells_scalar(w: &mut [f32], max: f32) -> f64 {
    let (units, nan) = cells_scalar(w, max);
    cells_total(units, nan)
}

/// `ggml_silu_f32`: `x / (1 + e^-x)` with the library `expf`.
#[inline]
fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `ggml_v_silu` of one lane.
#[inline]
fn v_silu(x: f32) -> f32 {
    x / (1.0 + v_expf(0.0 - x))
}

/// `x[i] = silu(x[i])` as `ggml_vec_silu_f32` computes it.
pub(crate) fn silu_row(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::quants::simd_available() {
            // SAFETY: the CPU has AVX2/FMA/F16C (checked just above).
            return unsafe { x86::silu_row(x, None) };
        }
    }
    silu_row_scalar(x, None)
}

/// `x[i] = silu(x[i]) * g[i]` as `ggml_vec_swiglu_f32` computes it.
/// Panics when `g` is shorter than `x`.
pub(crate) fn swiglu_row(x: &mut [f32], g: &[f32]) {
    let g = &g[..x.len()];
    #[cfg(target_arch = "x86_64")]
    {
        if crate::quants::simd_available() {
            // SAFETY: the CPU has AVX2/FMA/F16C (checked just above); `g`
            // is as long as `x`.
            return unsafe { x86::silu_row(x, Some(g)) };
        }
    }
    silu_row_scalar(x, Some(g))
}

/// The scalar [`silu_row`] / [`swiglu_row`]: the same per-lane operations.
pub(crate) fn silu_row_scalar(x: &mut [f32], g: Option<&[f32]>) {
    let chunks = x.len() / 8 * 8;
    for (i, v) in x.iter_mut().enumerate() {
        let s = if i < chunks { v_silu(*v) } else { silu(*v) };
        *v = g.map_or(s, |g| s * g[i]);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// `ggml_v_expf` of 8 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn v_expf8(x: __m256) -> __m256 {
        let r = _mm256_set1_ps(ROUND);
        let z = _mm256_fmadd_ps(x, _mm256_set1_ps(LOG2E), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(
            n,
            _mm256_set1_ps(LN2_LO),
            _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x),
        );
        let e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
        let k = _mm256_castsi256_ps(_mm256_add_epi32(
            e,
            _mm256_castps_si256(_mm256_set1_ps(1.0)),
        ));
        let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
        let c = _mm256_castps_si256(_mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0), _CMP_GT_OQ));
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(_mm256_set1_ps(P[0]), b, _mm256_set1_ps(P[1])),
                u,
                _mm256_fmadd_ps(_mm256_set1_ps(P[2]), b, _mm256_set1_ps(P[3])),
            ),
            u,
            _mm256_mul_ps(_mm256_set1_ps(P[4]), b),
        );
        if _mm256_movemask_ps(_mm256_castsi256_ps(c)) == 0 {
            return _mm256_fmadd_ps(j, k, k);
        }
        let g = _mm256_and_si256(
            _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
            _mm256_set1_epi32(0x8200_0000u32 as i32),
        );
        let s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f00_0000)));
        let s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
        let d = _mm256_castps_si256(_mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0), _CMP_GT_OQ));
        _mm256_or_ps(
            _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
            _mm256_andnot_ps(
                _mm256_castsi256_ps(d),
                _mm256_or_ps(
                    _mm256_and_ps(
                        _mm256_castsi256_ps(c),
                        _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1),
                    ),
                    _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)),
                ),
            ),
        )
    }

    /// The AVX2 [`super::silu_row`] (`g: None`) and [`super::swiglu_row`].
    ///
    /// # Safety
    /// AVX2/FMA/F16C present; `g`, when given, at least as long as `x`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn silu_row(x: &mut [f32], g: Option<&[f32]>) {
        let n = x.len();
        let mut i = 0;
        while i + 8 <= n {
            let p = x.as_mut_ptr().add(i);
            let v = _mm256_loadu_ps(p);
            let e = v_expf8(_mm256_sub_ps(_mm256_setzero_ps(), v));
            let mut s = _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0), e));
            if let Some(g) = g {
                s = _mm256_mul_ps(s, _mm256_loadu_ps(g.as_ptr().add(i)));
            }
            _mm256_storeu_ps(p, s);
            i += 8;
        }
        while i < n {
            let s = silu(x[i]);
            x[i] = g.map_or(s, |g| s * g[i]);
            i += 1;
        }
    }

    /// The AVX2 [`super::soft_max_exp_cells`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn soft_max_exp_cells(w: &mut [f32], max: f32) -> f64 {
        let n = w.len();
        let m = _mm256_set1_ps(max);
        let (scale, magic) = (_mm256_set1_pd(CELL_SCALE), _mm256_set1_pd(MAGIC));
        let mut units = _mm256_setzero_si256();
        let mut nan = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            let p = w.as_mut_ptr().add(i);
            let v = v_expf8(_mm256_sub_ps(_mm256_loadu_ps(p), m));
            _mm256_storeu_ps(p, v);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            for half in [_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)] {
                let q = _mm256_fmadd_pd(_mm256_cvtps_pd(half), scale, magic);
                units = _mm256_add_epi64(units, _mm256_castpd_si256(q));
            }
            i += 8;
        }
        // each of the 8 lanes' counts carried MAGIC's bits once per element
        let mut lanes = [0u64; 4];
        _mm256_storeu_si256(lanes.as_mut_ptr().cast(), units);
        let vector = lanes
            .iter()
            .fold(0u64, |a, &l| a.wrapping_add(l))
            .wrapping_sub((i as u64).wrapping_mul(MAGIC.to_bits()));
        let (tail, tail_nan) = cells_scalar(&mut w[i..], max);
        cells_total(
            vector.wrapping_add(tail),
            _mm256_movemask_ps(nan) != 0 || tail_nan,
        )
    }

    /// The AVX2 `soft_max_exp` (ggml's `ggml_vec_soft_max_f32`).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn soft_max_exp(w: &mut [f32], max: f32) -> f64 {
        let n = w.len();
        let mut sum = 0f64;
        let mut i = 0;
        let m = _mm256_set1_ps(max);
        while i + 8 <= n {
            let p = w.as_mut_ptr().add(i);
            let v = v_expf8(_mm256_sub_ps(_mm256_loadu_ps(p), m));
            _mm256_storeu_ps(p, v);
            let h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_add_ss(h, _mm_movehdup_ps(h));
            sum += _mm_cvtss_f32(h) as f64;
            i += 8;
        }
        while i < n {
            let e = (w[i] - max).exp();
            w[i] = e;
            sum += e as f64;
            i += 1;
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            88.0,
            88.8,
            89.0,
            -87.0,
            -88.0,
            -100.0,
            -104.0,
            -150.0,
            -200.0,
            200.0,
            f32::NEG_INFINITY,
            -1e-30,
            1e-30,
        ];
        let mut s = 0x2545_f491u64;
        for _ in 0..4000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            v.push(((s >> 40) as f32 / (1u64 << 24) as f32 - 0.75) * 140.0);
        }
        v
    }

    #[test]
    fn v_expf_is_close_to_expf() {
        for x in inputs() {
            let (got, want) = (v_expf(x), x.exp());
            if want.is_infinite() || want == 0.0 {
                assert!(
                    got == want || (got - want).abs() <= f32::MIN_POSITIVE,
                    "{x}: {got} vs {want}"
                );
                continue;
            }
            let rel = ((got - want) / want).abs();
            assert!(
                rel <= 4.0 * f32::EPSILON || want < f32::MIN_POSITIVE,
                "{x}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn silu_rows_avx2_and_scalar_agree_bit_for_bit() {
        let x = inputs();
        let g: Vec<f32> = x.iter().map(|v| v * 0.37 - 1.5).collect();
        for len in [0, 1, 7, 8, 9, 31, 128, x.len()] {
            let (mut a, mut b) = (x[..len].to_vec(), x[..len].to_vec());
            silu_row(&mut a);
            silu_row_scalar(&mut b, None);
            let (mut c, mut d) = (x[..len].to_vec(), x[..len].to_vec());
            swiglu_row(&mut c, &g);
            silu_row_scalar(&mut d, Some(&g[..len]));
            for i in 0..len {
                assert_eq!(a[i].to_bits(), b[i].to_bits(), "silu len {len} x {}", x[i]);
                assert_eq!(
                    c[i].to_bits(),
                    d[i].to_bits(),
                    "swiglu len {len} x {}",
                    x[i]
                );
                // and close to the library formula
                let want = silu(x[i]);
                if !want.is_finite() {
                    assert_eq!(a[i].is_nan(), want.is_nan(), "{}", x[i]);
                    continue;
                }
                let tol = 4.0 * f32::EPSILON * want.abs() + f32::MIN_POSITIVE;
                assert!((a[i] - want).abs() <= tol, "{}: {} vs {want}", x[i], a[i]);
            }
            // the tail (past the last whole 8) is the library formula itself
            for i in len / 8 * 8..len {
                assert_eq!(a[i].to_bits(), silu(x[i]).to_bits());
            }
        }
    }

    #[test]
    fn cell_sums_do_not_depend_on_where_the_cells_sit() {
        let x: Vec<f32> = inputs().into_iter().filter(|v| *v < 80.0).collect();
        let vals = &x[..301];
        let max = vals.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let mut want_e = vals.to_vec();
        let want = soft_max_exp_cells_scalar(&mut want_e, max);
        // the same values spread over longer masked rows, at other offsets
        // and strides, AVX2 and scalar
        for (stride, offset) in [(1, 0), (1, 3), (2, 1), (3, 2), (8, 5), (7, 0)] {
            let mut row = vec![f32::NEG_INFINITY; offset + stride * vals.len() + 5];
            for (k, &v) in vals.iter().enumerate() {
                row[offset + stride * k] = v;
            }
            let mut scalar = row.clone();
            let got = soft_max_exp_cells(&mut row, max);
            let got_scalar = soft_max_exp_cells_scalar(&mut scalar, max);
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "stride {stride} offset {offset}"
            );
            assert_eq!(got_scalar.to_bits(), want.to_bits());
            for (k, e) in want_e.iter().enumerate() {
                assert_eq!(row[offset + stride * k].to_bits(), e.to_bits());
                assert_eq!(scalar[offset + stride * k].to_bits(), e.to_bits());
            }
            assert!(row
                .iter()
                .zip(&scalar)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        // and it is the sum, to within its rounding
        let exact: f64 = want_e.iter().map(|&e| e as f64).sum();
        assert!(
            (want - exact).abs() <= vals.len() as f64 / CELL_SCALE,
            "{want} vs {exact}"
        );
        // a NaN makes it NaN on both paths
        let mut a = vals.to_vec();
        a[17] = f32::NAN;
        let mut b = a.clone();
        assert!(soft_max_exp_cells(&mut a, max).is_nan());
        assert!(soft_max_exp_cells_scalar(&mut b, max).is_nan());
    }

    #[test]
    fn avx2_and_scalar_agree_bit_for_bit() {
        let x = inputs();
        for len in [0, 1, 7, 8, 9, 31, 128, x.len()] {
            let (mut a, mut b) = (x[..len].to_vec(), x[..len].to_vec());
            let max = x[..len].iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let sa = soft_max_exp(&mut a, max);
            let sb = soft_max_exp_scalar(&mut b, max);
            assert_eq!(sa.to_bits(), sb.to_bits(), "sum, len {len}");
            for i in 0..len {
                assert_eq!(a[i].to_bits(), b[i].to_bits(), "len {len} x {}", x[i]);
            }
        }
    }
}
