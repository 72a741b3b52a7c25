//! Dequantization of llama.cpp-quantized fixtures equals the reference
//! (gguf-py) dequantization bit for bit, for every type in `index.tsv`.

use std::path::PathBuf;

use fixtures::{fixture_path, or_skip, SkipReason};
use ggml_core::quants::cpu_traits;
use ggml_core::GgmlType;

/// `quants/NAME.bin` and `quants/NAME.f32`, or why one is absent
/// (tests/data keeps the types of the model fixtures; the rest come from
/// ../shared/fixtures).
fn quant_files(name: &str) -> Result<(PathBuf, PathBuf), SkipReason> {
    Ok((
        fixture_path(&format!("quants/{name}.bin"))?,
        fixture_path(&format!("quants/{name}.f32"))?,
    ))
}

#[test]
fn quants_fixtures_dequantize_bit_exact() {
    let index_path = or_skip!(fixture_path("quants/index.tsv"));
    let index = std::fs::read_to_string(index_path).expect("index.tsv");
    let mut lines = index.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (c_type, c_id, c_bytes, c_n) = (
        col("type"),
        col("ggml_type_id"),
        col("bytes"),
        col("n_values"),
    );
    let (c_ne0, c_ne1, c_ne2) = (col("ne0"), col("ne1"), col("ne2"));
    let (mut checked, mut skipped) = (0, 0);
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        let name = f[c_type];
        let ty = GgmlType::from_id(f[c_id].parse().unwrap()).expect("known type id");
        assert_eq!(GgmlType::from_name(name), Some(ty), "{name}");
        let n: usize = f[c_n].parse().unwrap();
        let (ne0, ne1, ne2): (usize, usize, usize) = (
            f[c_ne0].parse().unwrap(),
            f[c_ne1].parse().unwrap(),
            f[c_ne2].parse().unwrap(),
        );
        assert_eq!(n, ne0 * ne1 * ne2, "{name}");
        let bytes: usize = f[c_bytes].parse().unwrap();
        let (bin, f32s) = or_skip!(quant_files(name), {
            skipped += 1;
            continue;
        });
        let raw = std::fs::read(bin).unwrap();
        assert_eq!(raw.len(), bytes, "{name}: .bin size");
        assert_eq!(
            ty.row_size(ne0 as u64).unwrap() * ne1 * ne2,
            bytes,
            "{name}: row_size"
        );
        let want: Vec<u32> = std::fs::read(f32s)
            .unwrap()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(want.len(), n, "{name}: .f32 size");

        let tr = cpu_traits(ty).expect("cpu traits");
        // whole tensor at once
        let mut got = vec![0f32; n];
        (tr.to_float)(&raw, &mut got);
        let mismatches = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| g.to_bits() != **w)
            .count();
        if mismatches > 0 {
            let i = got
                .iter()
                .zip(&want)
                .position(|(g, w)| g.to_bits() != *w)
                .unwrap();
            panic!(
                "{name}: {mismatches} of {n} values differ; first at {i}: got {} want {}",
                got[i],
                f32::from_bits(want[i])
            );
        }
        // row by row, at the odd offsets rows have inside a tensor
        let rb = ty.row_size(ne0 as u64).unwrap();
        let mut row = vec![0f32; ne0];
        for r in [0, 1, ne1 * ne2 - 1] {
            (tr.to_float)(&raw[r * rb..(r + 1) * rb], &mut row);
            assert!(
                row.iter()
                    .zip(&want[r * ne0..])
                    .all(|(g, w)| g.to_bits() == *w),
                "{name} row {r}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked + skipped, 15, "index.tsv lists 15 types");
    assert!(checked > 0, "no quant type's files found");
}

/// Re-quantizing llama.cpp's dequantized values reproduces llama.cpp's bytes
/// for the types whose reference quantizer is idempotent on its own output
/// (the largest value of a block maps back to the same scale and levels):
/// a check of ggml's scale choice and rounding, not just of the layout.
/// The searching quantizers (K-quants, IQ4) may legitimately find another
/// optimum on already-quantized data, so for them a share of identical
/// blocks is required (measured: q2_K 510/512, q3_K 277/512, q5_K 474/512,
/// q6_K 418/512, iq4_nl 4064/4096, iq4_xs 480/512).
#[test]
fn quants_requantizing_fixtures_reproduces_llama_cpp_bytes() {
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for (name, min_share) in [
        ("f16", 1.0),
        ("bf16", 1.0),
        ("q8_0", 1.0),
        ("q4_0", 1.0),
        ("q5_0", 1.0),
        ("q4_1", 1.0),
        ("q5_1", 1.0),
        ("q4_k", 1.0),
        ("mxfp4", 1.0),
        ("q2_k", 0.95),
        ("q3_k", 0.45),
        ("q5_k", 0.85),
        ("q6_k", 0.75),
        ("iq4_nl", 0.95),
        ("iq4_xs", 0.85),
    ] {
        let ty = GgmlType::from_name(name).unwrap();
        let (bin, f32s) = or_skip!(quant_files(name), continue);
        let raw = std::fs::read(bin).unwrap();
        let vals: Vec<f32> = std::fs::read(f32s)
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let tr = cpu_traits(ty).unwrap();
        let mut q = vec![0u8; raw.len()];
        (tr.from_float)(&vals, &mut q);
        let bs = ty.type_size();
        let same = q
            .chunks_exact(bs)
            .zip(raw.chunks_exact(bs))
            .filter(|(a, b)| a == b)
            .count();
        let total = raw.len() / bs;
        report.push(format!("{name}: {same}/{total} blocks identical"));
        if (same as f64) < min_share * total as f64 {
            failures.push(format!("{name}: {same}/{total} < {min_share}"));
        }
    }
    println!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{failures:?}");
}
