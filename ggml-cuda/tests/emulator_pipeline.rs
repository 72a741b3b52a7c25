//! The backend's pipeline on the emulated device: graph capture, replay
//! and in-place update through the driver interface; the out-of-range-id
//! flag read at the synchronize that ends a graph (naming the op kind), not
//! inside it; pooled events; two copy streams and reads after compute that
//! wait for one event. Runs everywhere: the emulator is enabled
//! programmatically.

use std::sync::{Arc, Mutex, MutexGuard};

use ggml_core::{
    BackendDevice, BackendDiagnostics, BackendStream, Buffer, BufferUsage, GgmlType, Graph,
    PipelineCounts, Stream, TensorData, TensorId,
};
use ggml_cuda::{emulator, CudaBackend};

/// Tests here change the emulator's configuration: one at a time.
fn setup() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let g = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    emulator::enable();
    let mut c = emulator::config();
    c.seed = Some(7);
    c.hazards = true;
    c.drop_wait = None;
    emulator::set_config(c);
    g
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn counts(be: &CudaBackend) -> PipelineCounts {
    be.pipeline_counters()
        .expect("CUDA keeps counters")
        .snapshot()
}

/// `out = (((a + b) * b) + b) * b` over F32 `[n]`: four launches. `a`,
/// `b`, the three intermediates and `out` at the given byte offsets of
/// `buf`.
fn chain(buf: &Arc<dyn Buffer>, n: i64, offs: [usize; 6]) -> (Graph, [TensorId; 3]) {
    let mut g = Graph::new();
    let a = g.new_tensor_1d(GgmlType::F32, n);
    let b = g.new_tensor_1d(GgmlType::F32, n);
    let s = g.add(a, b);
    let t = g.mul(s, b);
    let u = g.add(t, b);
    let o = g.mul(u, b);
    g.build_forward_expand(o);
    for (id, off) in [a, b, s, t, u, o].into_iter().zip(offs) {
        g.tensor_mut(id).data = Some(TensorData {
            buffer: buf.clone(),
            offset: off,
        });
    }
    (g, [a, b, o])
}

fn chain_ref(a: f32, b: f32) -> f32 {
    (((a + b) * b) + b) * b
}

#[test]
fn a_split_is_captured_then_replayed_and_a_moved_pointer_updates_the_graph() {
    let _g = setup();
    let be = CudaBackend::new(0).expect("emulated CUDA0");
    let n = 1024i64;
    let row = n as usize * 4;
    let buf = be.alloc_buffer(8 * row, BufferUsage::Compute).unwrap();
    let base = counts(&be);
    let emu0 = emulator::stats(0);
    let run = |g: &Graph, ids: [TensorId; 3], k: f32| {
        let av: Vec<f32> = (0..n).map(|i| i as f32 * k).collect();
        let bv: Vec<f32> = (0..n).map(|i| 1.0 + (i % 7) as f32).collect();
        g.write_bytes(ids[0], &f32_bytes(&av)).unwrap();
        g.write_bytes(ids[1], &f32_bytes(&bv)).unwrap();
        be.compute(g, g.nodes()).unwrap();
        be.synchronize().unwrap();
        let got = floats(&g.read_bytes(ids[2]).unwrap());
        let want: Vec<f32> = av.iter().zip(&bv).map(|(&a, &b)| chain_ref(a, b)).collect();
        assert_eq!(got, want, "k = {k}");
    };
    let offs = [0, row, 2 * row, 3 * row, 4 * row, 5 * row];
    let (g, ids) = chain(&buf, n, offs);
    // 1: launch by launch; 2: captured and launched; 3, 4: replays that
    // read the new inputs
    for (i, k) in [1.0f32, 2.0, 3.0, 4.0].into_iter().enumerate() {
        run(&g, ids, k);
        let c = counts(&be).since(&base);
        let want_launches = [4, 4 + 5, 4 + 5 + 1, 4 + 5 + 2][i];
        assert_eq!(c.launches, want_launches, "after run {}: {c:?}", i + 1);
        assert_eq!(c.graph_replays, [0, 0, 1, 2][i], "after run {}", i + 1);
    }
    let emu = emulator::stats(0);
    assert_eq!(
        emu.graph_replays - emu0.graph_replays,
        3,
        "two replays and the captured graph's launch"
    );
    // the same split with its output elsewhere: the graph's last launch
    // is updated in place and replayed
    let (g2, ids2) = chain(&buf, n, [0, row, 2 * row, 3 * row, 4 * row, 7 * row]);
    run(&g2, ids2, 5.0);
    let c = counts(&be).since(&base);
    assert_eq!((c.launches, c.graph_replays), (4 + 5 + 3, 3), "{c:?}");
    let emu = emulator::stats(0);
    assert_eq!(emu.graph_replays - emu0.graph_replays, 4);
    // back to the first output: updated again, still right
    run(&g, ids, 6.0);
    // one device sync per graph (the synchronize that ends it), none inside
    assert_eq!(counts(&be).since(&base).device_syncs, 6);
    assert!(emulator::take_hazards().is_empty());
}

