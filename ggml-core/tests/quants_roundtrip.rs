//! `from_float` then `to_float` stays within a per-type error bound, on
//! Gaussian data and on edge inputs (zeros, one huge value, tiny values,
//! extreme magnitudes).

use ggml_core::quants::cpu_traits;
use ggml_core::GgmlType;
use GgmlType as T;

/// Relative RMSE bound (RMSE of the round trip / RMS of the data) on
/// Gaussian data, measured with margin (measured values in comments; the
/// bounds are ~1.3× the measurement so that a broken quantizer — a wrong
/// rounding, a lost bit plane, a bad scale — fails).
const BOUNDS: &[(GgmlType, f64)] = &[
    (T::F32, 0.0),
    (T::F16, 2.6e-4),  // 0.00020
    (T::BF16, 2.2e-3), // 0.00168
    (T::Q8_0, 0.0069), // 0.00527
    (T::Q8_1, 0.0069), // 0.00527
    (T::Q8K, 0.0090),  // 0.00695
    (T::Q6K, 0.023),   // 0.01757
    (T::Q5_0, 0.055),  // 0.04210
    (T::Q5_1, 0.048),  // 0.03686
    (T::Q5K, 0.046),   // 0.03529
    (T::Q4_0, 0.109),  // 0.08359
    (T::Q4_1, 0.100),  // 0.07647
    (T::Q4K, 0.091),   // 0.06991
    (T::IQ4NL, 0.097), // 0.07488
    (T::IQ4XS, 0.098), // 0.07544
    (T::MXFP4, 0.148), // 0.11360
    (T::Q3K, 0.194),   // 0.14933
    (T::Q2K, 0.374),   // 0.28783
];

struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn gauss(&mut self) -> f32 {
        let (u, v) = (self.uniform().max(1e-300), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let tr = cpu_traits(ty).unwrap();
    let mut q = vec![0u8; ty.row_size(x.len() as u64).unwrap()];
    (tr.from_float)(x, &mut q);
    let mut y = vec![0f32; x.len()];
    (tr.to_float)(&q, &mut y);
    y
}

fn rel_rmse(x: &[f32], y: &[f32]) -> f64 {
    let err: f64 = x
        .iter()
        .zip(y)
        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
        .sum();
    let rms: f64 = x.iter().map(|&a| (a as f64).powi(2)).sum();
    (err / rms).sqrt()
}

const N: usize = 16 * 256;

#[test]
fn quants_gaussian_round_trip_within_bounds() {
    let mut rng = Rng(42);
    let x: Vec<f32> = (0..N).map(|_| rng.gauss()).collect();
    let mut failures = Vec::new();
    for &(ty, bound) in BOUNDS {
        let e = rel_rmse(&x, &round_trip(ty, &x));
        println!("{ty:8} rel rmse {e:.5} (bound {bound})");
        if e > bound {
            failures.push(format!("{ty}: {e} > {bound}"));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn quants_all_zeros_round_trip_to_zeros() {
    let x = vec![0f32; N];
    for &(ty, _) in BOUNDS {
        let y = round_trip(ty, &x);
        assert!(y.iter().all(|&v| v == 0.0), "{ty}");
    }
}

#[test]
fn quants_one_huge_value_is_kept() {
    // one value 1e4 (inside f16 range) in Gaussian data: the huge value is
    // reconstructed within the type's resolution, everything stays finite,
    // and the other blocks are unaffected.
    let mut rng = Rng(7);
    let mut x: Vec<f32> = (0..N).map(|_| rng.gauss()).collect();
    x[300] = 1e4;
    for &(ty, bound) in BOUNDS {
        let y = round_trip(ty, &x);
        assert!(y.iter().all(|v| v.is_finite()), "{ty}");
        let rel = ((y[300] - x[300]) / x[300]).abs();
        assert!(rel < 0.2, "{ty}: huge value {} -> {}", x[300], y[300]);
        // blocks of 256 not containing index 300
        let e = rel_rmse(&x[512..], &y[512..]);
        assert!(e <= bound, "{ty}: other blocks {e} > {bound}");
    }
}

#[test]
fn quants_small_values_keep_relative_accuracy() {
    // values ~1e-3: scales far below 1 but normal in f16
    let mut rng = Rng(9);
    let x: Vec<f32> = (0..N).map(|_| 1e-3 * rng.gauss()).collect();
    for &(ty, bound) in BOUNDS {
        let e = rel_rmse(&x, &round_trip(ty, &x));
        assert!(e <= 1.5 * bound, "{ty}: {e} > 1.5 × {bound}");
    }
}

#[test]
fn quants_tiny_values_give_finite_bounded_output() {
    // far below the f16 scale range: the f16-scaled types flush to zero
    // (as ggml), the others keep some resolution; nothing may be NaN/inf or
    // exceed the input's magnitude by more than rounding.
    let mut rng = Rng(11);
    let cases: Vec<Vec<f32>> = vec![
        (0..N).map(|_| 1e-30 * rng.gauss()).collect(),
        (0..N).map(|i| if i == 5 { 1e-40 } else { 0.0 }).collect(),
        (0..N).map(|_| 1e-9 * rng.gauss()).collect(),
    ];
    for x in &cases {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        for &(ty, _) in BOUNDS {
            let y = round_trip(ty, x);
            assert!(
                y.iter().all(|v| v.is_finite() && v.abs() <= 2.0 * amax),
                "{ty}"
            );
        }
    }
}

#[test]
fn quants_extreme_inputs_do_not_panic() {
    // Beyond the range of a type's f16 scale the result is what ggml gives
    // (an infinite scale, so inf/NaN values); the quantizers must not panic.
    let mut rng = Rng(13);
    let cases: Vec<Vec<f32>> = vec![
        (0..N).map(|_| 1e30 * rng.gauss()).collect(),
        (0..N)
            .map(|i| if i % 97 == 0 { f32::MAX } else { -f32::MAX })
            .collect(),
        (0..N)
            .map(|i| if i % 3 == 0 { 3e38 } else { 1e-38 })
            .collect(),
        (0..N).map(|i| if i == 17 { 1e20 } else { 1e-20 }).collect(),
    ];
    for x in &cases {
        for &(ty, _) in BOUNDS {
            let _ = round_trip(ty, x);
        }
    }
    // the f32-scaled Q8_K and the exponent-scaled MXFP4 stay finite (away
    // from f32::MAX, where d·127 may round up to inf)
    for &ty in &[T::Q8K, T::MXFP4] {
        for x in [&cases[0], &cases[3]] {
            assert!(round_trip(ty, x).iter().all(|v| v.is_finite()), "{ty}");
        }
    }
}
