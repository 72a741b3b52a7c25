//! The tables at every level this CPU has: the same entries as the scalar
//! table (only the kernels differ), the scalar GEMM runs equal to the
//! scalar dots, the legacy dots exact for every activation byte, and the
//! F16 conversions equal to the scalar ones bit for bit.

use super::{cpu_table, CpuTable};
use crate::quants::blocks::k_quants::{panel, q4_k, q5_k, q6_k, q8_k};
use crate::quants::blocks::{iq4_nl, iq4_xs, mxfp4, q4_0, q8_0, q8_0_panel};
use crate::quants::gemm::GEMM_COLS;
use crate::quants::level::{supported_levels, CpuLevel};
use crate::types::GgmlType;

fn tables() -> Vec<&'static CpuTable> {
    supported_levels()
        .into_iter()
        .map(|l| cpu_table(l).expect("a supported level"))
        .collect()
}

/// `n` values of magnitude up to `scale / 2` drawn from `s`.
fn values(n: usize, s: &mut u64, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *s ^= *s << 13;
            *s ^= *s >> 7;
            *s ^= *s << 17;
            ((*s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
        })
        .collect()
}

fn rng_rows(
    n: usize,
    count: usize,
    seed: u64,
    mut quantize: impl FnMut(&[f32]) -> Vec<u8>,
) -> Vec<Vec<u8>> {
    let mut s = seed | 1;
    (0..count)
        .map(|c| quantize(&values(n, &mut s, (1 + c) as f32)))
        .collect()
}

fn quantizer(tb: &'static CpuTable, ty: GgmlType, n: usize) -> impl FnMut(&[f32]) -> Vec<u8> {
    let tr = tb.traits(ty).unwrap();
    move |a: &[f32]| {
        let mut y = vec![0u8; ty.row_size(n as u64).unwrap()];
        (tr.from_float)(a, &mut y);
        y
    }
}

#[test]
fn every_level_has_the_scalar_entries() {
    let scalar = cpu_table(CpuLevel::Scalar).unwrap();
    for tb in tables() {
        for ty in GgmlType::ALL {
            let (Some(a), Some(s)) = (tb.traits(ty), scalar.traits(ty)) else {
                assert!(
                    tb.traits(ty).is_none() && scalar.traits(ty).is_none(),
                    "{ty}"
                );
                continue;
            };
            let lv = tb.level();
            assert_eq!(a.ty, ty, "{lv} {ty}");
            assert_eq!(a.vec_dot_type, s.vec_dot_type, "{lv} {ty}");
            assert_eq!(
                a.vec_dot_cols.is_some(),
                s.vec_dot_cols.is_some(),
                "{lv} {ty}"
            );
            assert_eq!(
                a.vec_dot_tile.is_some(),
                s.vec_dot_tile.is_some(),
                "{lv} {ty}"
            );
            assert_eq!(a.gemm.is_some(), s.gemm.is_some(), "{lv} {ty}");
            assert!(
                std::ptr::fn_addr_eq(a.vec_dot_scalar, s.vec_dot_scalar),
                "{lv} {ty}"
            );
        }
    }
}

#[test]
fn a_level_the_cpu_lacks_is_refused() {
    for l in CpuLevel::ALL {
        assert_eq!(cpu_table(l).is_ok(), l.is_supported(), "{l}");
        if let Err(e) = cpu_table(l) {
            assert!(e.to_string().contains(l.name()), "{e}");
        }
    }
}

/// The scalar `run`s give the scalar dot of each panel column bit for bit,
/// and each level's run its own `vec_dot` of the column bit for bit.
#[test]
fn gemm_runs_match_the_dots_at_every_level() {
    let scalar = cpu_table(CpuLevel::Scalar).unwrap();
    for tb in tables() {
        // Q8_0 activations
        let n = 4 * 32;
        let ys = rng_rows(n, 8, 9, quantizer(tb, GgmlType::Q8_0, n));
        let refs: Vec<&[u8]> = ys.iter().map(|r| r.as_slice()).collect();
        let mut p = vec![0u8; q8_0_panel::panel_bytes(n)];
        q8_0_panel::pack(n, &refs, &mut p);
        type Run = fn(usize, &[u8], &[u8], &mut [f32; GEMM_COLS]);
        let q8_0_types: [(GgmlType, Run); 4] = [
            (GgmlType::Q8_0, q8_0_panel::gemm_scalar_q8_0),
            (GgmlType::Q4_0, q4_0::gemm_scalar),
            (GgmlType::IQ4NL, iq4_nl::gemm_scalar),
            (GgmlType::MXFP4, mxfp4::gemm_scalar),
        ];
        // Q8_K activations
        let nk = 2 * 256;
        let yk = rng_rows(nk, 6, 3, quantizer(tb, GgmlType::Q8K, nk));
        let refk: Vec<&[u8]> = yk.iter().map(|r| r.as_slice()).collect();
        let mut pk = vec![0u8; panel::panel_bytes(nk)];
        panel::pack(nk, &refk, &mut pk);
        let q8_k_types: [(GgmlType, Run); 4] = [
            (GgmlType::Q4K, q4_k::gemm_scalar),
            (GgmlType::Q5K, q5_k::gemm_scalar),
            (GgmlType::Q6K, q6_k::gemm_scalar),
            (GgmlType::IQ4XS, iq4_xs::gemm_scalar),
        ];
        for (types, n, p, ys) in [(q8_0_types, n, &p, &ys), (q8_k_types, nk, &pk, &yk)] {
            for (ty, gemm_scalar) in types {
                let tr = tb.traits(ty).unwrap();
                let x = rng_rows(n, 1, 11, quantizer(scalar, ty, n)).remove(0);
                let mut fast = [0f32; GEMM_COLS];
                (tr.gemm.unwrap().run)(n, &x, p, &mut fast);
                let mut slow = [0f32; GEMM_COLS];
                gemm_scalar(n, &x, p, &mut slow);
                for t in 0..GEMM_COLS {
                    let y = ys.get(t).cloned().unwrap_or_else(|| vec![0u8; ys[0].len()]);
                    let want = (tr.vec_dot_scalar)(n, &x, &y);
                    assert_eq!(slow[t].to_bits(), want.to_bits(), "{ty} column {t}");
                    let dot = (tr.vec_dot)(n, &x, &y);
                    assert_eq!(
                        fast[t].to_bits(),
                        dot.to_bits(),
                        "{} {ty} column {t}",
                        tb.level()
                    );
                }
                assert!(fast[..ys.len()].iter().all(|v| *v != 0.0), "{ty}: {fast:?}");
            }
        }
    }
}

