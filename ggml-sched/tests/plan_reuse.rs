//! A decode's graphs differ only in where the new token's row is stored (a
//! view of the KV cache one cell further on): the scheduler plans once and
//! reuses the plan, and each graph still writes and reads its own cell.

use std::sync::Arc;

use ggml_core::cpu::HostBuffer;
use ggml_core::{
    Backend, BackendDevice, Buffer, BufferUsage, CpuBackend, GgmlType, Graph, SimBackend,
    TensorData, TensorId,
};
use ggml_sched::Scheduler;

const ROW: usize = 8;
const CELLS: usize = 6;

/// One "token": `x * 2` stored at cell `pos` of the cache (caller memory),
/// then the sums of every cell's row, on the device (a product with a row
/// of ones in device memory, reading a copy of the whole cache view).
fn token_graph(
    cache: &Arc<dyn Buffer>,
    ones: &Arc<dyn Buffer>,
    pos: usize,
) -> (Graph, [TensorId; 3]) {
    let mut g = Graph::new();
    let kc = g.new_tensor_2d(GgmlType::F32, ROW as i64, CELLS as i64);
    g.tensor_mut(kc).data = Some(TensorData {
        buffer: Arc::clone(cache),
        offset: 0,
    });
    let x = g.new_tensor_2d(GgmlType::F32, ROW as i64, 1);
    g.set_input(x);
    let y = g.scale(x, 2.0);
    let dst = g.view_2d(kc, ROW as i64, 1, ROW * 4, pos * ROW * 4);
    let store = g.cpy(y, dst);
    g.build_forward_expand(store);
    let all = g.view_2d(kc, ROW as i64, CELLS as i64, ROW * 4, 0);
    let w = g.new_tensor_2d(GgmlType::F32, ROW as i64, 1);
    g.tensor_mut(w).flags.weight = true;
    g.tensor_mut(w).data = Some(TensorData {
        buffer: Arc::clone(ones),
        offset: 0,
    });
    let sums = g.mul_mat(w, all);
    g.set_output(sums);
    g.build_forward_expand(sums);
    (g, [x, store, sums])
}

#[test]
fn graphs_that_differ_in_view_offsets_share_one_plan() {
    let cache: Arc<dyn Buffer> =
        Arc::new(HostBuffer::new(ROW * CELLS * 4, BufferUsage::Compute).unwrap());
    let sim = SimBackend::new(0, 1);
    let ones = sim.alloc_buffer(ROW * 4, BufferUsage::Weights).unwrap();
    ones.write(0, &[1f32; ROW].map(f32::to_le_bytes).concat())
        .unwrap();
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(sim), Arc::new(CpuBackend::new(2))];
    let mut sched = Scheduler::new(backends).unwrap();
    let mut want = vec![0f32; CELLS];
    for pos in 0..CELLS {
        let (mut g, [x, store, sums]) = token_graph(&cache, &ones, pos);
        sched.alloc_graph(&mut g).unwrap();
        let xs: Vec<f32> = (0..ROW).map(|i| (pos * 10 + i) as f32).collect();
        g.write_f32(x, &xs).unwrap();
        sched.compute(&mut g).unwrap();
        want[pos] = xs.iter().sum::<f32>() * 2.0;
        assert_eq!(g.read_f32(sums).unwrap(), want, "token {pos}");
        assert_eq!(sched.n_plans(), 1, "token {pos} re-planned");
        assert_eq!(sched.node_backend(sums), Some("SIM0"));
        assert_eq!(sched.node_backend(store), Some("CPU"));
    }
    // the cache holds every token's row at its own cell
    let mut bytes = vec![0u8; ROW * CELLS * 4];
    cache.read(0, &mut bytes).unwrap();
    let got: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    for (pos, row) in got.chunks(ROW).enumerate() {
        let xs: Vec<f32> = (0..ROW).map(|i| (pos * 10 + i) as f32 * 2.0).collect();
        assert_eq!(row, xs.as_slice(), "cell {pos}");
    }
    // a graph of another structure is planned anew
    let mut g = Graph::new();
    let x = g.new_tensor_2d(GgmlType::F32, ROW as i64, 2);
    g.set_input(x);
    let y = g.scale(x, 3.0);
    g.set_output(y);
    g.build_forward_expand(y);
    sched.alloc_graph(&mut g).unwrap();
    g.write_f32(x, &[1.0; 2 * ROW]).unwrap();
    sched.compute(&mut g).unwrap();
    assert_eq!(g.read_f32(y).unwrap(), vec![3.0; 2 * ROW]);
    assert_eq!(sched.n_plans(), 2);
}

