//! Decode matvec bandwidth against a plain memory read, in one run: a
//! `mul_mat` of one activation column with a 256 MiB weight matrix (4096
//! columns; 8 times the 32 MiB L3, so every run reads the weights from
//! DRAM), as a decode's products run on the CPU backend (activation
//! conversion, the worker pool, the level's `vec_dot`), and a plain read
//! of a 256 MiB buffer (a sum of u64s) on as many threads. The two
//! alternate round by round, so that both see the same machine; the
//! table gives the best round of each and their ratio (the issue asks
//! at least 85%), with the load before and after.
//!
//! `cargo bench -p ggml-core --bench matvec [-- TYPE...]` (default: the
//! bench files' decode types q4_K, q6_K, q8_0); `GGML_CPU_LEVEL` picks the
//! kernels' level as everywhere.

mod common;

use common::{alloc, filters, load, values, weight_rows, MemRead};
use ggml_core::quants::cpu_level_summary;
use ggml_core::{BackendStream, CpuBackend, GgmlType, Graph};
use std::time::Instant;

const K: usize = 4096;
const WEIGHT_BYTES: usize = 256 << 20;
const ROUNDS: usize = 7;

fn main() {
    let f = filters();
    let types: Vec<GgmlType> = if f.is_empty() {
        vec![GgmlType::Q4K, GgmlType::Q6K, GgmlType::Q8_0]
    } else {
        f.iter()
            .filter(|a| *a != "bench")
            .map(|n| {
                GgmlType::from_name(n)
                    .or_else(|| GgmlType::from_name(&n.replace("_k", "_K")))
                    .unwrap_or_else(|| panic!("unknown type {n}"))
            })
            .collect()
    };
    let setup = CpuBackend::new(1);
    let mem = MemRead::new();
    println!("load before: {}", load());
    println!("kernels: {}", cpu_level_summary());
    println!(
        "matvec: mul_mat of {} MiB of weights ({K} columns) with 1 column; plain read: \
         sum of a {} MiB u64 buffer; best of {ROUNDS} alternating rounds",
        WEIGHT_BYTES >> 20,
        mem.bytes() >> 20
    );
    println!();
    println!("| type | threads | matvec GB/s | plain read GB/s | matvec / read |");
    println!("|---|---:|---:|---:|---:|");
    for ty in types {
        let row = ty.row_size(K as u64).unwrap();
        let rows = WEIGHT_BYTES / row;
        let mut g = Graph::new();
        let a = g.new_tensor_2d(ty, K as i64, rows as i64);
        let b = g.new_tensor_2d(GgmlType::F32, K as i64, 1);
        let out = g.mul_mat(a, b);
        g.build_forward_expand(out);
        alloc(&mut g, &setup);
        g.write_bytes(a, &weight_rows(ty, K, rows)).unwrap();
        g.write_f32(b, &values(3, K)).unwrap();
        let nodes = g.nodes().to_vec();
        let bytes = (rows * row) as f64;
        for nth in [1, 2] {
            let cpu = CpuBackend::new(nth);
            cpu.compute(&g, &nodes).unwrap();
            let (mut best_mv, mut best_rd) = (f64::INFINITY, 0f64);
            for _ in 0..ROUNDS {
                best_rd = best_rd.max(mem.gbps(nth, 1));
                let t = Instant::now();
                cpu.compute(&g, &nodes).unwrap();
                best_mv = best_mv.min(t.elapsed().as_secs_f64());
            }
            let mv = bytes / best_mv / 1e9;
            println!(
                "| {ty} | {nth} | {mv:.1} | {best_rd:.1} | {:.0}% |",
                100.0 * mv / best_rd
            );
        }
    }
    println!();
    println!("load after: {}", load());
}
