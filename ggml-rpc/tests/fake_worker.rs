//! The protocol against the in-process fake worker (runs in CI, no
//! llama.cpp needed): versions refused by name, every fault named with the
//! worker and the command and never a hang, SET_TENSOR_HASH above 10 MiB,
//! GRAPH_RECOMPUTE of an unchanged graph, memory the worker cannot reach.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ggml_core::tensor::TensorData;
use ggml_core::{
    BackendDevice, BackendDiagnostics, BackendStream, BufferUsage, CpuBackend, GgmlType, Graph,
};
use ggml_rpc::testkit::{
    small_graph, small_graph_fault, FakeFault, FakeOptions, FakeWorker, FaultProxy, ProxyFault,
};
use ggml_rpc::{connect_devices, Cmd, RpcBackend, RpcOptions, Version};

fn opts(timeout_s: f64) -> RpcOptions {
    RpcOptions {
        timeout: Duration::from_secs_f64(timeout_s),
        ..RpcOptions::default()
    }
}

fn fake(o: FakeOptions) -> FakeWorker {
    FakeWorker::start(o).unwrap()
}

fn one(ep: &str, timeout_s: f64) -> Result<Arc<RpcBackend>, String> {
    connect_devices(&[ep.to_string()], &opts(timeout_s))
        .map(|mut v| v.remove(0))
        .map_err(|e| e.to_string())
}

#[test]
fn connects_probes_and_computes() {
    let w = fake(FakeOptions {
        devices: 2,
        ..FakeOptions::default()
    });
    let devs = connect_devices(&[w.endpoint()], &opts(10.0)).unwrap();
    let names: Vec<&str> = devs.iter().map(|d| d.name()).collect();
    assert_eq!(names, ["RPC0", "RPC1"]);
    assert_eq!(devs[1].device_index(), 1);
    let n_probe = ggml_rpc::probe::op_labels().len() as u64;
    assert!(n_probe > 50, "{n_probe}");
    assert_eq!(
        w.count(Cmd::GraphCompute),
        2 * n_probe,
        "one graph per probed op"
    );
    assert_eq!(
        small_graph(devs[0].as_ref()).unwrap(),
        [1.5, 5.0, 6.0, 12.0]
    );
    assert_eq!(w.count(Cmd::GraphRecompute), 1);
    assert_eq!(devs[0].memory(), Some((8 << 30, 8 << 30)));
    let c = devs[0].link_counters().unwrap().snapshot();
    assert!(c.messages_sent > c.messages_received && c.round_trips == c.messages_received);
}

#[test]
fn other_versions_are_refused_by_name() {
    for (v, why) in [
        ((6, 0, 0), "another major version"),
        ((7, 1, 0), "a newer minor version"),
        ((8, 0, 0), "another major version"),
        ((7, 0, 1), "another patch version"),
    ] {
        let w = fake(FakeOptions {
            version: Version {
                major: v.0,
                minor: v.1,
                patch: v.2,
            },
            ..FakeOptions::default()
        });
        let e = one(&w.endpoint(), 5.0).err().unwrap();
        let want = format!("speaks RPC protocol {}.{}.{}", v.0, v.1, v.2);
        assert!(
            e.contains(&w.endpoint())
                && e.contains("HELLO")
                && e.contains(&want)
                && e.contains(why),
            "{e}"
        );
        assert!(e.contains("exactly 7.0.0"), "{e}");
        assert_eq!(w.count(Cmd::DeviceCount), 0, "nothing after HELLO");
    }
}

