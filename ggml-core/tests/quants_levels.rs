//! The kernel tables of every SIMD level this CPU has, against each other
//! and the scalar reference (each kernel against scalar, as tract's
//! kernel tests): for every type, random weight rows (random bytes with
//! sane and extreme scale fields) and activations of random magnitudes,
//! - `vec_dot` within a tight tolerance of `vec_dot_scalar`;
//! - from AVX-512 up, `vec_dot`, `vec_dot_cols`, `vec_dot_tile` and the
//!   `gemm` run bit for bit the level below's (AVX2's, which keeps ggml's
//!   AVX2 order);
//! - at every level, `vec_dot_cols`, `vec_dot_tile` and `gemm` bit for bit
//!   that level's `vec_dot` per output.

use ggml_core::quants::{cpu_table, supported_levels, CpuLevel, CpuTable, CpuTypeTraits};
use ggml_core::GgmlType;
use half::f16;
use proptest::prelude::*;
use GgmlType as T;

/// The types with CPU kernels, and the byte offsets (in a block) of their
/// f16 scale fields (0xff: an E8M0 exponent byte at offset 0; Q8_K's f32
/// scale is left random-but-finite below).
fn types() -> Vec<(GgmlType, &'static [usize])> {
    vec![
        (T::F32, &[]),
        (T::F16, &[]),
        (T::BF16, &[]),
        (T::Q4_0, &[0]),
        (T::Q4_1, &[0, 2]),
        (T::Q5_0, &[0]),
        (T::Q5_1, &[0, 2]),
        (T::Q8_0, &[0]),
        (T::Q8_1, &[0, 2]),
        (T::Q2K, &[80, 82]),
        (T::Q3K, &[108]),
        (T::Q4K, &[0, 2]),
        (T::Q5K, &[0, 2]),
        (T::Q6K, &[208]),
        (T::Q8K, &[]),
        (T::IQ4NL, &[0]),
        (T::IQ4XS, &[0]),
        (T::MXFP4, &[0xff]),
    ]
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn signed(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn levels() -> Vec<&'static CpuTable> {
    supported_levels()
        .into_iter()
        .map(|l| cpu_table(l).expect("a level the CPU has"))
        .collect()
}

/// A weight row of `n` elements of `ty`: floats through the scalar
/// `from_float`, blocks as random bytes with their scale fields set to
/// ordinary or extreme (but finite) values.
fn weight_row(ty: GgmlType, scales: &[usize], n: usize, rng: &mut Rng) -> Vec<u8> {
    let scalar = cpu_table(CpuLevel::Scalar).unwrap().traits(ty).unwrap();
    if !ty.is_quantized() {
        let mag = [1e-3f32, 1.0, 100.0][(rng.next() % 3) as usize];
        let x: Vec<f32> = (0..n).map(|_| rng.signed() * mag).collect();
        let mut row = vec![0u8; ty.row_size(n as u64).unwrap()];
        (scalar.from_float)(&x, &mut row);
        return row;
    }
    let mut row: Vec<u8> = (0..ty.row_size(n as u64).unwrap())
        .map(|_| rng.next() as u8)
        .collect();
    for block in row.chunks_exact_mut(ty.type_size()) {
        for &o in scales {
            if o == 0xff {
                block[0] = 100 + (rng.next() % 55) as u8;
                continue;
            }
            let v = match rng.next() % 8 {
                0 => 6e-8,
                1 => 1e-5,
                2 => 6e4,
                3 => -6e4,
                4 => 0.0,
                _ => rng.signed() * 0.1,
            };
            block[o..o + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
        }
        if ty == T::Q8K {
            let v = [1e-8f32, 1e-3, 6e4][(rng.next() % 3) as usize] * rng.signed();
            block[..4].copy_from_slice(&v.to_le_bytes());
        }
    }
    row
}

/// An activation row of `vt` (the scalar quantizer: every level's equals it).
fn act_row(vt: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let mag = [1e-3f32, 1.0, 30.0][(rng.next() % 3) as usize];
    let a: Vec<f32> = (0..n).map(|_| rng.signed() * mag).collect();
    let mut y = vec![0u8; vt.row_size(n as u64).unwrap()];
    let tr = cpu_table(CpuLevel::Scalar).unwrap().traits(vt).unwrap();
    (tr.from_float)(&a, &mut y);
    y
}

/// What one level gives for a case: the single dots, and per prompt
/// kernel its outputs.
#[derive(PartialEq, Debug)]
struct Outputs {
    dots: Vec<u32>,
    cols: Option<Vec<u32>>,
    tile: Option<Vec<u32>>,
    gemm: Option<Vec<u32>>,
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every kernel of `tr` on weight rows `xs` and activations `ys`; the
/// prompt kernels checked against the level's own `vec_dot` here.
fn run(
    tr: &CpuTypeTraits,
    n: usize,
    xs: &[Vec<u8>],
    ys: &[Vec<u8>],
) -> Result<Outputs, TestCaseError> {
    let yr: Vec<&[u8]> = ys.iter().map(|y| y.as_slice()).collect();
    let xr: Vec<&[u8]> = xs.iter().map(|x| x.as_slice()).collect();
    let mut dots = Vec::new();
    for x in xs {
        for y in ys {
            dots.push((tr.vec_dot)(n, x, y));
        }
    }
    let ty = tr.ty;
    let nc = ys.len();
    let cols = match tr.vec_dot_cols {
        Some(f) if nc <= ggml_core::quants::VEC_DOT_COLS_MAX => {
            let mut out = vec![f32::NAN; nc];
            f(n, &xs[0], &yr, &mut out);
            prop_assert_eq!(bits(&out), bits(&dots[..nc]), "{}: cols vs vec_dot", ty);
            Some(bits(&out))
        }
        _ => None,
    };
    let tile = match tr.vec_dot_tile {
        Some(f) if xs.len() <= ggml_core::quants::VEC_DOT_TILE_ROWS => {
            let mut out = vec![f32::NAN; xs.len() * nc];
            f(n, &xr, &yr, &mut out);
            prop_assert_eq!(bits(&out), bits(&dots), "{}: tile vs vec_dot", ty);
            Some(bits(&out))
        }
        _ => None,
    };
    let gemm = match tr.gemm {
        Some(g) if nc <= ggml_core::quants::GEMM_COLS => {
            let mut panel = vec![0xa5u8; (g.panel_bytes)(n)];
            (g.pack)(n, &yr, &mut panel);
            let mut out = [f32::NAN; ggml_core::quants::GEMM_COLS];
            (g.run)(n, &xs[0], &panel, &mut out);
            prop_assert_eq!(
                bits(&out[..nc]),
                bits(&dots[..nc]),
                "{}: gemm vs vec_dot",
                ty
            );
            prop_assert!(out[nc..].iter().all(|&v| v == 0.0), "{}: zero columns", ty);
            Some(bits(&out[..nc]))
        }
        _ => None,
    };
    Ok(Outputs {
        dots: bits(&dots),
        cols,
        tile,
        gemm,
    })
}

fn check(
    ti: usize,
    nb: usize,
    n_rows: usize,
    n_cols: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let (ty, scales) = types()[ti];
    let mut rng = Rng(seed);
    let scalar = cpu_table(CpuLevel::Scalar).unwrap().traits(ty).unwrap();
    let vt = scalar.vec_dot_type;
    let blck = ty.blck_size().max(vt.blck_size()).max(32);
    let n = nb * blck
        + if ty.is_quantized() {
            0
        } else {
            (rng.next() % 8) as usize
        };
    let xs: Vec<Vec<u8>> = (0..n_rows)
        .map(|_| weight_row(ty, scales, n, &mut rng))
        .collect();
    let ys: Vec<Vec<u8>> = (0..n_cols).map(|_| act_row(vt, n, &mut rng)).collect();
    // Σ|x·y| of each pair, for the tolerance against the scalar dot
    let deq = |t: GgmlType, b: &[u8]| {
        let mut v = vec![0f32; n];
        (cpu_table(CpuLevel::Scalar)
            .unwrap()
            .traits(t)
            .unwrap()
            .to_float)(b, &mut v);
        v
    };
    let mut below: Option<(CpuLevel, Outputs)> = None;
    for tb in levels() {
        let tr = tb.traits(ty).unwrap();
        let got = run(tr, n, &xs, &ys)?;
        for (i, x) in xs.iter().enumerate() {
            let xf = deq(ty, x);
            for (j, y) in ys.iter().enumerate() {
                let yf = deq(vt, y);
                let mag: f64 = xf
                    .iter()
                    .zip(&yf)
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
                let fast = f32::from_bits(got.dots[i * n_cols + j]) as f64;
                let slow = (tr.vec_dot_scalar)(n, x, y) as f64;
                prop_assert!(
                    (fast - slow).abs() <= 1e-4 * mag + 1e-30,
                    "{} {}: vec_dot {} vs scalar {} (Σ|terms| {})",
                    tb.level(),
                    ty,
                    fast,
                    slow,
                    mag
                );
            }
        }
        if let Some((lv, b)) = &below {
            if tb.level() >= CpuLevel::Avx512 && *lv >= CpuLevel::Avx2 {
                prop_assert_eq!(&got, b, "{} {}: not bit for bit {}", tb.level(), ty, lv);
            }
        }
        below = Some((tb.level(), got));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn levels_agree_with_each_other_and_the_scalar_reference(
        ti in 0usize..18,
        nb in 1usize..6,
        n_rows in 1usize..=2,
        n_cols in 1usize..=8,
        seed in any::<u64>(),
    ) {
        check(ti, nb, n_rows, n_cols, seed)?;
    }
}

#[test]
fn levels_agree_for_every_type_many_seeds() {
    for ti in 0..types().len() {
        for seed in 0..60u64 {
            let (nb, rows, cols) = (
                1 + (seed % 5) as usize,
                1 + (seed % 2) as usize,
                1 + (seed % 8) as usize,
            );
            check(ti, nb, rows, cols, seed).unwrap();
        }
    }
}

/// Long rows (the decode shapes: 2048 and 4096 elements) in every level.
#[test]
fn levels_agree_on_decode_sized_rows() {
    for ti in 0..types().len() {
        let (ty, _) = types()[ti];
        let vt = cpu_table(CpuLevel::Scalar)
            .unwrap()
            .traits(ty)
            .unwrap()
            .vec_dot_type;
        let blck = ty.blck_size().max(vt.blck_size()).max(32);
        for (seed, n) in [(1u64, 2048usize), (2, 4096)] {
            check(ti, n / blck, 1, 3, seed).unwrap();
        }
    }
}
