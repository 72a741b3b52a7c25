//! `GGML_CPU_LEVEL` end to end: a process started with it runs that level
//! (and a quantized `mul_mat` at every SIMD level gives the AVX2 level's
//! bits), and a value naming no level, or a level this CPU lacks, makes the
//! CPU backend's `compute` fail with an error naming it, not a panic.
//!
//! The level is read once per process, so each case re-runs this test
//! binary as a child (`CPU_LEVEL_CHILD=1`, one test selected) with the
//! variable set, and reads what the child prints.

mod common;

use std::process::Command;

use common::{alloc, cpu, Rng};
use ggml_core::quants::{cpu_level, cpu_traits, supported_levels, CpuLevel, CPU_LEVEL_ENV};
use ggml_core::{BackendStream, GgmlType, Graph};

const CHILD: &str = "CPU_LEVEL_CHILD";

/// In a child: compute a Q4_K × F32 `mul_mat` and print the level, the
/// result and the output's bits.
#[test]
fn child_computes_a_product() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let (k, m, n) = (512usize, 16usize, 3usize);
    let mut rng = Rng(7);
    let w: Vec<f32> = (0..k * m).map(|_| rng.f32(-1.0, 1.0)).collect();
    let x: Vec<f32> = (0..k * n).map(|_| rng.f32(-1.0, 1.0)).collect();
    let tr = cpu_traits(GgmlType::Q4K).expect("Q4_K has CPU traits");
    let mut wq = vec![0u8; GgmlType::Q4K.row_size(k as u64).unwrap() * m];
    let row = GgmlType::Q4K.row_size(k as u64).unwrap();
    for (r, dst) in wq.chunks_exact_mut(row).enumerate() {
        (tr.from_float)(&w[r * k..(r + 1) * k], dst);
    }
    let mut g = Graph::new();
    let a = g.new_tensor_2d(GgmlType::Q4K, k as i64, m as i64);
    let b = g.new_tensor_2d(GgmlType::F32, k as i64, n as i64);
    let out = g.mul_mat(a, b);
    g.build_forward_expand(out);
    alloc(&mut g, cpu());
    g.write_bytes(a, &wq).unwrap();
    g.write_f32(b, &x).unwrap();
    let nodes = g.nodes().to_vec();
    match cpu().compute(&g, &nodes) {
        Ok(()) => {
            let bits: Vec<String> = g
                .read_f32(out)
                .unwrap()
                .iter()
                .map(|v| format!("{:08x}", v.to_bits()))
                .collect();
            println!("LEVEL={} RESULT=ok BITS={}", cpu_level(), bits.join(","));
        }
        Err(e) => println!("LEVEL={} RESULT=err {e}", cpu_level()),
    }
}

/// The child's `LEVEL=...` line for `GGML_CPU_LEVEL=value`.
fn run_child(value: &str) -> String {
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["child_computes_a_product", "--exact", "--nocapture"])
        .arg("--test-threads=1")
        .env(CHILD, "1")
        .env(CPU_LEVEL_ENV, value)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child with {CPU_LEVEL_ENV}={value} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // the harness may print the test's name on the same line first
    stdout
        .lines()
        .find_map(|l| l.find("LEVEL=").map(|i| l[i..].to_string()))
        .unwrap_or_else(|| panic!("no LEVEL line from the child:\n{stdout}"))
}

fn bits(line: &str) -> &str {
    line.split_once("BITS=").map_or("", |(_, b)| b)
}

#[test]
fn each_level_the_cpu_has_is_taken_and_simd_levels_agree_bit_for_bit() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let mut avx2_bits = None;
    for level in supported_levels() {
        let line = run_child(level.name());
        assert!(
            line.starts_with(&format!("LEVEL={level} RESULT=ok")),
            "{level}: {line}"
        );
        if level == CpuLevel::Avx2 {
            avx2_bits = Some(bits(&line).to_string());
        } else if let Some(want) = &avx2_bits {
            assert_eq!(bits(&line), want, "{level} differs from avx2");
        }
    }
}

#[test]
fn a_value_naming_no_level_is_refused_by_name() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let line = run_child("sse4");
    assert!(line.contains("RESULT=err"), "{line}");
    assert!(
        line.contains("GGML_CPU_LEVEL='sse4' names no CPU level"),
        "{line}"
    );
}

#[test]
fn a_level_the_cpu_lacks_is_refused_by_name() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let Some(lacking) = CpuLevel::ALL.into_iter().find(|l| !l.is_supported()) else {
        eprintln!("skipped: this CPU has every level (no level to refuse)");
        return;
    };
    let line = run_child(lacking.name());
    assert!(line.contains("RESULT=err"), "{line}");
    assert!(
        line.contains(&format!("GGML_CPU_LEVEL={lacking}: this CPU lacks it")),
        "{line}"
    );
}