#[test]
fn an_out_of_range_id_is_reported_at_the_graphs_synchronize_naming_the_op() {
    let _g = setup();
    let be = CudaBackend::new(0).expect("emulated CUDA0");
    let buf = be.alloc_buffer(4096, BufferUsage::Compute).unwrap();
    let mut g = Graph::new();
    let w = g.new_tensor_2d(GgmlType::F32, 8, 4);
    let ids = g.new_tensor_1d(GgmlType::I32, 3);
    let r = g.get_rows(w, ids);
    g.build_forward_expand(r);
    for (i, id) in [w, ids, r].into_iter().enumerate() {
        g.tensor_mut(id).data = Some(TensorData {
            buffer: buf.clone(),
            offset: i * 1024,
        });
    }
    g.write_bytes(w, &f32_bytes(&[1.0; 32])).unwrap();
    let bad: Vec<u8> = [2i32, 9, 0].iter().flat_map(|x| x.to_le_bytes()).collect();
    g.write_bytes(ids, &bad).unwrap();
    let c0 = counts(&be);
    // computing queues the kernel and returns: no synchronize inside
    be.compute(&g, g.nodes())
        .expect("compute does not wait for the flag");
    assert_eq!(counts(&be).since(&c0).device_syncs, 0);
    let e = be
        .synchronize()
        .expect_err("the flag is read at the synchronize");
    let msg = e.to_string();
    assert!(msg.contains("out of range in get_rows"), "{msg}");
    assert_eq!(counts(&be).since(&c0).device_syncs, 1);
    // cleared: the next graph of good ids synchronizes cleanly
    let good: Vec<u8> = [2i32, 3, 0].iter().flat_map(|x| x.to_le_bytes()).collect();
    g.write_bytes(ids, &good).unwrap();
    be.compute(&g, g.nodes()).unwrap();
    be.synchronize().expect("a good graph after a bad one");
    assert!(emulator::take_hazards().is_empty());
}

#[test]
fn events_come_from_a_pool_and_reads_after_compute_use_the_readback_stream() {
    let _g = setup();
    let be = CudaBackend::new(0).expect("emulated CUDA0");
    assert_eq!(be.n_copy_streams(), 2);
    assert_eq!(be.upload_stream(), Stream::Copy(0));
    assert_eq!(be.readback_stream(), Stream::Copy(1));
    let n = 256i64;
    let row = n as usize * 4;
    let buf = be.alloc_buffer(6 * row, BufferUsage::Compute).unwrap();
    let (g, ids) = chain(&buf, n, [0, row, 2 * row, 3 * row, 4 * row, 5 * row]);
    g.write_bytes(ids[0], &f32_bytes(&[1.0; 256])).unwrap();
    g.write_bytes(ids[1], &f32_bytes(&[2.0; 256])).unwrap();
    // warm the pool, then record and drop many events: none created
    for _ in 0..4 {
        let _ = be.record_event_on(Stream::Compute).unwrap();
    }
    let e0 = emulator::stats(0).events_created;
    let c0 = counts(&be);
    for _ in 0..50 {
        be.compute(&g, g.nodes()).unwrap();
        let ev = be.record_event_on(Stream::Compute).unwrap();
        be.wait_event_on(Stream::Copy(0), &ev).unwrap();
        // the host reads the output after the compute, waiting for that
        // read's event only
        let mut out = vec![0u8; row];
        let od = g.tensor(ids[2]).data.clone().unwrap();
        be.read_after_compute(&od, 0, &mut out).unwrap();
        assert!(floats(&out).iter().all(|&x| x == chain_ref(1.0, 2.0)));
    }
    let created = emulator::stats(0).events_created - e0;
    assert!(created <= 4, "{created} events created for 150 records");
    assert_eq!(
        counts(&be).since(&c0).device_syncs,
        0,
        "no device-wide sync"
    );
    be.synchronize().unwrap();
    assert!(emulator::take_hazards().is_empty());
}

