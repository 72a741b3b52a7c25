//! The row primitives of ggml's CPU flash attention (`vec.h` / `vec.cpp`),
//! in the exact floating-point order of ggml's AVX2 build, so that
//! `flash_attn_ext` rounds as llama.cpp does:
//!
//! - [`ggml_dot`]: `ggml_vec_dot_f16` / `ggml_vec_dot_f32`: four 8-lane f32
//!   accumulators fed by fused multiply-adds in steps of 32 elements,
//!   reduced as `(a0 + a2) + (a1 + a3)` then across lanes by two
//!   horizontal adds, and the tail (`n % 32` elements) added one product at
//!   a time in f64.
//! - [`mad_f16`] / [`scale_f16`]: `ggml_vec_mad_f16` / `ggml_vec_scale_f16`
//!   on an F16 accumulator: each element computed in f32 (`fma(x, v, y)`,
//!   `y · v`) and rounded back to F16 (nearest even) at every step.
//! - [`mad_f32`]: `ggml_vec_mad_f32`, `y = fma(x, v, y)`.
//!
//! Values are held as f32; an "F16" accumulator holds f32 values that are
//! exactly representable in F16. Each function has a scalar definition and,
//! on x86-64 with AVX2/FMA/F16C, an intrinsics version that computes the
//! same operations in the same order (bit-identical, tested).

use half::f16;

/// Whether the AVX2/FMA/F16C versions run: the chosen CPU level
/// (`GGML_CPU_LEVEL` or the best the CPU has) is AVX2 or above.
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    crate::quants::simd_available()
}

/// Run `$avx2` when the CPU has AVX2/FMA/F16C, else `$scalar`.
macro_rules! dispatch {
    ($avx2:path, $scalar:path, ($($arg:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if has_avx2() {
                // SAFETY: `$avx2` is compiled with `avx2,fma,f16c`, which the
                // run-time check just above found on this CPU; its slices are
                // safe slices of equal lengths (checked by the caller).
                return unsafe { $avx2($($arg),*) };
            }
        }
        $scalar($($arg),*)
    }};
}

/// Elements per SIMD step of ggml's AVX2 dot (`GGML_F16_STEP`, `GGML_F32_STEP`).
const STEP: usize = 32;
/// Lanes of one accumulator (`GGML_F32_EPR`).
const EPR: usize = 8;
/// Accumulators (`GGML_F32_ARR`).
const ARR: usize = STEP / EPR;

/// Round an f32 to the nearest F16 value (ties to even), as f32.
#[inline]
pub(super) fn round_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// `Σ x[i]·y[i]` in ggml's AVX2 order (see the module doc). For F16 rows
/// (values already F16) this is `ggml_vec_dot_f16`, for F32 rows
/// `ggml_vec_dot_f32`. Panics if the slices differ in length.
pub(super) fn ggml_dot(x: &[f32], y: &[f32]) -> f32 {
    assert_eq!(x.len(), y.len(), "ggml_dot: row lengths");
    dispatch!(avx2::ggml_dot, ggml_dot_scalar, (x, y))
}

/// Scalar [`ggml_dot`] (equal lengths checked by the caller).
fn ggml_dot_scalar(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len();
    let np = n - n % STEP;
    let mut acc = [[0f32; EPR]; ARR];
    for (xs, ys) in x[..np].chunks_exact(STEP).zip(y[..np].chunks_exact(STEP)) {
        for (j, a) in acc.iter_mut().enumerate() {
            for (l, lane) in a.iter_mut().enumerate() {
                let k = j * EPR + l;
                *lane = xs[k].mul_add(ys[k], *lane);
            }
        }
    }
    // GGML_F32x8_REDUCE: halve the accumulator count twice, then lanes
    let mut r = [0f32; EPR];
    for (l, out) in r.iter_mut().enumerate() {
        let a02 = acc[0][l] + acc[2][l];
        let a13 = acc[1][l] + acc[3][l];
        *out = a02 + a13;
    }
    let t0 = [r[0] + r[4], r[1] + r[5], r[2] + r[6], r[3] + r[7]];
    let t1 = [t0[0] + t0[1], t0[2] + t0[3]];
    let mut sum = (t1[0] + t1[1]) as f64;
    for (a, b) in x[np..].iter().zip(&y[np..]) {
        sum += (a * b) as f64;
    }
    sum as f32
}