/// A fault on the `nth` GET_TENSOR (the probe's reads come first) shows
/// as an error naming RPC0, GET_TENSOR and the fault, within the timeout.
#[test]
fn worker_faults_are_named_and_never_hang() {
    let probe_reads = ggml_rpc::probe::op_labels().len() as u64;
    for (fault, want) in [
        (
            FakeFault::Close(Cmd::GetTensor, probe_reads + 1),
            "closed the connection",
        ),
        (
            FakeFault::ShortReply(Cmd::GetTensor, probe_reads + 1),
            "short reply",
        ),
        (FakeFault::Stall(Cmd::GetTensor, probe_reads + 1), "stalled"),
        (FakeFault::Die(Cmd::GraphCompute, probe_reads + 1), "RPC0"),
    ] {
        let w = fake(FakeOptions {
            fault: Some(fault),
            ..FakeOptions::default()
        });
        let be = one(&w.endpoint(), 1.0).unwrap();
        let t0 = Instant::now();
        let e = small_graph(be.as_ref()).err().unwrap().to_string();
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(5), "{fault:?} took {took:?}");
        assert!(
            e.contains("RPC0 (127.0.0.1:") && e.contains(want),
            "{fault:?}: {e}"
        );
        if !matches!(fault, FakeFault::Die(..)) {
            assert!(e.contains("GET_TENSOR"), "{e}");
        }
        // the connection is dead now: the next command says so at once
        let t0 = Instant::now();
        let e2 = be
            .alloc_buffer(64, BufferUsage::Compute)
            .err()
            .unwrap()
            .to_string();
        assert!(t0.elapsed() < Duration::from_millis(500));
        assert!(e2.contains("failed earlier"), "{e2}");
        if let FakeFault::Die(..) = fault {
            let e3 = one(&w.endpoint(), 1.0).err().unwrap();
            assert!(e3.contains("gone"), "{e3}");
        }
    }
}

#[test]
fn proxy_faults_gone_closed_stall_short() {
    let w = fake(FakeOptions::default());
    // (the fault, what the error says, the command it names: a
    // GRAPH_COMPUTE has no reply, so a worker gone on it shows at the
    // next command's read)
    for (fault, want, cmd) in [
        (
            ProxyFault::Close(Some(Cmd::GetTensor)),
            "closed the connection",
            "GET_TENSOR",
        ),
        (
            ProxyFault::ShortReply(Some(Cmd::GetTensor)),
            "short reply",
            "GET_TENSOR",
        ),
        (
            ProxyFault::Stall(Some(Cmd::GetTensor)),
            "stalled",
            "GET_TENSOR",
        ),
        (
            ProxyFault::Gone(Some(Cmd::GraphCompute)),
            "closed the connection",
            "GET_TENSOR",
        ),
    ] {
        let p = FaultProxy::start(&w.endpoint()).unwrap();
        let be = one(&p.endpoint(), 1.0).unwrap();
        let (e, took) = small_graph_fault(be.as_ref(), &p, fault).unwrap();
        assert!(took < Duration::from_secs(5), "{fault:?}: {took:?}");
        assert!(
            e.contains(&format!("RPC worker RPC0 ({}): {cmd}: ", p.endpoint())) && e.contains(want),
            "{fault:?}: {e}"
        );
        if let ProxyFault::Gone(_) = fault {
            let e = one(&p.endpoint(), 1.0).err().unwrap();
            assert!(e.contains("gone") && e.contains("HELLO"), "{e}");
        }
    }
    // a stalled HELLO: the connect gives up within the timeout
    let p = FaultProxy::start(&w.endpoint()).unwrap();
    p.arm(ProxyFault::Stall(Some(Cmd::Hello)));
    let t0 = Instant::now();
    let e = one(&p.endpoint(), 0.5).err().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(e.contains("HELLO") && e.contains("stalled"), "{e}");
}

