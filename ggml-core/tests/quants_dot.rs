//! `vec_dot` (SIMD where present) equals `vec_dot_scalar`, and the scalar dot
//! equals an f64 reference over the dequantized rows, for every type: weight
//! rows of random bytes with sane (finite, including extreme) scale fields,
//! activations quantized to the type's `vec_dot_type`.

use ggml_core::quants::cpu_traits;
use ggml_core::GgmlType;
use half::f16;
use proptest::prelude::*;
use GgmlType as T;

/// A scale field inside a weight block: byte offset and encoding.
#[derive(Clone, Copy)]
enum Scale {
    F16(usize),
    F32(usize),
    E8m0(usize),
}

/// Every type with CPU traits, its scale fields, and the tolerance (relative
/// to `Σ|x_i·y_i|`) of the scalar dot against the f64 reference. Q4_1/Q5_1
/// use Q8_1's block sum `s`, stored as f16; that deviation is modelled
/// exactly by `min_term_model` and added to the reference.
fn types() -> Vec<(GgmlType, Vec<Scale>, f64)> {
    use Scale::*;
    vec![
        (T::F32, vec![], 1e-6),
        (T::F16, vec![], 1e-6),
        (T::BF16, vec![], 1e-6),
        (T::Q4_0, vec![F16(0)], 1e-5),
        (T::Q4_1, vec![F16(0), F16(2)], 1e-5),
        (T::Q5_0, vec![F16(0)], 1e-5),
        (T::Q5_1, vec![F16(0), F16(2)], 1e-5),
        (T::Q8_0, vec![F16(0)], 1e-5),
        (T::Q8_1, vec![F16(0), F16(2)], 1e-5),
        (T::Q2K, vec![F16(80), F16(82)], 1e-5),
        (T::Q3K, vec![F16(108)], 1e-5),
        (T::Q4K, vec![F16(0), F16(2)], 1e-5),
        (T::Q5K, vec![F16(0), F16(2)], 1e-5),
        (T::Q6K, vec![F16(208)], 1e-5),
        (T::Q8K, vec![F32(0)], 1e-5),
        (T::IQ4NL, vec![F16(0)], 1e-5),
        (T::IQ4XS, vec![F16(0)], 1e-5),
        (T::MXFP4, vec![E8m0(0)], 1e-5),
    ]
}

/// For Q4_1/Q5_1 (f16 minimum `m` at byte 2 of each block) against Q8_1
/// rows `y`: the exact deviation ggml's dot has from the dequantized
/// product, `Σ_b m_b·(s_b - d_b·Σ q_b)` (`s` is rounded to f16 from the
/// unrounded `d`), and the magnitude `Σ_b |m_b·s_b|` of the minimum terms.
/// `(0, 0)` for the other types.
fn min_term_model(ty: GgmlType, x: &[u8], y: &[u8]) -> (f64, f64) {
    if !matches!(ty, T::Q4_1 | T::Q5_1) {
        return (0.0, 0.0);
    }
    let h =
        |b: &[u8], o: usize| f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]])).to_f32() as f64;
    let (mut dev, mut mag) = (0f64, 0f64);
    for (bx, by) in x.chunks_exact(ty.type_size()).zip(y.chunks_exact(36)) {
        let (m, d, s) = (h(bx, 2), h(by, 0), h(by, 2));
        let sum_q: f64 = by[4..36].iter().map(|&q| q as i8 as f64).sum();
        dev += m * (s - d * sum_q);
        mag += (m * s).abs();
    }
    (dev, mag)
}

struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn signed(&mut self) -> f32 {
        2.0 * self.uniform() - 1.0
    }
}

/// A scale value: ordinary, or one of the extremes of an f16 scale.
fn scale_value(rng: &mut Rng) -> f32 {
    match rng.below(8) {
        0 => 6e-8, // smallest f16 subnormal
        1 => 1e-5,
        2 => 6e4,
        3 => -6e4,
        4 => 0.0,
        _ => rng.signed() * 0.1,
    }
}