/// `y = f16(fma(x, v, y))` element-wise (`ggml_vec_mad_f16`); `y` holds
/// F16 values. Panics if the slices differ in length.
pub(super) fn mad_f16(y: &mut [f32], x: &[f32], v: f32) {
    assert_eq!(x.len(), y.len(), "mad_f16: row lengths");
    dispatch!(avx2::mad_f16, mad_f16_scalar, (y, x, v))
}

/// Scalar [`mad_f16`] (equal lengths checked by the caller).
fn mad_f16_scalar(y: &mut [f32], x: &[f32], v: f32) {
    for (a, &b) in y.iter_mut().zip(x) {
        *a = round_f16(b.mul_add(v, *a));
    }
}

/// `y = f16(y · v)` element-wise (`ggml_vec_scale_f16`).
pub(super) fn scale_f16(y: &mut [f32], v: f32) {
    dispatch!(avx2::scale_f16, scale_f16_scalar, (y, v))
}

/// Scalar [`scale_f16`].
fn scale_f16_scalar(y: &mut [f32], v: f32) {
    for a in y.iter_mut() {
        *a = round_f16(*a * v);
    }
}

/// `y = fma(x, v, y)` element-wise (`ggml_vec_mad_f32`). Panics if the
/// slices differ in length.
pub(super) fn mad_f32(y: &mut [f32], x: &[f32], v: f32) {
    assert_eq!(x.len(), y.len(), "mad_f32: row lengths");
    dispatch!(avx2::mad_f32, mad_f32_scalar, (y, x, v))
}

/// Scalar [`mad_f32`] (equal lengths checked by the caller).
fn mad_f32_scalar(y: &mut [f32], x: &[f32], v: f32) {
    for (a, &b) in y.iter_mut().zip(x) {
        *a = b.mul_add(v, *a);
    }
}

