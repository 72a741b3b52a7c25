//! Weight-bytes throughput of every type's `vec_dot` (and its scalar
//! reference) over a 2048 × 768 matrix, row by row against one activation
//! row, beside a plain memory-read baseline (sum of a 64 MiB u64 buffer).
//!
//! Then, prompt-shaped: 64 rows of 2048 against 8 activation columns (all
//! in L2), in GOP/s, with `vec_dot` per (row, column) and, for the types
//! that have one, with `vec_dot_cols` (the row unpacked once for the 8
//! columns), `vec_dot_tile` (register tiles of 2 rows × 4 columns) and
//! `gemm` (the 8 columns packed into a panel, packing included).
//! Best of many short runs, so a busy machine mostly shows the kernel's own
//! speed.
//!
//! Run: `cargo bench -p ggml-core --bench quant_dot [-- [--prompt-only] [TYPE...]]`
//! (types filter the prompt-shaped table).

use std::hint::black_box;
use std::time::{Duration, Instant};

use ggml_core::quants::{cpu_traits, simd_available};
use ggml_core::GgmlType;

const ROWS: usize = 2048;
const COLS: usize = 768;

fn rand_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Best-of-runs GB/s of `f`, which reads `bytes` bytes per call.
fn gbps(bytes: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut best = Duration::MAX;
    let mut total = Duration::ZERO;
    while total < Duration::from_millis(300) {
        let t = Instant::now();
        f();
        let e = t.elapsed();
        best = best.min(e);
        total += e;
    }
    bytes as f64 / best.as_secs_f64() / 1e9
}

/// GOP/s (2 per multiply-add) of 64 rows × 8 columns of length 2048, with
/// `vec_dot` per pair, and with `vec_dot_cols` and `vec_dot_tile` where the
/// type has them.
fn prompt_shaped(ty: GgmlType) -> (f64, Option<f64>, Option<f64>, Option<f64>) {
    const K: usize = 2048;
    const R: usize = 64;
    const C: usize = ggml_core::quants::VEC_DOT_COLS_MAX;
    let tr = cpu_traits(ty).unwrap();
    let rb = ty.row_size(K as u64).unwrap();
    let w = rand_f32(K, 3);
    let mut q = vec![0u8; rb * R];
    let mut first = vec![0u8; rb];
    (tr.from_float)(&w, &mut first);
    for row in q.chunks_exact_mut(rb) {
        row.copy_from_slice(&first);
    }
    let vt = tr.vec_dot_type;
    let ys: Vec<Vec<u8>> = (0..C)
        .map(|c| {
            let mut y = vec![0u8; vt.row_size(K as u64).unwrap()];
            (cpu_traits(vt).unwrap().from_float)(&rand_f32(K, 10 + c as u64), &mut y);
            y
        })
        .collect();
    let refs: Vec<&[u8]> = ys.iter().map(|y| y.as_slice()).collect();
    // `gbps(1, f)` is 1e-9 / seconds, so `* ops` gives GOP/s
    let ops = (2 * K * R * C) as f64;
    let single = gbps(1, || {
        let mut s = 0f32;
        for row in q.chunks_exact(rb) {
            for y in &refs {
                s += (tr.vec_dot)(K, row, y);
            }
        }
        black_box(s);
    }) * ops;
    let cols = tr.vec_dot_cols.map(|f| {
        gbps(1, || {
            let mut out = [0f32; C];
            let mut s = 0f32;
            for row in q.chunks_exact(rb) {
                f(K, row, &refs, &mut out);
                s += out[0];
            }
            black_box(s);
        }) * ops
    });
    let rows: Vec<&[u8]> = q.chunks_exact(rb).collect();
    let tile = tr.vec_dot_tile.map(|f| {
        const TR: usize = ggml_core::quants::VEC_DOT_TILE_ROWS;
        gbps(1, || {
            let mut out = [0f32; TR * C];
            let mut s = 0f32;
            for xs in rows.chunks_exact(TR) {
                f(K, xs, &refs, &mut out);
                s += out[0];
            }
            black_box(s);
        }) * ops
    });
    let gemm = tr.gemm.map(|g| {
        let mut panel = vec![0u8; (g.panel_bytes)(K)];
        gbps(1, || {
            (g.pack)(K, &refs, &mut panel);
            let mut out = [0f32; ggml_core::quants::GEMM_COLS];
            let mut s = 0f32;
            for row in q.chunks_exact(rb) {
                (g.run)(K, row, &panel, &mut out);
                s += out[0];
            }
            black_box(s);
        }) * ops
    });
    (single, cols, tile, gemm)
}

fn main() {
    let buf: Vec<u64> = (0..(64 << 20) / 8).map(|i| i as u64).collect();
    let mem = gbps(buf.len() * 8, || {
        black_box(buf.iter().fold(0u64, |a, &b| a.wrapping_add(b)));
    });
    println!(
        "memory read (64 MiB u64 sum): {mem:.1} GB/s; AVX2 kernels: {}",
        simd_available()
    );
    println!("{:8} {:>10} {:>10} {:>10}", "type", "MiB", "GB/s", "scalar");

    let w = rand_f32(ROWS * COLS, 1);
    let a = rand_f32(COLS, 2);
    let decode = !std::env::args().any(|a| a == "--prompt-only");
    for ty in GgmlType::ALL.into_iter().filter(|_| decode) {
        let Some(tr) = cpu_traits(ty) else { continue };
        let rb = ty.row_size(COLS as u64).unwrap();
        let mut q = vec![0u8; rb * ROWS];
        for (r, row) in q.chunks_exact_mut(rb).enumerate() {
            (tr.from_float)(&w[r * COLS..(r + 1) * COLS], row);
        }
        let vt = tr.vec_dot_type;
        let mut y = vec![0u8; vt.row_size(COLS as u64).unwrap()];
        (cpu_traits(vt).unwrap().from_float)(&a, &mut y);
        let run = |dot: fn(usize, &[u8], &[u8]) -> f32| {
            gbps(q.len(), || {
                let mut s = 0f32;
                for row in q.chunks_exact(rb) {
                    s += dot(COLS, row, &y);
                }
                black_box(s);
            })
        };
        let fast = run(tr.vec_dot);
        let scalar = run(tr.vec_dot_scalar);
        println!(
            "{:8} {:>10.2} {:>10.1} {:>10.1}",
            ty.name(),
            q.len() as f64 / (1 << 20) as f64,
            fast,
            scalar
        );
    }
    println!();
    println!("prompt-shaped, 64 rows x 8 columns of 2048, 1 thread, GOP/s");
    println!(
        "{:8} {:>10} {:>14} {:>14} {:>10}",
        "type", "vec_dot", "vec_dot_cols", "vec_dot_tile", "gemm"
    );
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-') && a != "bench")
        .map(|a| a.to_lowercase())
        .collect();
    for ty in GgmlType::ALL {
        if cpu_traits(ty).is_none()
            || !(only.is_empty() || only.contains(&ty.name().to_lowercase()))
        {
            continue;
        }
        let (single, cols, tile, gemm) = prompt_shaped(ty);
        let show = |x: Option<f64>| x.map_or("-".into(), |c| format!("{c:.1}"));
        println!(
            "{:8} {:>10.1} {:>14} {:>14} {:>10}",
            ty.name(),
            single,
            show(cols),
            show(tile),
            show(gemm)
        );
    }
}