/// `mul_mat_id` over a bank of 4 expert slots (F32 `[16, 8]` each), ids
/// selecting slots 1 and 3 for one token: the graph, the bank's offset in
/// `buf` and one slot's bytes.
fn bank_graph(buf: &Arc<dyn Buffer>) -> (Graph, TensorId, usize) {
    let (k, m, n_slot) = (16i64, 8i64, 4i64);
    let mut g = Graph::new();
    let bank = g.new_tensor_3d(GgmlType::F32, k, m, n_slot);
    let x = g.new_tensor_3d(GgmlType::F32, k, 1, 1);
    let ids = g.new_tensor_2d(GgmlType::I32, 2, 1);
    let y = g.mul_mat_id(bank, x, ids);
    g.build_forward_expand(y);
    let slot = (k * m * 4) as usize;
    let offs = [0, 4 * slot, 4 * slot + 1024, 4 * slot + 2048];
    for (id, off) in [bank, x, ids, y].into_iter().zip(offs) {
        g.tensor_mut(id).data = Some(TensorData {
            buffer: buf.clone(),
            offset: off,
        });
    }
    g.write_bytes(bank, &f32_bytes(&vec![0.5; (4 * k * m) as usize]))
        .unwrap();
    g.write_bytes(x, &f32_bytes(&[1.0; 16])).unwrap();
    let sel: Vec<u8> = [1i32, 3].iter().flat_map(|x| x.to_le_bytes()).collect();
    g.write_bytes(ids, &sel).unwrap();
    (g, bank, slot)
}

/// The hazard detector sees the cache slots `mul_mat_id` reads (which its
/// device-side ids select, resolved when the kernel runs): an upload into
/// a slot it reads, queued on the upload stream without waiting for the
/// compute, is a hazard; into a slot it does not read, or after an event
/// on the compute stream, it is not.
#[test]
fn an_upload_into_a_slot_mul_mat_id_reads_needs_a_wait() {
    let _g = setup();
    for seed in 1..=8 {
        let mut c = emulator::config();
        c.seed = Some(seed);
        emulator::set_config(c);
        // a backend per seed: its streams take the seed, and the hazard
        // found below stays on its compute stream (a sticky error)
        let be = CudaBackend::new(0).expect("emulated CUDA0");
        let buf = be.alloc_buffer(8192, BufferUsage::Compute).unwrap();
        let (g, bank, slot) = bank_graph(&buf);
        let bd = g.tensor(bank).data.clone().unwrap();
        let bytes = f32_bytes(&vec![0.25; slot / 4]);
        // ordered: the upload into slot 1 waits for the compute
        be.compute(&g, g.nodes()).unwrap();
        let ev = be.record_event_on(Stream::Compute).unwrap();
        be.wait_event_on(Stream::Copy(0), &ev).unwrap();
        be.write_on(Stream::Copy(0), &bd, slot, &bytes).unwrap();
        be.synchronize().expect("an ordered upload");
        // unordered, into slot 2 (not read): no hazard
        be.compute(&g, g.nodes()).unwrap();
        be.write_on(Stream::Copy(0), &bd, 2 * slot, &bytes).unwrap();
        be.synchronize()
            .expect("an upload into a slot nobody reads");
        assert!(emulator::take_hazards().is_empty());
        // unordered, into slot 3 (read): a hazard, found when the upload
        // is queued (the kernel ran and recorded its slots) or when the
        // kernel runs (the upload was recorded first)
        be.compute(&g, g.nodes()).unwrap();
        let queued = be.write_on(Stream::Copy(0), &bd, 3 * slot, &bytes);
        let synced = be.synchronize();
        let msg = match (queued, synced) {
            (Err(e), _) | (Ok(()), Err(e)) => e.to_string(),
            (Ok(()), Ok(())) => {
                panic!("seed {seed}: an unordered upload into a slot mul_mat_id reads")
            }
        };
        assert!(
            msg.contains("hazard") && msg.contains("k_"),
            "seed {seed}: {msg}"
        );
        let _ = emulator::take_hazards();
    }
}