/// The cache's rows as f32.
fn cache_rows(cache: &Arc<dyn Buffer>) -> Vec<f32> {
    let mut bytes = vec![0u8; ROW * CELLS * 4];
    cache.read(0, &mut bytes).unwrap();
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn one_kept_graph_computed_again_with_its_view_moved_plans_once() {
    let cache: Arc<dyn Buffer> =
        Arc::new(HostBuffer::new(ROW * CELLS * 4, BufferUsage::Compute).unwrap());
    let sim = SimBackend::new(0, 1);
    let ones = sim.alloc_buffer(ROW * 4, BufferUsage::Weights).unwrap();
    ones.write(0, &[1f32; ROW].map(f32::to_le_bytes).concat())
        .unwrap();
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(sim), Arc::new(CpuBackend::new(2))];
    let mut sched = Scheduler::new(backends).unwrap();
    // one graph, built once: each token rebinds its input and moves the
    // store's view to its cell
    let (mut g, [x, store, sums]) = token_graph(&cache, &ones, 0);
    let dst = g
        .tensor(store)
        .view_src
        .expect("cpy is a view of its destination");
    let mut want = vec![0f32; CELLS];
    for pos in 0..CELLS {
        g.tensor_mut(dst).view_offs = pos * ROW * 4;
        if pos == 0 {
            sched.alloc_graph(&mut g).unwrap();
        }
        let xs: Vec<f32> = (0..ROW).map(|i| (pos * 10 + i) as f32).collect();
        g.write_f32(x, &xs).unwrap();
        let st = sched.compute_again(&mut g).unwrap();
        assert_eq!(st.n_splits, 2, "token {pos}");
        assert_eq!(st.splits.len(), 2, "token {pos}");
        assert!(
            st.sched_bytes() > 0,
            "token {pos}: the cache view is copied"
        );
        want[pos] = xs.iter().sum::<f32>() * 2.0;
        assert_eq!(g.read_f32(sums).unwrap(), want, "token {pos}");
        assert_eq!(sched.n_plans(), 1, "token {pos} re-planned");
    }
    let got = cache_rows(&cache);
    for (pos, row) in got.chunks(ROW).enumerate() {
        let xs: Vec<f32> = (0..ROW).map(|i| (pos * 10 + i) as f32 * 2.0).collect();
        assert_eq!(row, xs.as_slice(), "cell {pos}");
    }

    // another graph of the same size is not the kept one: it is planned
    // and allocated (its tensors get memory), not run on the kept
    // graph's bindings
    let (mut g2, [x2, _, sums2]) = token_graph(&cache, &ones, 1);
    // (the kept graph holds the copy the scheduler added: one more leaf)
    g2.new_tensor_1d(GgmlType::F32, 1);
    assert_eq!((g2.len(), g2.nodes().len()), (g.len(), g.nodes().len()));
    let input: Arc<dyn Buffer> = Arc::new(HostBuffer::new(ROW * 4, BufferUsage::Compute).unwrap());
    g2.tensor_mut(x2).data = Some(TensorData {
        buffer: input,
        offset: 0,
    });
    g2.write_f32(x2, &[0.5; ROW]).unwrap();
    sched.compute_again(&mut g2).unwrap();
    want[1] = 0.5 * 2.0 * ROW as f32;
    assert_eq!(g2.read_f32(sums2).unwrap(), want);
    // and the kept graph, after another graph ran, is given its plan and
    // memory again before it runs
    g.tensor_mut(dst).view_offs = 2 * ROW * 4;
    g.write_f32(x, &[0.25; ROW]).unwrap();
    sched.compute_again(&mut g).unwrap();
    want[2] = 0.25 * 2.0 * ROW as f32;
    assert_eq!(g.read_f32(sums).unwrap(), want);
    // a clone is another graph too
    let mut g3 = g.clone();
    assert_ne!(g3.uid(), g.uid());
    g3.write_f32(x, &[1.0; ROW]).unwrap();
    sched.compute_again(&mut g3).unwrap();
    want[2] = 2.0 * ROW as f32;
    assert_eq!(g3.read_f32(sums).unwrap(), want);
}
