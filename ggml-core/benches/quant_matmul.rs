//! Quantized `mul_mat_id` / `mul_mat` on the CPU backend, per weight type:
//! a decode-shaped expert product (2048×768 per expert, 128 experts, 8
//! used, 1 token) in GB/s of weight bytes read, beside a plain memory-read
//! figure measured right before it; and a prompt-shaped `mul_mat` (one
//! 2048×768 weight, 512 tokens) and a prompt-shaped expert product (the
//! 128 experts, 512 tokens with 8 each) in GFLOP/s. 1 and 2 threads.
//!
//! The decode product cycles through copies of its weights that together
//! hold at least [`COLD_BYTES`] (1 GiB), as a model's layers do: each run
//! reads experts that are in no cache, whereas one 128-expert tensor
//! (113 MB of Q4_K) would leave about a quarter of the next run's experts
//! in the 32 MB L3. The decode columns give the best and the median of 200
//! runs (on a busy machine the median shows the stalls the best hides),
//! and count the worker pool's sleeps per run (each a futex wake-up: the
//! caller waiting for the worker, the worker for work).
//!
//! `cargo bench -p ggml-core --bench quant_matmul [-- TYPE...]`, e.g.
//! `q4_K q6_K q8_0`. `--no-prompt` skips the prompt-shaped product.

mod common;

use common::{alloc, best_of, filters, load, sorted_times, values, weight_rows, MemRead};
use ggml_core::quants::cpu_traits;
use ggml_core::{Backend, BackendStream, CpuBackend, GgmlType, Graph, TensorId};

const K: usize = 2048;
const M: usize = 768;
const N_EXPERT: usize = 128;
const N_USED: usize = 8;
const N_PROMPT: usize = 512;
/// Weight bytes the decode runs cycle through (several copies of the
/// expert tensor, as a model's layers), so that no run finds its experts
/// in a cache.
const COLD_BYTES: usize = 1 << 30;

struct Decode {
    /// The product and its ids tensor, in graphs of the same nodes with
    /// their own copies of the weights, cycled through so that the runs
    /// read cold memory.
    graphs: Vec<(Graph, TensorId)>,
    bytes_per_op: usize,
    /// A copy of the weights and the converted activation row, for the
    /// bare `vec_dot` loop the op is compared with.
    raw_w: Vec<u8>,
    raw_act: Vec<u8>,
}

fn decode_graph(ty: GgmlType, setup: &dyn Backend) -> Decode {
    let w = weight_rows(ty, K, M * N_EXPERT);
    let one = |w: &[u8]| {
        let mut g = Graph::new();
        let a = g.new_tensor_3d(ty, K as i64, M as i64, N_EXPERT as i64);
        let b = g.new_tensor_3d(GgmlType::F32, K as i64, 1, 1);
        let ids = g.new_tensor_2d(GgmlType::I32, N_USED as i64, 1);
        let out = g.mul_mat_id(a, b, ids);
        g.build_forward_expand(out);
        alloc(&mut g, setup);
        g.write_bytes(a, w).unwrap();
        g.write_f32(b, &values(3, K)).unwrap();
        (g, ids)
    };
    let graphs = (0..COLD_BYTES.div_ceil(w.len())).map(|_| one(&w)).collect();
    let vdt = cpu_traits(ty).unwrap().vec_dot_type;
    let mut raw_act = vec![0u8; vdt.row_size(K as u64).unwrap()];
    (cpu_traits(vdt).unwrap().from_float)(&values(3, K), &mut raw_act);
    Decode {
        graphs,
        bytes_per_op: N_USED * M * ty.row_size(K as u64).unwrap(),
        raw_w: w,
        raw_act,
    }
}

/// The floor for one thread: `vec_dot` over the selected experts' rows,
/// nothing else (activation already converted, no graph, no pool).
fn bare_loop(ty: GgmlType, d: &Decode, ids: &[i32], out: &mut [f32]) {
    let vec_dot = cpu_traits(ty).unwrap().vec_dot;
    let row = ty.row_size(K as u64).unwrap();
    for (e, &x) in ids.iter().enumerate() {
        let w = &d.raw_w[x as usize * M * row..][..M * row];
        for (r, o) in out[e * M..(e + 1) * M].iter_mut().enumerate() {
            *o = vec_dot(K, &w[r * row..(r + 1) * row], &d.raw_act);
        }
    }
}

fn prompt_graph(ty: GgmlType, setup: &dyn Backend) -> Graph {
    let mut g = Graph::new();
    let a = g.new_tensor_2d(ty, K as i64, M as i64);
    let b = g.new_tensor_2d(GgmlType::F32, K as i64, N_PROMPT as i64);
    let out = g.mul_mat(a, b);
    g.build_forward_expand(out);
    alloc(&mut g, setup);
    g.write_bytes(a, &weight_rows(ty, K, M)).unwrap();
    g.write_f32(b, &values(4, K * N_PROMPT)).unwrap();
    g
}

