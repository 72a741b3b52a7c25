//! The smallest backend the scheduler runs a graph on: a host backend that
//! implements the six required methods (five of `BackendDevice`, one of
//! `BackendStream`) and `impl Backend for Mini {}`, taking every default:
//! copies are plain buffer reads and writes, events are complete at once,
//! and it has no diagnostics (`Backend::diagnostics` is `None`).
//!
//! It runs a graph alone (as the host backend) and beside a simulated
//! device (whose inputs it copies in and whose outputs it reads back), with
//! the CPU backend's results bit for bit.

use std::sync::Arc;

use ggml_core::cpu::ops::{self, ComputeCtx};
use ggml_core::cpu::{HostBuffer, MappedBuffer, ThreadPool};
use ggml_core::{
    Backend, BackendDevice, BackendError, BackendStream, Buffer, BufferUsage, CpuBackend, GgmlType,
    Graph, SimBackend, TensorData, TensorId,
};
use ggml_sched::Scheduler;

/// A one-thread host backend: six methods and the defaults.
struct Mini {
    pool: ThreadPool,
}

impl BackendDevice for Mini {
    fn name(&self) -> &str {
        "MINI"
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(
        &self,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Arc<dyn Buffer>, BackendError> {
        Ok(Arc::new(HostBuffer::new(size, usage)?))
    }
    fn can_use_buffer(&self, buf: &dyn Buffer) -> bool {
        buf.is_host()
    }
    fn supports_op(&self, g: &Graph, node: TensorId) -> bool {
        ops::supports(g, node)
    }
}

impl BackendStream for Mini {
    fn compute(&self, g: &Graph, nodes: &[TensorId]) -> Result<(), BackendError> {
        let accept = |b: &dyn Buffer| b.is_host();
        let cx = ComputeCtx {
            pool: &self.pool,
            g,
            backend: "MINI",
            accept: &accept,
        };
        nodes.iter().try_for_each(|&n| ops::compute_node(&cx, n))
    }
}

impl Backend for Mini {}

fn mini() -> Arc<dyn Backend> {
    Arc::new(Mini {
        pool: ThreadPool::new(1),
    })
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `out = softmax(0.5 w x + w x)` with `w` a host weight and `x` 3
/// columns of 8: a matmul, a scale, an add, a softmax.
fn graph() -> (Graph, TensorId, TensorId) {
    let (k, m, t) = (8usize, 4usize, 3usize);
    let w: Vec<f32> = (0..k * m).map(|i| (i % 7) as f32 * 0.25 - 0.75).collect();
    let host: Arc<dyn Buffer> = Arc::new(MappedBuffer::new(Arc::new(f32_bytes(&w))));
    let mut g = Graph::new();
    let wt = g.new_tensor_2d(GgmlType::F32, k as i64, m as i64);
    g.tensor_mut(wt).flags.weight = true;
    g.tensor_mut(wt).data = Some(TensorData {
        buffer: host,
        offset: 0,
    });
    let x = g.new_tensor_2d(GgmlType::F32, k as i64, t as i64);
    g.set_input(x);
    let y = g.mul_mat(wt, x);
    let s = g.scale(y, 0.5);
    let a = g.add(s, y);
    let out = g.soft_max_ext(a, None, 1.0, 0.0);
    g.set_output(out);
    g.build_forward_expand(out);
    (g, x, out)
}

fn run(backends: Vec<Arc<dyn Backend>>) -> (Vec<f32>, Vec<String>) {
    let (mut g, x, out) = graph();
    let mut s = Scheduler::new(backends).unwrap();
    s.alloc_graph(&mut g).unwrap();
    let xs: Vec<f32> = (0..24).map(|i| (i as f32 - 11.0) / 6.0).collect();
    g.write_f32(x, &xs).unwrap();
    s.compute(&mut g).unwrap();
    let placed = g
        .nodes()
        .iter()
        .filter_map(|&n| s.node_backend(n).map(str::to_string))
        .collect();
    (g.read_f32(out).unwrap(), placed)
}

#[test]
fn the_minimal_backend_has_no_diagnostics() {
    assert!(mini().diagnostics().is_none());
    assert!(CpuBackend::new(1).diagnostics().is_some());
}

#[test]
fn the_scheduler_runs_a_graph_on_the_minimal_backend_alone() {
    let (want, on_cpu) = run(vec![Arc::new(CpuBackend::new(1))]);
    let (got, on_mini) = run(vec![mini()]);
    assert!(on_cpu.iter().all(|b| b == "CPU"), "{on_cpu:?}");
    assert!(!on_mini.is_empty() && on_mini.iter().all(|b| b == "MINI"));
    assert_eq!(got, want);
}

#[test]
fn the_minimal_backend_is_the_host_beside_a_device() {
    let sim = || -> Arc<dyn Backend> { Arc::new(SimBackend::new(0, 1).with_offload_min_batch(1)) };
    let (want, _) = run(vec![sim(), Arc::new(CpuBackend::new(1))]);
    let (got, placed) = run(vec![sim(), mini()]);
    // the device computes the graph; the minimal host backend owns the
    // inputs and outputs (host memory) it copies in and reads back
    assert!(placed.iter().any(|b| b == "SIM0"), "{placed:?}");
    assert_eq!(got, want);
}
