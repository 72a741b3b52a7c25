//! Build a small graph, run it on the CPU backend and print the result.
//!
//! `cargo run -p ggml-core --example simple`

use std::sync::Arc;

use ggml_core::{
    BackendDevice, BackendStream, BufferUsage, CpuBackend, GgmlType, Graph, TensorData,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cpu = CpuBackend::new(2);
    let mut g = Graph::new();
    let a = g.new_tensor_2d(GgmlType::F32, 4, 2);
    let b = g.new_tensor_1d(GgmlType::F32, 4);
    let sum = g.add(a, b); // b broadcasts over the rows of a
    let out = g.mul(sum, sum);
    g.build_forward_expand(out);

    // one compute buffer for every tensor, laid out back to back
    let ids: Vec<_> = g.ids().collect();
    let total: usize = ids
        .iter()
        .map(|&t| g.tensor(t).nbytes().next_multiple_of(64))
        .sum();
    let buf = cpu.alloc_buffer(total, BufferUsage::Compute)?;
    let mut offset = 0;
    for t in ids {
        let n = g.tensor(t).nbytes().next_multiple_of(64);
        g.tensor_mut(t).data = Some(TensorData {
            buffer: Arc::clone(&buf),
            offset,
        });
        offset += n;
    }
    g.write_f32(a, &[1., 2., 3., 4., 5., 6., 7., 8.])?;
    g.write_f32(b, &[0.5, 0.5, -1., -1.])?;
    let nodes = g.nodes().to_vec();
    cpu.compute(&g, &nodes)?;
    println!("(a + b)^2 = {:?}", g.read_f32(out)?);
    Ok(())
}