/// With unit scales the integer sums are the result, so the SIMD dots
/// must equal the scalar ones exactly, for activation bytes of every value
/// (-128 included, which no quantizer writes but a file may hold).
#[test]
fn legacy_dots_are_exact_for_any_activation_byte() {
    let one = half::f16::ONE.to_bits().to_le_bytes();
    for tb in tables() {
        let mut s = 0x1234_5678_9abc_def0u64;
        let mut byte = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 56) as u8
        };
        for ty in [GgmlType::Q5_0, GgmlType::Q4_1, GgmlType::Q5_1] {
            let tr = tb.traits(ty).unwrap();
            let vt = tr.vec_dot_type;
            let n = 32 * 64;
            for round in 0..50 {
                let mut x: Vec<u8> = (0..ty.row_size(n as u64).unwrap())
                    .map(|_| byte())
                    .collect();
                let mut y: Vec<u8> = (0..vt.row_size(n as u64).unwrap())
                    .map(|_| byte())
                    .collect();
                for b in x.chunks_exact_mut(ty.type_size()) {
                    b[..2].copy_from_slice(&one);
                    if ty != GgmlType::Q5_0 {
                        b[2..4].copy_from_slice(&one);
                    }
                }
                for b in y.chunks_exact_mut(vt.type_size()) {
                    b[..2].copy_from_slice(&one);
                    if vt == GgmlType::Q8_1 {
                        b[2..4].copy_from_slice(&one);
                    }
                    if round == 0 {
                        b[vt.type_size() - 32..].fill(0x80);
                    }
                }
                let fast = (tr.vec_dot)(n as usize, &x, &y);
                let scalar = (tr.vec_dot_scalar)(n as usize, &x, &y);
                assert_eq!(fast, scalar, "{} {ty} round {round}", tb.level());
            }
        }
    }
}

/// Every f16 bit pattern widens the same way, and f32 values around every
/// rounding boundary (ties, subnormals, overflow, NaNs with payloads)
/// narrow to the same bits, at every level, 8-wide or one by one.
#[test]
fn f16_rows_match_the_scalar_conversions() {
    use crate::quants::blocks::float::{f16_from_float_scalar, f16_to_float_scalar};
    let all: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
    let n = all.len() / 2;
    let mut b = vec![0f32; n];
    f16_to_float_scalar(&all, &mut b);
    let mut xs: Vec<f32> = b.iter().filter(|v| v.is_finite()).copied().collect();
    let mids: Vec<f32> = b
        .windows(2)
        .filter(|w| w[0].is_finite() && w[1].is_finite())
        .flat_map(|w| {
            let m = f32::from_bits((w[0].to_bits() / 2 + w[1].to_bits() / 2) | 1);
            [(w[0] + w[1]) / 2.0, m]
        })
        .collect();
    xs.extend(mids);
    xs.extend([
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7fa0_1234),
        f32::from_bits(0xffc0_0001),
        f32::INFINITY,
        f32::NEG_INFINITY,
        65504.0,
        65519.99,
        65520.0,
        1e10,
        -1e-10,
        f32::MIN_POSITIVE,
    ]);
    for tb in tables() {
        let tr = tb.traits(GgmlType::F16).unwrap();
        let mut a = vec![0f32; n];
        (tr.to_float)(&all, &mut a);
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{}",
            tb.level()
        );
        for len in [xs.len(), 7, 9, 17, 33] {
            let src = &xs[..len];
            let (mut p, mut q) = (vec![0u8; 2 * len], vec![0u8; 2 * len]);
            (tr.from_float)(src, &mut p);
            f16_from_float_scalar(src, &mut q);
            assert_eq!(p, q, "{}: narrowing {len} values", tb.level());
        }
    }
}

/// The activation quantizers of every level equal the references byte
/// for byte (more cases: `tests/quants_activation.rs`, the chosen level).
#[test]
fn activation_quantizers_match_the_references_at_every_level() {
    for tb in tables() {
        for (ty, qk, reference) in [
            (
                GgmlType::Q8_0,
                32,
                q8_0::from_float_scalar as fn(&[f32], &mut [u8]),
            ),
            (GgmlType::Q8K, 256, q8_k::from_float_scalar),
        ] {
            let tr = tb.traits(ty).unwrap();
            for seed in 0..20u64 {
                let n = qk * (1 + seed as usize % 4);
                let x = values(n, &mut (seed | 1), 10.0);
                let x = x.as_slice();
                let (mut a, mut b) = (
                    vec![0xa5u8; ty.row_size(n as u64).unwrap()],
                    vec![0x5au8; ty.row_size(n as u64).unwrap()],
                );
                (tr.from_float)(x, &mut a);
                reference(x, &mut b);
                assert_eq!(a, b, "{} {ty} seed {seed}", tb.level());
            }
        }
    }
}