#[test]
fn weights_above_10_mib_go_by_hash_first() {
    let w = fake(FakeOptions {
        cache: true,
        ..FakeOptions::default()
    });
    let n = 11 << 20;
    let data: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    let sent = |be: &RpcBackend| be.link_counters().unwrap().snapshot().bytes_sent;
    let be = one(&w.endpoint(), 10.0).unwrap();
    let buf = be.alloc_buffer(n, BufferUsage::Weights).unwrap();
    let before = sent(&be);
    buf.write(0, &data).unwrap();
    assert!(sent(&be) - before > n as u64, "sent in full the first time");
    assert_eq!(w.count(Cmd::SetTensorHash), 1);
    be.memory().unwrap(); // a round trip: the worker has served the write
    assert_eq!(w.cached(), [(ggml_rpc::hash::fnv1a(&data), n)]);
    // another client (a second run) finds it in the worker's cache
    let be2 = one(&w.endpoint(), 10.0).unwrap();
    let buf2 = be2.alloc_buffer(n, BufferUsage::Weights).unwrap();
    let before = sent(&be2);
    buf2.write(0, &data).unwrap();
    assert!(sent(&be2) - before < 4096, "only the hash crosses");
    let mut back = vec![0u8; 4096];
    buf2.read(n - 4096, &mut back).unwrap();
    assert_eq!(back, data[n - 4096..]);
    // compute memory and small weights never take the hash path
    let c = be2.alloc_buffer(n, BufferUsage::Compute).unwrap();
    c.write(0, &data).unwrap();
    let small = be2.alloc_buffer(1 << 20, BufferUsage::Weights).unwrap();
    small.write(0, &data[..1 << 20]).unwrap();
    assert_eq!(w.count(Cmd::SetTensorHash), 2);
}

#[test]
fn memory_the_worker_cannot_read_is_an_error_naming_the_tensor() {
    let w = fake(FakeOptions::default());
    let be = one(&w.endpoint(), 5.0).unwrap();
    let cpu = CpuBackend::new(1);
    let mut g = Graph::new();
    let a = g.new_tensor_1d(GgmlType::F32, 4);
    g.set_name(a, "host_input");
    let y = g.sqr(a);
    g.build_forward_expand(y);
    g.tensor_mut(a).data = Some(TensorData {
        buffer: cpu.alloc_buffer(16, BufferUsage::Compute).unwrap(),
        offset: 0,
    });
    g.tensor_mut(y).data = Some(TensorData {
        buffer: be.alloc_buffer(16, BufferUsage::Compute).unwrap(),
        offset: 0,
    });
    let nodes = g.nodes().to_vec();
    let e = be.compute(&g, &nodes).err().unwrap().to_string();
    assert!(
        e.contains("'host_input'") && e.contains("CPU") && e.contains("RPC0"),
        "{e}"
    );
    assert!(be.can_use_buffer(g.tensor(y).data.as_ref().unwrap().buffer.as_ref()));
    assert!(!be.can_use_buffer(g.tensor(a).data.as_ref().unwrap().buffer.as_ref()));
}

#[test]
fn allocations_past_the_workers_memory_are_out_of_memory() {
    let w = fake(FakeOptions {
        memory: (1 << 20, 1 << 20),
        ..FakeOptions::default()
    });
    let be = one(&w.endpoint(), 5.0).unwrap();
    let e = be
        .alloc_buffer(2 << 20, BufferUsage::Weights)
        .err()
        .unwrap();
    assert!(matches!(e, ggml_core::BackendError::OutOfMemory(_)), "{e}");
    assert!(
        e.to_string().contains("could not allocate 2097152 bytes"),
        "{e}"
    );
    // the connection stays usable after a refused allocation
    assert!(be.alloc_buffer(1024, BufferUsage::Weights).is_ok());
}

#[test]
fn endpoints_listed_twice_or_malformed_are_errors() {
    let w = fake(FakeOptions::default());
    let ep = w.endpoint();
    let e = connect_devices(&[ep.clone(), ep.clone()], &opts(5.0))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("listed twice"), "{e}");
    assert_eq!(ggml_rpc::parse_servers("a:1, b:2").unwrap(), ["a:1", "b:2"]);
    assert!(ggml_rpc::parse_servers("a:1,,b:2")
        .unwrap_err()
        .contains("empty"));
    assert!(ggml_rpc::parse_servers("a")
        .unwrap_err()
        .contains("host:port"));
}
