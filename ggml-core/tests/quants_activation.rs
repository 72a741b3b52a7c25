//! The activation quantizers (Q8_0, Q8_K `from_float`, AVX2 where present)
//! equal their scalar references byte for byte: random rows of every
//! magnitude, exact rounding ties, NaN, infinities, subnormals, zeros.

use ggml_core::quants::{k_quants::q8_k, q8_0};
use proptest::prelude::*;

/// A row of `n` values drawn from `seed`: mostly ordinary values at a
/// random magnitude, with ties (`k + 0.5` times the block's step), NaN,
/// ±inf, subnormals and zeros mixed in.
fn row(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mag = [1e-40f32, 1e-3, 1.0, 127.0, 3e38][(next() % 5) as usize];
    (0..n)
        .map(|_| {
            let r = next();
            let u = (r >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0;
            match r % 64 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => f32::NEG_INFINITY,
                3 => 0.0,
                4 => -0.0,
                5 => f32::from_bits(1 + (r >> 40) as u32 % 1000),
                // 127 and a tie: with the block max at 127, x/d is x
                6..=15 => ((r >> 20) % 255) as f32 - 127.0 + 0.5,
                16..=19 => 127.0,
                _ => u * mag,
            }
        })
        .collect()
}

fn check(n_blocks: usize, seed: u64) -> Result<(), TestCaseError> {
    for (name, qk, size, fast, scalar) in [
        (
            "q8_0",
            32,
            34,
            q8_0::from_float as fn(&[f32], &mut [u8]),
            q8_0::from_float_scalar as fn(&[f32], &mut [u8]),
        ),
        ("q8_K", 256, 292, q8_k::from_float, q8_k::from_float_scalar),
    ] {
        let x = row(n_blocks * qk, seed);
        let mut a = vec![0xa5u8; n_blocks * size];
        let mut b = vec![0x5au8; n_blocks * size];
        fast(&x, &mut a);
        scalar(&x, &mut b);
        prop_assert!(
            a == b,
            "{name}: from_float differs from the scalar reference (seed {seed})"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn quants_activation_quantizers_match_scalar(n_blocks in 1usize..4, seed in any::<u64>()) {
        check(n_blocks, seed)?;
    }
}

#[test]
fn quants_activation_quantizers_edge_rows() {
    for v in [
        0.0f32,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-45,
        -1e-45,
        0.5,
        -0.5,
    ] {
        for (fast, scalar, qk, size) in [
            (
                q8_0::from_float as fn(&[f32], &mut [u8]),
                q8_0::from_float_scalar as fn(&[f32], &mut [u8]),
                32,
                34,
            ),
            (q8_k::from_float, q8_k::from_float_scalar, 256, 292),
        ] {
            let x = vec![v; qk];
            let (mut a, mut b) = (vec![1u8; size], vec![2u8; size]);
            fast(&x, &mut a);
            scalar(&x, &mut b);
            assert_eq!(a, b, "all {v}");
        }
    }
}

#[test]
fn quants_activation_q8_k_takes_the_first_of_opposite_maxima() {
    for (first, second) in [(-3.0f32, 3.0f32), (3.0, -3.0)] {
        for (i, j) in [(5usize, 9usize), (0, 255), (100, 101), (7, 8)] {
            let mut x: Vec<f32> = (0..256).map(|k| (k as f32 * 0.37).sin()).collect();
            x[i] = first;
            x[j] = second;
            let (mut a, mut b) = (vec![1u8; 292], vec![2u8; 292]);
            q8_k::from_float(&x, &mut a);
            q8_k::from_float_scalar(&x, &mut b);
            assert_eq!(a, b, "{first} at {i}, {second} at {j}");
            // the scale's sign follows the first maximum
            let d = f32::from_le_bytes([a[0], a[1], a[2], a[3]]);
            assert_eq!(d.is_sign_negative(), first > 0.0, "{first} at {i}");
        }
    }
}

#[test]
fn quants_activation_lengths_are_checked() {
    let x = vec![1f32; 32];
    assert!(std::panic::catch_unwind(|| q8_0::from_float(&x, &mut [0u8; 33])).is_err());
    assert!(std::panic::catch_unwind(|| q8_0::from_float(&x[..31], &mut [0u8; 34])).is_err());
    assert!(std::panic::catch_unwind(|| q8_k::from_float(&x, &mut [0u8; 292])).is_err());
}