/// A random weight row of `n` elements of `ty`.
fn weight_row(ty: GgmlType, scales: &[Scale], n: usize, rng: &mut Rng) -> Vec<u8> {
    let tr = cpu_traits(ty).unwrap();
    if !ty.is_quantized() {
        let mag = [1e-3f32, 1.0, 100.0][rng.below(3) as usize];
        let x: Vec<f32> = (0..n).map(|_| rng.signed() * mag).collect();
        let mut row = vec![0u8; ty.row_size(n as u64).unwrap()];
        (tr.from_float)(&x, &mut row);
        return row;
    }
    let mut row: Vec<u8> = (0..ty.row_size(n as u64).unwrap())
        .map(|_| rng.next_u64() as u8)
        .collect();
    for block in row.chunks_exact_mut(ty.type_size()) {
        for &s in scales {
            match s {
                Scale::F16(o) => block[o..o + 2]
                    .copy_from_slice(&f16::from_f32(scale_value(rng)).to_bits().to_le_bytes()),
                Scale::F32(o) => {
                    let v = [1e-8f32, 1e-3, 6e4, 1e-30][rng.below(4) as usize] * rng.signed();
                    block[o..o + 4].copy_from_slice(&v.to_le_bytes())
                }
                // 2^(e-128) from 2^-28 to 2^26: extreme but finite products
                Scale::E8m0(o) => block[o] = 100 + rng.below(55) as u8,
            }
        }
    }
    row
}

fn dequant(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut v = vec![0f32; n];
    (cpu_traits(ty).unwrap().to_float)(bytes, &mut v);
    v
}

