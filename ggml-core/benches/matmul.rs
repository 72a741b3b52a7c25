//! F32/F16 `mul_mat` on the CPU backend: a decode-shaped matvec in GB/s of
//! weight bytes (beside a plain memory-read figure measured in the same run)
//! and prompt-shaped matmuls (a projection, and the attention products of a
//! 512-token prompt with 128-wide heads) in GFLOP/s, for 1 and 2 threads.
//!
//! `cargo bench -p ggml-core --bench matmul [-- FILTER...]`, e.g. `f16`,
//! `matvec`.

mod common;

use common::{alloc, best_of, filters, load, values, wanted, MemRead};
use ggml_core::quants::cpu_traits;
use ggml_core::{BackendStream, CpuBackend, GgmlType, Graph, TensorId};

struct Case {
    name: String,
    g: Graph,
    weight_bytes: usize,
    flops: f64,
    matvec: bool,
}

fn build(ty: GgmlType, k: usize, m: usize, n: usize) -> Case {
    let setup = CpuBackend::new(1);
    let mut g = Graph::new();
    let a = g.new_tensor_2d(ty, k as i64, m as i64);
    let b = g.new_tensor_2d(GgmlType::F32, k as i64, n as i64);
    let out = g.mul_mat(a, b);
    g.build_forward_expand(out);
    alloc(&mut g, &setup);
    let tr = cpu_traits(ty).unwrap();
    let row = ty.row_size(k as u64).unwrap();
    let mut bytes = vec![0u8; row * m];
    // a few distinct rows repeated: the values do not matter for speed
    for (r, dst) in bytes.chunks_exact_mut(row).enumerate() {
        (tr.from_float)(&values((r % 61) as u64, k), dst);
    }
    g.write_bytes(a, &bytes).unwrap();
    g.write_f32(b, &values(7, k * n)).unwrap();
    let matvec = n == 1;
    Case {
        name: if matvec {
            format!("{ty} matvec {k}x{m}")
        } else {
            format!("{ty} matmul {k}x{m}x{n}")
        },
        g,
        weight_bytes: row * m,
        flops: 2.0 * k as f64 * m as f64 * n as f64,
        matvec,
    }
}

fn main() {
    let f = filters();
    let mut cases = Vec::new();
    for ty in [GgmlType::F32, GgmlType::F16] {
        // decode matvec, prompt matmul, and the attention products of a
        // 512-token prompt with 128-wide heads (KQ, then KQV)
        for (k, m, n) in [
            (4096, 8192, 1),
            (4096, 4096, 512),
            (128, 512, 512),
            (512, 128, 512),
        ] {
            let name = format!("{ty} {}", if n == 1 { "matvec" } else { "matmul" });
            if wanted(&f, &name) {
                cases.push(build(ty, k, m, n));
            }
        }
    }
    let mem = MemRead::new();
    println!("load before: {}", load());
    println!(
        "simd (AVX2/FMA/F16C): {}",
        ggml_core::quants::simd_available()
    );
    println!();
    println!("| threads | case | best ms | weight GB/s | GFLOP/s | mem read GB/s | % of read | 8 MiB burst read GB/s | % of burst |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for nth in [1, 2] {
        let cpu = CpuBackend::new(nth);
        for c in &cases {
            let read = mem.gbps(nth, 5);
            let burst = mem.burst_gbps(nth, 1);
            let nodes: Vec<TensorId> = c.g.nodes().to_vec();
            let reps = if c.matvec { 20 } else { 3 };
            let secs = best_of(reps, || cpu.compute(&c.g, &nodes).unwrap());
            let gbps = c.weight_bytes as f64 / secs / 1e9;
            let gflops = c.flops / secs / 1e9;
            if c.matvec {
                println!(
                    "| {nth} | {} | {:.2} | {gbps:.1} | {gflops:.1} | {read:.1} | {:.0}% | {burst:.1} | {:.0}% |",
                    c.name,
                    secs * 1e3,
                    100.0 * gbps / read,
                    100.0 * gbps / burst
                );
            } else {
                println!(
                    "| {nth} | {} | {:.1} | | {gflops:.1} | {read:.1} | | {burst:.1} | |",
                    c.name,
                    secs * 1e3
                );
            }
        }
    }
    println!();
    println!("load after: {}", load());
}