/// The prompt-shaped expert product, as a MoE layer's gate or up
/// projection over a ubatch: [`N_PROMPT`] tokens, each with its own
/// [`N_USED`] of the [`N_EXPERT`] experts (about 32 tokens per expert).
fn prompt_id_graph(ty: GgmlType, setup: &dyn Backend, w: &[u8], rng: &mut u64) -> Graph {
    let mut g = Graph::new();
    let a = g.new_tensor_3d(ty, K as i64, M as i64, N_EXPERT as i64);
    let b = g.new_tensor_3d(GgmlType::F32, K as i64, 1, N_PROMPT as i64);
    let ids = g.new_tensor_2d(GgmlType::I32, N_USED as i64, N_PROMPT as i64);
    let out = g.mul_mat_id(a, b, ids);
    g.build_forward_expand(out);
    alloc(&mut g, setup);
    g.write_bytes(a, w).unwrap();
    g.write_f32(b, &values(5, K * N_PROMPT)).unwrap();
    let ids_v: Vec<i32> = (0..N_PROMPT).flat_map(|_| next_ids(rng)).collect();
    g.write_i32(ids, &ids_v).unwrap();
    g
}

/// 8 distinct experts, a different set each call (xorshift).
fn next_ids(state: &mut u64) -> Vec<i32> {
    let mut ids = Vec::with_capacity(N_USED);
    while ids.len() < N_USED {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let e = (*state % N_EXPERT as u64) as i32;
        if !ids.contains(&e) {
            ids.push(e);
        }
    }
    ids
}

fn main() {
    let mut f = filters();
    let prompt = !std::env::args().any(|a| a == "--no-prompt");
    f.retain(|a| a != "bench");
    let types: Vec<GgmlType> = if f.is_empty() {
        use GgmlType::*;
        vec![
            Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K, IQ4NL, IQ4XS, MXFP4, BF16, F16,
        ]
    } else {
        f.iter()
            .map(|n| GgmlType::from_name(n).unwrap_or_else(|| panic!("unknown type {n}")))
            .collect()
    };
    let setup = CpuBackend::new(1);
    let mem = MemRead::new();
    println!("load before: {}", load());
    println!(
        "simd (AVX2/FMA/F16C): {}",
        ggml_core::quants::simd_available()
    );
    println!(
        "decode: mul_mat_id {K}x{M} x {N_EXPERT} experts, {N_USED} used, 1 token, cycling through \
         {} MiB of weights; prompt: mul_mat {K}x{M} x {N_PROMPT} tokens; prompt experts: \
         mul_mat_id of the same experts, {N_PROMPT} tokens, {N_USED} experts each",
        COLD_BYTES >> 20
    );
    println!();
    println!(
        "| type | threads | decode µs | median µs | weight GB/s | mem read GB/s | % of read | 8 MiB burst read GB/s | % of burst | bare vec_dot loop µs (same threads) | sleeps per pool run (caller / worker) | prompt GFLOP/s | prompt experts GFLOP/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut rng = 0x1234_5678_9abc_def1u64;
    for ty in types {
        let dec = decode_graph(ty, &setup);
        let pg = prompt.then(|| prompt_graph(ty, &setup));
        let pig = prompt.then(|| prompt_id_graph(ty, &setup, &dec.raw_w, &mut rng));
        for nth in [1, 2] {
            let cpu = CpuBackend::new(nth);
            let read = mem.gbps(nth, 5);
            let burst = mem.burst_gbps(nth, 1);
            let nodes = dec.graphs[0].0.nodes().to_vec();
            let stats0 = cpu.pool_stats();
            let mut run = 0;
            let times = sorted_times(200, || {
                let (g, ids) = &dec.graphs[run % dec.graphs.len()];
                run += 1;
                g.write_i32(*ids, &next_ids(&mut rng)).unwrap();
                cpu.compute(g, &nodes).unwrap();
            });
            let (secs, median) = (times[0], times[times.len() / 2]);
            let stats = cpu.pool_stats();
            let runs = (stats.runs - stats0.runs).max(1) as f64;
            let sleeps = format!(
                "{:.2} / {:.2}",
                (stats.caller_sleeps - stats0.caller_sleeps) as f64 / runs,
                (stats.worker_sleeps - stats0.worker_sleeps) as f64 / runs
            );
            let gbps = dec.bytes_per_op as f64 / secs / 1e9;
            // the same loop on `nth` plain scoped threads, each taking an
            // equal share of the experts: what a perfect split would give
            let bare = {
                let mut out = vec![0f32; N_USED * M];
                best_of(100, || {
                    let ids = next_ids(&mut rng);
                    let per = N_USED / nth;
                    std::thread::scope(|s| {
                        for (ids, out) in ids.chunks(per).zip(out.chunks_mut(per * M)) {
                            let dec = &dec;
                            s.spawn(move || bare_loop(ty, dec, ids, out));
                        }
                    });
                }) * 1e6
            };
            let gflops = pg.as_ref().map(|g| {
                let nodes = g.nodes().to_vec();
                let s = best_of(2, || cpu.compute(g, &nodes).unwrap());
                2.0 * (K * M * N_PROMPT) as f64 / s / 1e9
            });
            let id_gflops = pig.as_ref().map(|g| {
                let nodes = g.nodes().to_vec();
                let s = best_of(3, || cpu.compute(g, &nodes).unwrap());
                2.0 * (K * M * N_USED * N_PROMPT) as f64 / s / 1e9
            });
            let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.1}"));
            println!(
                "| {ty} | {nth} | {:.0} | {:.0} | {gbps:.1} | {read:.1} | {:.0}% | {burst:.1} | {:.0}% | {bare:.0} | {sleeps} | {} | {} |",
                secs * 1e6,
                median * 1e6,
                100.0 * gbps / read,
                100.0 * gbps / burst,
                fmt(gflops),
                fmt(id_gflops)
            );
        }
    }
    println!();
    println!("load after: {}", load());
}