/// The AVX2/FMA/F16C versions: the same operations as the scalar ones, 8
/// lanes at a time, scalar code for the elements past the last full vector.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{round_f16, EPR, STEP};

    /// 8 lanes of `p` from element `i` (caller keeps `i + 8 <= p.len()`).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load(p: &[f32], i: usize) -> __m256 {
        debug_assert!(i + EPR <= p.len());
        _mm256_loadu_ps(p.as_ptr().add(i))
    }

    /// Store 8 lanes into `p` from element `i` (caller keeps `i + 8 <= p.len()`).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn store(p: &mut [f32], i: usize, v: __m256) {
        debug_assert!(i + EPR <= p.len());
        _mm256_storeu_ps(p.as_mut_ptr().add(i), v)
    }

    /// Round 8 lanes to F16 (nearest even) and back.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn round8(v: __m256) -> __m256 {
        _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v))
    }

    /// [`super::ggml_dot`] (equal lengths).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn ggml_dot(x: &[f32], y: &[f32]) -> f32 {
        let n = x.len().min(y.len());
        let np = n - n % STEP;
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i < np {
            for (j, a) in acc.iter_mut().enumerate() {
                let k = i + j * EPR;
                *a = _mm256_fmadd_ps(load(x, k), load(y, k), *a);
            }
            i += STEP;
        }
        let r = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
        let t0 = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps::<1>(r));
        let t1 = _mm_hadd_ps(t0, t0);
        let mut sum = _mm_cvtss_f32(_mm_hadd_ps(t1, t1)) as f64;
        for (a, b) in x[np..n].iter().zip(&y[np..n]) {
            sum += (a * b) as f64;
        }
        sum as f32
    }

    /// [`super::mad_f16`] (equal lengths).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn mad_f16(y: &mut [f32], x: &[f32], v: f32) {
        let n = x.len().min(y.len());
        let vv = _mm256_set1_ps(v);
        let mut i = 0;
        while i + EPR <= n {
            store(y, i, round8(_mm256_fmadd_ps(load(x, i), vv, load(y, i))));
            i += EPR;
        }
        for k in i..n {
            y[k] = round_f16(x[k].mul_add(v, y[k]));
        }
    }

    /// [`super::scale_f16`].
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn scale_f16(y: &mut [f32], v: f32) {
        let n = y.len();
        let vv = _mm256_set1_ps(v);
        let mut i = 0;
        while i + EPR <= n {
            store(y, i, round8(_mm256_mul_ps(load(y, i), vv)));
            i += EPR;
        }
        for a in &mut y[i..] {
            *a = round_f16(*a * v);
        }
    }

    /// [`super::mad_f32`] (equal lengths).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn mad_f32(y: &mut [f32], x: &[f32], v: f32) {
        let n = x.len().min(y.len());
        let vv = _mm256_set1_ps(v);
        let mut i = 0;
        while i + EPR <= n {
            store(y, i, _mm256_fmadd_ps(load(x, i), vv, load(y, i)));
            i += EPR;
        }
        for k in i..n {
            y[k] = x[k].mul_add(v, y[k]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_reduces_in_ggml_order() {
        // lane sums that round differently depending on the order: with
        // acc[j] lane 0 = 1e8, 1, -1e8, 1 (j = 0..3) ggml's (a0 + a2) + (a1 + a3)
        // gives 2, (a0 + a1) + (a2 + a3) would give 0.
        let mut x = vec![0f32; 32];
        let y = vec![1f32; 32];
        x[0] = 1e8;
        x[8] = 1.0;
        x[16] = -1e8;
        x[24] = 1.0;
        assert_eq!(ggml_dot(&x, &y), 2.0);
        // lanes: t0 = lo + hi, then (t0[0] + t0[1]) + (t0[2] + t0[3])
        let mut x = vec![0f32; 32];
        x[0] = 1e8;
        x[1] = -1e8;
        x[2] = 1.0;
        x[3] = 1.0;
        assert_eq!(ggml_dot(&x, &y), 2.0);
    }

    #[test]
    fn dot_tail_accumulates_in_f64() {
        // 32 SIMD elements then an 8-element tail
        let mut x = vec![0f32; 40];
        let y = vec![1f32; 40];
        x[0] = 1e8;
        x[32] = 1.0;
        x[33] = 1.0;
        x[34] = -1e8;
        // f64: 1e8 + 1 + 1 - 1e8 = 2 exactly
        assert_eq!(ggml_dot(&x, &y), 2.0);
        // exact small case against a plain sum
        let a: Vec<f32> = (0..45).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..45).map(|i| 1.0 - i as f32 * 0.25).collect();
        let want: f64 = a
            .iter()
            .zip(&b)
            .map(|(p, q)| (*p as f64) * (*q as f64))
            .sum();
        assert!((ggml_dot(&a, &b) as f64 - want).abs() < 1e-3);
    }

    #[test]
    fn f16_accumulator_rounds_every_step() {
        // 2048 + 1 is not an F16 value (spacing 2 there): rounds to even 2048
        let mut acc = vec![2048.0f32];
        mad_f16(&mut acc, &[1.0], 1.0);
        assert_eq!(acc[0], 2048.0);
        // in f32 the same steps keep the 1
        let mut acc32 = vec![2048.0f32];
        mad_f32(&mut acc32, &[1.0], 1.0);
        assert_eq!(acc32[0], 2049.0);
        let mut acc = vec![1.0f32, 3.0];
        scale_f16(&mut acc, 1.0 / 3.0);
        assert_eq!(acc, vec![round_f16(1.0 / 3.0), 1.0]);
    }

    /// Deterministic pseudo-random values in [-2, 2), some F16-rounded.
    #[cfg(target_arch = "x86_64")]
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = (x >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0;
                if i % 3 == 0 {
                    round_f16(v)
                } else {
                    v
                }
            })
            .collect()
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_matches_scalar_bit_for_bit() {
        if !has_avx2() {
            return;
        }
        for n in [0usize, 1, 7, 8, 31, 32, 40, 64, 100, 288, 513] {
            for seed in 0..4u64 {
                let x = values(n, seed);
                let y = values(n, seed + 100);
                let v = values(1, seed + 200)[0];
                // SAFETY: the CPU has AVX2, FMA and F16C (checked above).
                let d = unsafe { avx2::ggml_dot(&x, &y) };
                assert_eq!(d.to_bits(), ggml_dot_scalar(&x, &y).to_bits(), "dot n={n}");
                let acc: Vec<f32> = y.iter().map(|&a| round_f16(a)).collect();
                let (mut a, mut b) = (acc.clone(), acc.clone());
                // SAFETY: as above.
                unsafe { avx2::mad_f16(&mut a, &x, v) };
                mad_f16_scalar(&mut b, &x, v);
                assert_eq!(a, b, "mad_f16 n={n}");
                // SAFETY: as above.
                unsafe { avx2::scale_f16(&mut a, v) };
                scale_f16_scalar(&mut b, v);
                assert_eq!(a, b, "scale_f16 n={n}");
                let (mut a, mut b) = (y.clone(), y.clone());
                // SAFETY: as above.
                unsafe { avx2::mad_f32(&mut a, &x, v) };
                mad_f32_scalar(&mut b, &x, v);
                assert_eq!(a, b, "mad_f32 n={n}");
            }
        }
    }
}