fn check(ti: usize, nb: usize, seed: u64) -> Result<(), TestCaseError> {
    let (ty, scales, tol) = &types()[ti];
    let tr = cpu_traits(*ty).unwrap();
    let vt = tr.vec_dot_type;
    let mut rng = Rng(seed);
    let blck = ty.blck_size().max(vt.blck_size()).max(32);
    // float types also get a tail that is not a multiple of 8
    let n = nb * blck
        + if ty.is_quantized() {
            0
        } else {
            rng.below(8) as usize
        };
    let x = weight_row(*ty, scales, n, &mut rng);
    let amag = [1e-3f32, 1.0, 30.0][rng.below(3) as usize];
    let a: Vec<f32> = (0..n).map(|_| rng.signed() * amag).collect();
    let mut y = vec![0u8; vt.row_size(n as u64).unwrap()];
    (cpu_traits(vt).unwrap().from_float)(&a, &mut y);

    let xf = dequant(*ty, &x, n);
    let yf = dequant(vt, &y, n);
    let (mut exact, mut mag) = (0f64, 0f64);
    for (&p, &q) in xf.iter().zip(&yf) {
        exact += p as f64 * q as f64;
        mag += (p as f64 * q as f64).abs();
    }
    let fast = (tr.vec_dot)(n, &x, &y) as f64;
    let scalar = (tr.vec_dot_scalar)(n, &x, &y) as f64;
    prop_assert!(
        (fast - scalar).abs() <= 1e-4 * mag + 1e-30,
        "{ty}: vec_dot {fast} vs scalar {scalar} (Σ|terms| {mag})"
    );
    let (dev, mag_min) = min_term_model(*ty, &x, &y);
    let exact = exact + dev;
    let mag = mag + mag_min;
    prop_assert!(
        (scalar - exact).abs() <= tol * mag + 1e-30,
        "{ty}: scalar {scalar} vs f64 reference {exact} (Σ|terms| {mag}, tol {tol})"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn quants_vec_dot_matches_scalar_and_reference(ti in 0usize..18, nb in 1usize..5, seed in any::<u64>()) {
        check(ti, nb, seed)?;
    }
}

#[test]
fn quants_every_type_many_seeds() {
    for ti in 0..types().len() {
        for seed in 0..200u64 {
            check(ti, 1 + (seed % 4) as usize, seed).unwrap();
        }
    }
}

#[test]
fn quants_lengths_are_checked() {
    let tr = cpu_traits(T::Q4K).unwrap();
    let x = vec![0u8; 144];
    let y = vec![0u8; 292];
    assert_eq!((tr.vec_dot)(256, &x, &y), 0.0);
    assert!(std::panic::catch_unwind(|| (tr.vec_dot)(512, &x, &y)).is_err());
    assert!(std::panic::catch_unwind(|| (tr.vec_dot)(100, &x, &y)).is_err());
    let mut out = vec![0f32; 256];
    assert!(std::panic::catch_unwind(move || (tr.to_float)(&x[..100], &mut out)).is_err());
}

/// `vec_dot_cols` (for the types that have one) equals `vec_dot` per column
/// bit for bit, for every column count, with columns of random magnitudes.
fn check_cols(ti: usize, nb: usize, n_cols: usize, seed: u64) -> Result<(), TestCaseError> {
    let (ty, scales, _) = &types()[ti];
    let tr = cpu_traits(*ty).unwrap();
    let Some(cols) = tr.vec_dot_cols else {
        return Ok(());
    };
    let vt = tr.vec_dot_type;
    let mut rng = Rng(seed);
    let n = nb * ty.blck_size().max(vt.blck_size());
    let x = weight_row(*ty, scales, n, &mut rng);
    let ys = act_rows(vt, n, n_cols, &mut rng);
    let refs: Vec<&[u8]> = ys.iter().map(|y| y.as_slice()).collect();
    let mut out = vec![f32::NAN; n_cols];
    cols(n, &x, &refs, &mut out);
    for (c, y) in ys.iter().enumerate() {
        let one = (tr.vec_dot)(n, &x, y);
        prop_assert!(
            one.to_bits() == out[c].to_bits(),
            "{ty}: vec_dot_cols column {c} of {n_cols}: {} vs vec_dot {one}",
            out[c]
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn quants_vec_dot_cols_matches_vec_dot(
        ti in 0usize..18,
        nb in 1usize..5,
        n_cols in 0usize..=ggml_core::quants::VEC_DOT_COLS_MAX,
        seed in any::<u64>(),
    ) {
        check_cols(ti, nb, n_cols, seed)?;
    }
}

#[test]
fn quants_vec_dot_cols_lengths_are_checked() {
    for ty in GgmlType::ALL {
        let Some(tr) = cpu_traits(ty) else { continue };
        let Some(cols) = tr.vec_dot_cols else {
            continue;
        };
        let n = ty.blck_size();
        let x = vec![0u8; ty.row_size(n as u64).unwrap()];
        let y = vec![0u8; tr.vec_dot_type.row_size(n as u64).unwrap()];
        let max = ggml_core::quants::VEC_DOT_COLS_MAX;
        let ys = vec![y.as_slice(); max + 1];
        let mut out = vec![0f32; max + 1];
        cols(n, &x, &ys[..max], &mut out[..max]);
        assert!(out[..max].iter().all(|&v| v == 0.0), "{ty}");
        let r = std::panic::catch_unwind(|| {
            let mut out = vec![0f32; max + 1];
            cols(n, &x, &ys, &mut out)
        });
        assert!(r.is_err(), "{ty}: more than {max} columns");
        let r = std::panic::catch_unwind(|| {
            let mut out = vec![0f32; 2];
            cols(n, &x, &ys[..3], &mut out)
        });
        assert!(r.is_err(), "{ty}: outputs and columns differ");
        let r = std::panic::catch_unwind(|| {
            let mut out = vec![0f32; 2];
            cols(2 * n, &x, &ys[..2], &mut out)
        });
        assert!(r.is_err(), "{ty}: rows shorter than n");
    }
}

#[test]
fn quants_vec_dot_cols_every_type_many_seeds() {
    for ti in 0..types().len() {
        for seed in 0..100u64 {
            let n_cols = 1 + (seed % ggml_core::quants::VEC_DOT_COLS_MAX as u64) as usize;
            check_cols(ti, 1 + (seed % 4) as usize, n_cols, seed).unwrap();
        }
    }
}

/// `vec_dot_tile` (for the types that have one) equals `vec_dot` for every
/// (row, column) bit for bit, for every row and column count, with rows of
/// random bytes and columns of random magnitudes.
fn check_tile(
    ti: usize,
    nb: usize,
    n_rows: usize,
    n_cols: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let (ty, scales, _) = &types()[ti];
    let tr = cpu_traits(*ty).unwrap();
    let Some(tile) = tr.vec_dot_tile else {
        return Ok(());
    };
    let vt = tr.vec_dot_type;
    let mut rng = Rng(seed);
    let n = nb * ty.blck_size().max(vt.blck_size());
    let xs: Vec<Vec<u8>> = (0..n_rows)
        .map(|_| weight_row(*ty, scales, n, &mut rng))
        .collect();
    let ys: Vec<Vec<u8>> = (0..n_cols)
        .map(|_| {
            let amag = [1e-3f32, 1.0, 30.0][rng.below(3) as usize];
            let a: Vec<f32> = (0..n).map(|_| rng.signed() * amag).collect();
            let mut y = vec![0u8; vt.row_size(n as u64).unwrap()];
            (cpu_traits(vt).unwrap().from_float)(&a, &mut y);
            y
        })
        .collect();
    let xr: Vec<&[u8]> = xs.iter().map(|x| x.as_slice()).collect();
    let yr: Vec<&[u8]> = ys.iter().map(|y| y.as_slice()).collect();
    let mut out = vec![f32::NAN; n_rows * n_cols];
    tile(n, &xr, &yr, &mut out);
    for (r, x) in xs.iter().enumerate() {
        for (c, y) in ys.iter().enumerate() {
            let one = (tr.vec_dot)(n, x, y);
            let got = out[r * n_cols + c];
            prop_assert!(
                one.to_bits() == got.to_bits(),
                "{ty}: vec_dot_tile ({r}, {c}) of {n_rows}x{n_cols}: {got} vs vec_dot {one}"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn quants_vec_dot_tile_matches_vec_dot(
        ti in 0usize..18,
        nb in 1usize..5,
        n_rows in 0usize..=ggml_core::quants::VEC_DOT_TILE_ROWS,
        n_cols in 0usize..=ggml_core::quants::VEC_DOT_COLS_MAX,
        seed in any::<u64>(),
    ) {
        check_tile(ti, nb, n_rows, n_cols, seed)?;
    }
}

#[test]
fn quants_vec_dot_tile_every_type_many_seeds() {
    let max_c = ggml_core::quants::VEC_DOT_COLS_MAX as u64;
    for ti in 0..types().len() {
        for seed in 0..100u64 {
            let n_rows = 1 + (seed % 2) as usize;
            let n_cols = 1 + ((seed / 2) % max_c) as usize;
            check_tile(ti, 1 + (seed % 4) as usize, n_rows, n_cols, seed).unwrap();
        }
    }
}

#[test]
fn quants_vec_dot_tile_lengths_are_checked() {
    let (max_r, max_c) = (
        ggml_core::quants::VEC_DOT_TILE_ROWS,
        ggml_core::quants::VEC_DOT_COLS_MAX,
    );
    let mut n_types = 0;
    for ty in GgmlType::ALL {
        let Some(tr) = cpu_traits(ty) else { continue };
        let Some(tile) = tr.vec_dot_tile else {
            continue;
        };
        n_types += 1;
        let n = ty.blck_size();
        let x = vec![0u8; ty.row_size(n as u64).unwrap()];
        let y = vec![0u8; tr.vec_dot_type.row_size(n as u64).unwrap()];
        let xs = vec![x.as_slice(); max_r + 1];
        let ys = vec![y.as_slice(); max_c + 1];
        let mut out = vec![1f32; max_r * max_c];
        tile(n, &xs[..max_r], &ys[..max_c], &mut out);
        assert!(out.iter().all(|&v| v == 0.0), "{ty}");
        let r = std::panic::catch_unwind(|| {
            let mut out = vec![0f32; (max_r + 1) * 2];
            tile(n, &xs, &ys[..2], &mut out)
        });
        assert!(r.is_err(), "{ty}: more than {max_r} rows");
        let r = std::panic::catch_unwind(|| {
            let mut out = vec![0f32; max_c + 1];
            tile(n, &xs[..1], &ys, &mut out)
        });
        assert!(r.is_err(), "{ty}: more than {max_c} columns");
        let r = std::panic::catch_unwind(|| {
            let mut out = vec![0f32; 3];
            tile(n, &xs[..2], &ys[..2], &mut out)
        });
        assert!(r.is_err(), "{ty}: outputs are not rows x columns");
        let r = std::panic::catch_unwind(|| {
            let mut out = vec![0f32; 4];
            tile(2 * n, &xs[..2], &ys[..2], &mut out)
        });
        assert!(r.is_err(), "{ty}: rows shorter than n");
    }
    assert_eq!(n_types, 1, "Q8_0 has tiles (the K-quants have `gemm`)");
}

/// The random activation rows of a case, quantized to the type's
/// `vec_dot_type`.
fn act_rows(vt: GgmlType, n: usize, n_cols: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..n_cols)
        .map(|_| {
            let amag = [1e-3f32, 1.0, 30.0][rng.below(3) as usize];
            let a: Vec<f32> = (0..n).map(|_| rng.signed() * amag).collect();
            let mut y = vec![0u8; vt.row_size(n as u64).unwrap()];
            (cpu_traits(vt).unwrap().from_float)(&a, &mut y);
            y
        })
        .collect()
}

/// `gemm` (for the types that have one) equals `vec_dot` per column bit
/// for bit, for every column count (the missing ones give 0).
fn check_gemm(ti: usize, nb: usize, n_cols: usize, seed: u64) -> Result<(), TestCaseError> {
    let (ty, scales, _) = &types()[ti];
    let tr = cpu_traits(*ty).unwrap();
    let Some(g) = tr.gemm else {
        return Ok(());
    };
    let vt = tr.vec_dot_type;
    let mut rng = Rng(seed);
    let n = nb * ty.blck_size().max(vt.blck_size());
    let x = weight_row(*ty, scales, n, &mut rng);
    let ys = act_rows(vt, n, n_cols, &mut rng);
    let refs: Vec<&[u8]> = ys.iter().map(|y| y.as_slice()).collect();
    let mut panel = vec![0xa5u8; (g.panel_bytes)(n)];
    (g.pack)(n, &refs, &mut panel);
    let mut out = [f32::NAN; ggml_core::quants::GEMM_COLS];
    (g.run)(n, &x, &panel, &mut out);
    for (c, &got) in out.iter().enumerate() {
        let Some(y) = ys.get(c) else {
            prop_assert!(got == 0.0, "{ty}: zero column {c} gave {got}");
            continue;
        };
        let one = (tr.vec_dot)(n, &x, y);
        prop_assert!(
            one.to_bits() == got.to_bits(),
            "{ty}: gemm column {c} of {n_cols}: {got} vs vec_dot {one}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn quants_gemm_matches_vec_dot(
        ti in 0usize..18,
        nb in 1usize..5,
        n_cols in 0usize..=ggml_core::quants::GEMM_COLS,
        seed in any::<u64>(),
    ) {
        check_gemm(ti, nb, n_cols, seed)?;
    }
}

#[test]
fn quants_gemm_every_type_many_seeds() {
    let mut n_types = 0;
    for (ti, (ty, _, _)) in types().iter().enumerate() {
        n_types += cpu_traits(*ty).unwrap().gemm.is_some() as usize;
        for seed in 0..200u64 {
            let n_cols = (seed % (ggml_core::quants::GEMM_COLS as u64 + 1)) as usize;
            check_gemm(ti, 1 + (seed % 4) as usize, n_cols, seed).unwrap();
        }
    }
    assert_eq!(
        n_types, 8,
        "Q8_0, Q4_0, IQ4_NL, MXFP4, Q4_K, Q5_K, Q6_K and IQ4_XS have gemm"
    );
}

#[test]
fn quants_gemm_lengths_are_checked() {
    for ty in GgmlType::ALL {
        let Some(tr) = cpu_traits(ty) else { continue };
        let Some(g) = tr.gemm else { continue };
        let n = ty.blck_size();
        let x = vec![0u8; ty.row_size(n as u64).unwrap()];
        let y = vec![0u8; tr.vec_dot_type.row_size(n as u64).unwrap()];
        let cols = ggml_core::quants::GEMM_COLS;
        let ys = vec![y.as_slice(); cols + 1];
        let mut panel = vec![0u8; (g.panel_bytes)(n)];
        let r = std::panic::catch_unwind(|| {
            let mut p = vec![0u8; (g.panel_bytes)(n)];
            (g.pack)(n, &ys, &mut p)
        });
        assert!(r.is_err(), "{ty}: more than {cols} columns");
        let r = std::panic::catch_unwind(|| {
            let mut p = vec![0u8; (g.panel_bytes)(n) - 1];
            (g.pack)(n, &ys[..1], &mut p)
        });
        assert!(r.is_err(), "{ty}: a short panel");
        let r = std::panic::catch_unwind(|| (g.pack)(2 * n, &ys[..1], &mut panel.clone()));
        assert!(r.is_err(), "{ty}: columns shorter than n");
        (g.pack)(n, &ys[..2], &mut panel);
        let r = std::panic::catch_unwind(|| {
            let mut out = [0f32; ggml_core::quants::GEMM_COLS];
            (g.run)(2 * n, &x, &panel, &mut out)
        });
        assert!(r.is_err(), "{ty}: a row shorter than n");
        let r = std::panic::catch_unwind(|| {
            let mut out = [0f32; ggml_core::quants::GEMM_COLS];
            (g.run)(n, &x, &panel[..panel.len() - 1], &mut out)
        });
        assert!(r.is_err(), "{ty}: a panel of the wrong size");
    }
}
