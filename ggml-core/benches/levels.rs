//! The kernels of every SIMD level this CPU has, side by side in one run:
//! per type, the decode dot (`vec_dot`, a row of 4096 against one
//! activation row) and the prompt GEMM run (a row against a packed panel
//! of 8 columns), over 256 rows that stay in L2, in nanoseconds of this
//! thread's CPU time per row (`CLOCK_THREAD_CPUTIME_ID`, so that other
//! processes on a busy machine change the figures little), best of the
//! rounds; the levels alternate round by round. The last columns are
//! each level's speed-up over AVX2.
//!
//! `cargo bench -p ggml-core --bench levels [-- TYPE...]`

mod common;

use std::hint::black_box;

use common::values;

use ggml_core::quants::{cpu_table, supported_levels, CpuLevel, GEMM_COLS};
use ggml_core::GgmlType;

const K: usize = 4096;
const ROWS: usize = 256;
const ROUNDS: usize = 15;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes the `timespec` it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU ns of `f` per row, best of a few repetitions.
fn per_row(mut f: impl FnMut()) -> f64 {
    f();
    (0..5)
        .map(|_| {
            let t = thread_cpu_ns();
            f();
            (thread_cpu_ns() - t) as f64 / ROWS as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    use GgmlType as T;
    let types: Vec<GgmlType> = [
        T::Q4_0,
        T::Q8_0,
        T::Q4K,
        T::Q5K,
        T::Q6K,
        T::IQ4NL,
        T::IQ4XS,
        T::MXFP4,
        T::F16,
        T::BF16,
    ]
    .into_iter()
    .filter(|t| filter.is_empty() || filter.iter().any(|f| f == t.name()))
    .collect();
    let levels: Vec<CpuLevel> = supported_levels()
        .into_iter()
        .filter(|&l| l >= CpuLevel::Avx2)
        .collect();
    let scalar = cpu_table(CpuLevel::Scalar).unwrap();
    let names: Vec<String> = levels.iter().map(|l| l.to_string()).collect();
    println!(
        "ns of thread CPU time per row of {K} ({ROWS} rows, best of {ROUNDS} alternating rounds)"
    );
    println!(
        "| type | kernel | {} | {} |",
        names.join(" | "),
        names
            .iter()
            .skip(1)
            .map(|n| format!("{n} / avx2"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|---|{}", "---:|".repeat(2 * levels.len() - 1));
    for ty in types {
        let st = scalar.traits(ty).unwrap();
        let vt = st.vec_dot_type;
        let rb = ty.row_size(K as u64).unwrap();
        let mut w = vec![0u8; rb * ROWS];
        for (r, row) in w.chunks_exact_mut(rb).enumerate() {
            (st.from_float)(&values(r as u64 + 1, K), row);
        }
        let ys: Vec<Vec<u8>> = (0..GEMM_COLS)
            .map(|c| {
                let mut y = vec![0u8; vt.row_size(K as u64).unwrap()];
                (scalar.traits(vt).unwrap().from_float)(&values(1000 + c as u64, K), &mut y);
                y
            })
            .collect();
        let refs: Vec<&[u8]> = ys.iter().map(|y| y.as_slice()).collect();
        let mut dot = vec![f64::INFINITY; levels.len()];
        let mut gemm = vec![f64::INFINITY; levels.len()];
        for _ in 0..ROUNDS {
            for (i, &l) in levels.iter().enumerate() {
                let tr = cpu_table(l).unwrap().traits(ty).unwrap();
                dot[i] = dot[i].min(per_row(|| {
                    let mut s = 0f32;
                    for row in w.chunks_exact(rb) {
                        s += (tr.vec_dot)(K, row, &ys[0]);
                    }
                    black_box(s);
                }));
                if let Some(g) = tr.gemm {
                    let mut panel = vec![0u8; (g.panel_bytes)(K)];
                    (g.pack)(K, &refs, &mut panel);
                    gemm[i] = gemm[i].min(per_row(|| {
                        let mut out = [0f32; GEMM_COLS];
                        let mut s = 0f32;
                        for row in w.chunks_exact(rb) {
                            (g.run)(K, row, &panel, &mut out);
                            s += out[0];
                        }
                        black_box(s);
                    }));
                }
            }
        }
        for (what, t) in [("vec_dot", &dot), ("gemm (8 columns)", &gemm)] {
            if t.iter().any(|v| !v.is_finite()) {
                continue;
            }
            let cells: Vec<String> = t.iter().map(|v| format!("{v:.0}")).collect();
            let ups: Vec<String> = t
                .iter()
                .skip(1)
                .map(|v| format!("{:.2}x", t[0] / v))
                .collect();
            println!(
                "| {} | {what} | {} | {} |",
                ty.name(),
                cells.join(" | "),
                ups.join(" | ")
            );
        }
    }
}
