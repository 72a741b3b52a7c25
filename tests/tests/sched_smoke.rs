//! Quick scheduler checks on fixed graphs (elementwise ops only).

use std::sync::Arc;

use ggml_core::{Backend, BufferUsage, CpuBackend, GgmlType, Graph, SimBackend, TensorData};
use ggml_sched::Scheduler;

#[test]
fn add_with_weight_on_device() {
    let sim: Arc<dyn Backend> = Arc::new(SimBackend::new(0, 1));
    let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new(1));
    let mut g = Graph::new();
    let x = g.new_tensor_2d(GgmlType::F32, 4, 3);
    g.set_input(x);
    g.set_name(x, "x");
    let w = g.new_tensor_1d(GgmlType::F32, 4);
    g.set_name(w, "w");
    let wbuf = sim.alloc_buffer(16, BufferUsage::Weights).unwrap();
    g.tensor_mut(w).data = Some(TensorData { buffer: wbuf, offset: 0 });
    g.write_f32(w, &[1., 2., 3., 4.]).unwrap();
    let a = g.add(x, w);
    g.set_name(a, "a");
    let m = g.mul(a, a);
    g.set_name(m, "m");
    let o = g.sub(m, x);
    g.set_name(o, "o");
    g.set_output(o);
    g.build_forward_expand(o);
    let mut s = Scheduler::new(vec![sim, cpu]).unwrap();
    s.alloc_graph(&mut g).unwrap();
    let xs: Vec<f32> = (0..12).map(|i| i as f32).collect();
    g.write_f32(x, &xs).unwrap();
    let st = s.compute(&mut g).unwrap();
    println!("{}", s.plan_dump());
    println!("{st:?}");
    let out = g.read_f32(o).unwrap();
    let want: Vec<f32> = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let a = v + [1., 2., 3., 4.][i % 4];
            a * a - v
        })
        .collect();
    assert_eq!(out, want);
    assert!(!st.plan_reused);
    let st2 = s.compute(&mut g).unwrap();
    assert!(st2.plan_reused);
    assert_eq!(g.read_f32(o).unwrap(), want);
}
