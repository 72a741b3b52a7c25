//! The simulated clock against hand-computed times, and the scheduler's
//! asynchronous execution as the timeline shows it.

use std::sync::Arc;

use ggml_core::clock::ClockEvent;
use ggml_core::timeline::{SpanKind, Timeline};
use ggml_core::{
    Backend, BackendDevice, BackendStream, BufferUsage, CpuBackend, GgmlType, Graph, SimBackend,
    SimClock, SimProfile, Stream, TensorData, TensorId,
};
use ggml_sched::Scheduler;

/// A profile where everything costs one nanosecond per byte: device memory,
/// both link directions; compute is free and nothing has a fixed cost.
fn byte_per_ns(copy_engines: usize) -> SimProfile {
    let mut p = SimProfile::default_profile();
    p.device.flops = 1e30;
    p.device.mem_bw = 1e9;
    p.device.launch_s = 0.0;
    p.link.h2d_bw = 1e9;
    p.link.d2h_bw = 1e9;
    p.link.latency_s = 0.0;
    p.copy_engines = copy_engines;
    p
}

struct Chain {
    g: Graph,
    w1: TensorId,
    w2: TensorId,
    a: TensorId,
    b: TensorId,
    c: TensorId,
}

/// `c = add(scale(add(x, w1)), w2)` over 256 floats (1 KiB each), every
/// tensor in one buffer of `be`; x is written (synchronously) already.
fn chain(be: &SimBackend) -> Chain {
    let buf = be.alloc_buffer(6 * 1024, BufferUsage::Compute).unwrap();
    let mut g = Graph::new();
    let x = g.new_tensor_1d(GgmlType::F32, 256);
    let w1 = g.new_tensor_1d(GgmlType::F32, 256);
    let w2 = g.new_tensor_1d(GgmlType::F32, 256);
    let a = g.add(x, w1);
    let b = g.scale(a, 2.0);
    let c = g.add(b, w2);
    g.set_name(a, "a");
    g.set_name(b, "b");
    g.set_name(c, "c");
    for (i, t) in [x, w1, w2, a, b, c].into_iter().enumerate() {
        g.tensor_mut(t).data = Some(TensorData {
            buffer: Arc::clone(&buf),
            offset: i * 1024,
        });
    }
    let xs: Vec<f32> = (0..256).map(|i| i as f32 * 0.5).collect();
    g.write_f32(x, &xs).unwrap();
    Chain { g, w1, w2, a, b, c }
}

fn bytes(v: f32) -> Vec<u8> {
    (0..256)
        .flat_map(|i| (v + i as f32).to_le_bytes())
        .collect()
}

/// Run the chain; copies on the compute stream (`overlap = false`) or on a
/// copy stream ordered by events. Returns (simulated ns, result, timeline).
fn run_chain(overlap: bool) -> (u64, Vec<f32>, Timeline) {
    let clock = SimClock::new(byte_per_ns(2));
    let be = SimBackend::new(0, 1).with_clock(Arc::clone(&clock));
    let ch = chain(&be);
    clock.set_recording(true);
    let t0 = clock.now_ns();
    let (d1, d2) = (bytes(1.0), bytes(-3.0));
    let w1 = ch.g.data_of(ch.w1).unwrap();
    let w2 = ch.g.data_of(ch.w2).unwrap();
    let s = if overlap {
        Stream::Copy(0)
    } else {
        Stream::Compute
    };
    be.write_on(s, &w1, 0, &d1).unwrap();
    if overlap {
        let ev = be.record_event_on(s).unwrap();
        be.wait_event_on(Stream::Compute, &ev).unwrap();
    }
    be.compute(&ch.g, &[ch.a, ch.b]).unwrap();
    be.write_on(s, &w2, 0, &d2).unwrap();
    if overlap {
        let ev = be.record_event_on(s).unwrap();
        be.wait_event_on(Stream::Compute, &ev).unwrap();
    }
    be.compute(&ch.g, &[ch.c]).unwrap();
    be.synchronize().unwrap();
    let end = clock.now_ns() - t0;
    let tl = clock.take_timeline();
    let mut tl = tl;
    for sp in &mut tl.spans {
        sp.start_ns -= t0;
        sp.end_ns -= t0;
    }
    (end, ch.g.read_f32(ch.c).unwrap(), tl)
}

