//! The decode path's fixed costs, counted: a decode-shaped `mul_mat_id`
//! (8 of 32 experts, one token), `mul_mat` (one column), and the small ops
//! around them in a MoE layer (norm, router softmax and top-k, weight
//! gather and normalization, SwiGLU, add, the f16 store into a cache view)
//! allocate nothing per op once warm, and the pool's sleeps are counted
//! (printed).
//! Results are checked against a single-thread run, so the counting runs
//! are real ops.
//!
//! One test in this binary: the allocation counter is process-wide.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ggml_core::quants::cpu_traits;
use ggml_core::{
    Backend, BackendStream, BufferUsage, CpuBackend, GgmlType, Graph, TensorData, TensorId,
};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn alloc_all(g: &mut Graph, be: &dyn Backend) {
    let ids: Vec<TensorId> = g
        .ids()
        .filter(|&t| g.tensor(t).view_src.is_none())
        .collect();
    let total: usize = ids
        .iter()
        .map(|&t| g.tensor(t).nbytes().next_multiple_of(64))
        .sum();
    let buf = be.alloc_buffer(total, BufferUsage::Compute).unwrap();
    let mut off = 0;
    for t in ids {
        let n = g.tensor(t).nbytes().next_multiple_of(64);
        g.tensor_mut(t).data = Some(TensorData {
            buffer: Arc::clone(&buf),
            offset: off,
        });
        off += n;
    }
}

fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn decode_ops_allocate_nothing() {
    const K: usize = 512;
    const M: usize = 256;
    const E: usize = 32;
    const USED: usize = 8;
    let ty = GgmlType::Q4K;
    let setup = CpuBackend::new(1);
    let mut g = Graph::new();
    let a = g.new_tensor_3d(ty, K as i64, M as i64, E as i64);
    let b = g.new_tensor_3d(GgmlType::F32, K as i64, 1, 1);
    let ids = g.new_tensor_2d(GgmlType::I32, USED as i64, 1);
    let w = g.new_tensor_2d(ty, K as i64, M as i64);
    let x = g.new_tensor_2d(GgmlType::F32, K as i64, 1);
    let moe = g.mul_mat_id(a, b, ids);
    let mm = g.mul_mat(w, x);
    g.build_forward_expand(moe);
    g.build_forward_expand(mm);
    // the small ops of a MoE layer around the products
    let nw = g.new_tensor_1d(GgmlType::F32, K as i64);
    let router = g.new_tensor_2d(GgmlType::F32, K as i64, E as i64);
    let normed = g.rms_norm(x, 1e-6);
    let h = g.mul(normed, nw);
    let logits = g.mul_mat(router, h);
    let probs = g.soft_max_ext(logits, None, 1.0, 0.0);
    let sel = g.top_k(probs, USED as i32);
    let probs3 = g.reshape_3d(probs, 1, E as i64, 1);
    let picked = g.get_rows(probs3, sel);
    let picked2 = g.reshape_2d(picked, USED as i64, 1);
    let total = g.sum_rows(picked2);
    let weights = g.div(picked2, total);
    let up = g.mul_mat_id(a, b, ids);
    let act = g.swiglu_split(moe, up);
    let sum = g.add(mm, mm);
    let cache = g.new_tensor_2d(GgmlType::F16, M as i64, 4);
    let slot = g.view_2d(cache, M as i64, 1, M * 2, 2 * M * 2);
    let store = g.cpy(sum, slot);
    for t in [weights, act, store] {
        g.build_forward_expand(t);
    }
    alloc_all(&mut g, &setup);
    let tr = cpu_traits(ty).unwrap();
    let row = ty.row_size(K as u64).unwrap();
    let mut wb = vec![0u8; row * M * E];
    for (r, dst) in wb.chunks_exact_mut(row).enumerate() {
        (tr.from_float)(&values(r as u64 % 17 + 1, K), dst);
    }
    g.write_bytes(a, &wb).unwrap();
    g.write_bytes(w, &wb[..row * M]).unwrap();
    g.write_f32(b, &values(99, K)).unwrap();
    g.write_f32(x, &values(98, K)).unwrap();
    g.write_f32(nw, &values(97, K)).unwrap();
    g.write_f32(router, &values(96, K * E)).unwrap();
    let nodes = g.nodes().to_vec();
    let id_sets: Vec<Vec<i32>> = (0..8)
        .map(|i| (0..USED as i32).map(|j| (j * 3 + i) % E as i32).collect())
        .collect();

    // every node's bytes, to compare runs
    let outputs = |g: &Graph| -> Vec<Vec<u8>> {
        nodes
            .iter()
            .filter(|&&n| g.tensor(n).view_src.is_none())
            .map(|&n| g.read_bytes(n).unwrap())
            .chain([g.read_bytes(cache).unwrap()])
            .collect()
    };
    // single-thread reference outputs per id set
    let one = CpuBackend::new(1);
    let reference: Vec<Vec<Vec<u8>>> = id_sets
        .iter()
        .map(|s| {
            g.write_i32(ids, s).unwrap();
            one.compute(&g, &nodes).unwrap();
            outputs(&g)
        })
        .collect();

    let two = CpuBackend::new(2);
    // warm-up: per-thread plans and scratch grow to size
    for s in &id_sets {
        g.write_i32(ids, s).unwrap();
        two.compute(&g, &nodes).unwrap();
    }
    const ROUNDS: usize = 4;
    let ops = (nodes.len() * id_sets.len() * ROUNDS) as u64;
    let stats0 = two.pool_stats();
    let mut allocs = 0;
    for (s, want) in (0..ROUNDS).flat_map(|_| id_sets.iter().zip(&reference)) {
        g.write_i32(ids, s).unwrap();
        let before = ALLOCS.load(Ordering::Relaxed);
        two.compute(&g, &nodes).unwrap();
        allocs += ALLOCS.load(Ordering::Relaxed) - before;
        assert!(&outputs(&g) == want, "2 threads = 1 thread, every op");
    }
    let stats = two.pool_stats();
    // none per op: a worker's buffers may still grow the first time it
    // takes a slot of some op (which thread takes which slot is the
    // scheduler's choice), a few times per thread at most
    assert!(
        allocs <= 8,
        "{allocs} allocations in {ops} decode-shaped ops"
    );
    assert!(stats.runs > stats0.runs, "the products used both threads");
    // sleeps are counted, not asserted: on a shared machine a descheduled
    // worker makes the caller sleep however the pool is written
    eprintln!(
        "{ops} ops: {allocs} allocations; pool runs {}, caller sleeps {}, worker sleeps {}",
        stats.runs - stats0.runs,
        stats.caller_sleeps - stats0.caller_sleeps,
        stats.worker_sleeps - stats0.worker_sleeps
    );
}
