//! A node flagged `host` runs on the CPU even where a device would claim
//! it (`offload_op` for host weights), with the same result; unflagged,
//! the device takes it.

use std::sync::Arc;

use ggml_core::cpu::MappedBuffer;
use ggml_core::{Backend, CpuBackend, GgmlType, Graph, SimBackend, TensorData};
use ggml_sched::Scheduler;

fn run(flag: bool) -> (String, Vec<f32>) {
    let (k, m, t) = (8usize, 4usize, 3usize);
    let w: Vec<f32> = (0..k * m).map(|i| (i % 5) as f32 - 2.0).collect();
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let host: Arc<dyn ggml_core::Buffer> = Arc::new(MappedBuffer::new(Arc::new(bytes)));
    let mut g = Graph::new();
    let wt = g.new_tensor_2d(GgmlType::F32, k as i64, m as i64);
    g.tensor_mut(wt).flags.weight = true;
    g.tensor_mut(wt).data = Some(TensorData {
        buffer: host,
        offset: 0,
    });
    let xt = g.new_tensor_2d(GgmlType::F32, k as i64, t as i64);
    g.set_input(xt);
    let y = g.mul_mat(wt, xt);
    g.tensor_mut(y).flags.host = flag;
    let out = g.scale(y, 2.0);
    g.set_output(out);
    g.build_forward_expand(out);
    let sim = SimBackend::new(0, 1).with_offload_min_batch(1);
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(sim), Arc::new(CpuBackend::new(1))];
    let mut sched = Scheduler::new(backends).unwrap();
    sched.alloc_graph(&mut g).unwrap();
    let x: Vec<f32> = (0..k * t).map(|i| i as f32 / 8.0).collect();
    g.write_f32(xt, &x).unwrap();
    sched.compute(&mut g).unwrap();
    let b = sched.node_backend(y).unwrap().to_string();
    (b, g.read_f32(out).unwrap())
}

#[test]
fn a_host_flagged_node_stays_on_the_cpu() {
    let (dev, a) = run(false);
    let (cpu, b) = run(true);
    assert_eq!(dev, "SIM0");
    assert_eq!(cpu, "CPU");
    assert_eq!(a, b);
}