#[test]
fn a_chain_of_three_ops_and_two_copies_ends_at_the_hand_computed_time() {
    // copies: 1024 B = 1024 ns; add: 3 KiB touched = 3072 ns; scale: 2048 ns
    // in order:  copy1 [0,1024] a [1024,4096] b [4096,6144]
    //            copy2 [6144,7168] c [7168,10240]
    let (serial, r1, t1) = run_chain(false);
    assert_eq!(serial, 10240);
    // overlapped: copy2 runs on the copy stream right after copy1
    //            [1024,2048], hidden under a; c starts when b ends [6144,9216]
    let (overlapped, r2, t2) = run_chain(true);
    assert_eq!(overlapped, 9216);
    assert_eq!(
        r1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        r2.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    let span = |t: &Timeline, kind: SpanKind, n: usize| {
        let s = t.spans.iter().filter(|s| s.kind == kind).nth(n).unwrap();
        (s.start_ns, s.end_ns)
    };
    assert_eq!(span(&t1, SpanKind::CopyH2D, 1), (6144, 7168));
    assert_eq!(span(&t2, SpanKind::CopyH2D, 1), (1024, 2048));
    assert_eq!(span(&t2, SpanKind::Op, 2), (6144, 9216));
    t1.check_hazards().unwrap();
    t2.check_hazards().unwrap();
}

#[test]
fn the_clock_is_deterministic() {
    let a = run_chain(true);
    let b = run_chain(true);
    assert_eq!(a.0, b.0);
    assert_eq!(a.2.spans.len(), b.2.spans.len());
    for (x, y) in a.2.spans.iter().zip(&b.2.spans) {
        assert_eq!(
            (x.start_ns, x.end_ns, x.kind),
            (y.start_ns, y.end_ns, y.kind)
        );
    }
}

#[test]
fn a_cpu_split_that_reads_nothing_from_the_device_does_not_wait_for_it() {
    let mut p = byte_per_ns(2);
    p.device.mem_bw = 1e8; // the device split is slow
    p.cpu.mem_bw = 1e11;
    p.cpu.flops = 1e12;
    let clock = SimClock::new(p);
    let sim = SimBackend::new(0, 1).with_clock(Arc::clone(&clock));
    let cpu = CpuBackend::new(1).with_clock(clock.clone());
    let n = 256i64;
    let wbytes = (n * n * 4) as usize;
    let dev_w = sim.alloc_buffer(wbytes, BufferUsage::Weights).unwrap();
    let host_w = cpu.alloc_buffer(wbytes, BufferUsage::Weights).unwrap();
    let mut g = Graph::new();
    let x = g.new_tensor_2d(GgmlType::F32, n, 1);
    g.set_name(x, "x");
    g.set_input(x);
    let wd = g.new_tensor_2d(GgmlType::F32, n, n);
    let wh = g.new_tensor_2d(GgmlType::F32, n, n);
    for (w, buf, name) in [(wd, &dev_w, "w_dev"), (wh, &host_w, "w_host")] {
        g.set_name(w, name);
        g.tensor_mut(w).flags.weight = true;
        g.tensor_mut(w).data = Some(TensorData {
            buffer: Arc::clone(buf),
            offset: 0,
        });
    }
    let wv: Vec<f32> = (0..n * n).map(|i| ((i % 7) as f32 - 3.0) * 0.125).collect();
    g.write_f32(wd, &wv).unwrap();
    g.write_f32(wh, &wv).unwrap();
    let yd = g.mul_mat(wd, x);
    g.set_name(yd, "y_dev");
    let yh = g.mul_mat(wh, x);
    g.set_name(yh, "y_host");
    let out = g.add(yd, yh);
    g.set_name(out, "out");
    g.set_output(out);
    g.build_forward_expand(out);

    let sim: Arc<dyn Backend> = Arc::new(sim);
    let cpu: Arc<dyn Backend> = Arc::new(cpu);
    let mut s = Scheduler::new(vec![sim, cpu]).unwrap();
    s.alloc_graph(&mut g).unwrap();
    let xs: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
    g.write_f32(x, &xs).unwrap();
    clock.set_recording(true);
    s.compute(&mut g).unwrap();
    assert_eq!(s.node_backend(yd), Some("SIM0"));
    assert_eq!(s.node_backend(yh), Some("CPU"));
    let tl = clock.take_timeline();
    tl.check_hazards().unwrap();
    let find = |name: &str| {
        tl.spans
            .iter()
            .find(|sp| sp.kind == SpanKind::Op && sp.name.ends_with(name))
            .unwrap_or_else(|| panic!("no span for {name}: {:#?}", tl.spans))
    };
    let dev = find("y_dev");
    let host = find("y_host");
    assert_eq!(dev.backend, "SIM0");
    assert_eq!(host.backend, "CPU");
    assert!(
        host.start_ns < dev.end_ns,
        "the CPU split waited for the device: CPU starts at {} ns, the device's split ends at {} ns",
        host.start_ns,
        dev.end_ns
    );
    // and the result is right
    let got = g.read_f32(out).unwrap();
    for (r, &v) in got.iter().enumerate() {
        let want: f32 = (0..n as usize)
            .map(|k| wv[r * n as usize + k] * xs[k])
            .sum::<f32>()
            * 2.0;
        assert!(
            (v - want).abs() <= 1e-3 * want.abs().max(1.0),
            "row {r}: {v} vs {want}"
        );
    }
}

#[test]
fn events_of_other_backends_are_honoured() {
    let clock = SimClock::new(byte_per_ns(1));
    let sim = SimBackend::new(0, 1).with_clock(Arc::clone(&clock));
    let ev = ggml_core::Event(Arc::new(ClockEvent { at_ns: 5000 }));
    sim.wait_event_on(Stream::Compute, &ev).unwrap();
    let ch = chain(&sim);
    let t0 = clock.now_ns();
    sim.compute(&ch.g, &[ch.a]).unwrap();
    sim.synchronize().unwrap();
    assert_eq!(clock.now_ns(), t0.max(5000) + 3072);
}
