//! One routed-matmul graph over `SIM0` + CPU, with the matrices of the
//! `mul_mat_id` in host memory: prints the plan and the bytes copied to the
//! device, first with full copies, then with a small copy hook that copies
//! only the byte ranges (slices along dim 2) that the consumer's ids name.
//!
//! `cargo run -p ggml-sched --example offload`

use std::sync::Arc;

use ggml_core::cpu::MappedBuffer;
use ggml_core::{Backend, CpuBackend, GgmlType, Graph, Op, SimBackend, TensorData};
use ggml_sched::{CopyHook, HookCtx, HookError, Scheduler};

const K: i64 = 64; // row length
const M: i64 = 128; // rows per slice
const N_SLICE: i64 = 16; // slices of the 3-D weight
const N_USED: i64 = 2; // slices used per column
const T: i64 = 4; // columns (tokens)

/// Copies only the slices (dim 2) named by the ids of the `mul_mat_id` nodes
/// that read the destination; declines anything else.
struct SliceHook;

impl CopyHook for SliceHook {
    fn copy_input(&mut self, cx: &mut HookCtx<'_>) -> Result<bool, HookError> {
        let g = cx.graph();
        let d = g.tensor(cx.dst()).clone();
        let mut used = vec![false; d.ne[2] as usize];
        for c in cx.consumers() {
            let ct = g.tensor(c);
            if ct.op != Op::MulMatId || ct.src[0] != cx.dst() {
                return Ok(false);
            }
            let raw = cx.read_tensor(ct.src[2])?;
            for b in raw.chunks_exact(4) {
                let id = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                let slot = usize::try_from(id)
                    .ok()
                    .filter(|&i| i < used.len())
                    .ok_or_else(|| HookError::msg(format!("id {id} out of range")))?;
                used[slot] = true;
            }
        }
        // copy runs of consecutive used slices (plus the backend's overhang)
        let (total, stride) = (cx.nbytes(), d.nb[2]);
        let mut i = 0;
        while i < used.len() {
            if !used[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < used.len() && used[i] {
                i += 1;
            }
            let begin = start * stride;
            let end = (i * stride + cx.read_overhang()).min(total);
            cx.copy_range(begin, end - begin)?;
        }
        Ok(true)
    }
}

fn build(w: Arc<dyn ggml_core::Buffer>) -> (Graph, ggml_core::TensorId, ggml_core::TensorId) {
    let mut g = Graph::new();
    let x = g.new_tensor_2d(GgmlType::F32, K, T);
    g.set_name(x, "x");
    g.set_input(x);
    let route = g.new_tensor_2d(GgmlType::F32, K, N_SLICE);
    g.set_name(route, "route.weight");
    let up = g.new_tensor_3d(GgmlType::F32, K, M, N_SLICE);
    g.set_name(up, "up.weight");
    let bytes_route = g.tensor(route).nbytes();
    for (id, off) in [(route, 0), (up, bytes_route)] {
        let t = g.tensor_mut(id);
        t.flags.weight = true;
        t.data = Some(TensorData {
            buffer: w.clone(),
            offset: off,
        });
    }
    let logits = g.mul_mat(route, x);
    g.set_name(logits, "logits");
    let ids = g.top_k(logits, N_USED as i32);
    g.set_name(ids, "ids");
    let xr = g.reshape_3d(x, K, 1, T);
    let y = g.mul_mat_id(up, xr, ids);
    g.set_name(y, "up");
    let a = g.silu(y);
    g.set_name(a, "act");
    let s = g.scale(a, 0.5);
    g.set_name(s, "out");
    g.set_output(s);
    g.build_forward_expand(s);
    (g, x, s)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // weights in a read-only host buffer, as a mapped GGUF file would be
    let n_w = (K * N_SLICE + K * M * N_SLICE) as usize;
    let vals: Vec<u8> = (0..n_w)
        .flat_map(|i| (((i * 7919) % 17) as f32 / 17.0 - 0.5).to_le_bytes())
        .collect();
    let w: Arc<dyn ggml_core::Buffer> = Arc::new(MappedBuffer::new(Arc::new(vals)));
    let xs: Vec<f32> = (0..K * T).map(|i| ((i % 11) as f32 - 5.0) / 5.0).collect();

    let sim = Arc::new(SimBackend::new(0, 2).with_offload_min_batch(1));
    let cpu = Arc::new(CpuBackend::new(2));
    let backends: Vec<Arc<dyn Backend>> = vec![sim.clone(), cpu];
    let mut results = Vec::new();
    for with_hook in [false, true] {
        let mut sched = Scheduler::new(backends.clone())?;
        if with_hook {
            sched.set_copy_hook(Box::new(SliceHook));
        }
        let (mut g, x, out) = build(w.clone());
        sched.alloc_graph(&mut g)?;
        g.write_f32(x, &xs)?;
        let st = sched.compute(&mut g)?;
        println!(
            "=== {} ===",
            if with_hook {
                "with the slice hook"
            } else {
                "full copies"
            }
        );
        print!("{}", sched.plan_dump());
        for p in &st.pairs {
            println!(
                "{} -> {}: {} bytes by the scheduler, {} bytes by the hook",
                p.src, p.dst, p.sched_bytes, p.hook_bytes
            );
        }
        println!(
            "hook handled {}, declined {}; compute memory {:?}\n",
            st.hook_handled,
            st.hook_declined,
            sched.compute_buffer_sizes()
        );
        results.push(g.read_f32(out)?);
    }
    assert_eq!(results[0], results[1], "the hook changed the result");
    println!("results identical; out[0..4] = {:?}", &results[0][..4]);
    Ok(())
}
