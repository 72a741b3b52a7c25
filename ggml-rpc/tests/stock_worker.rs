//! Against llama.cpp's own `ggml-rpc-server -d CPU` on loopback: the probe
//! graph passes (every op the engine builds computes there as here), the
//! hash path of `-c`, and the faults of a real worker. Skips, saying why,
//! where no stock server is built (`GGML_RPC_SERVER`, or the reference
//! build of `../shared/tools/llama-cpp-ref.sh`).

use std::time::{Duration, Instant};

use ggml_core::{BackendDevice, BackendDiagnostics, BufferUsage};
use ggml_rpc::testkit::{small_graph, small_graph_fault, FaultProxy, ProxyFault, StockWorker};
use ggml_rpc::{connect_devices, RpcOptions};

macro_rules! worker {
    ($cache:expr) => {
        match StockWorker::start(1, $cache) {
            Ok(w) => w,
            Err(why) => {
                println!("skipped: {why}");
                return;
            }
        }
    };
}

fn opts(timeout_s: f64) -> RpcOptions {
    RpcOptions {
        timeout: Duration::from_secs_f64(timeout_s),
        ..RpcOptions::default()
    }
}

#[test]
fn the_probe_graph_passes_on_the_stock_worker() {
    let w = worker!(false);
    let t0 = Instant::now();
    let devs = connect_devices(&[w.endpoint()], &opts(30.0)).unwrap();
    println!(
        "probe of {} ops: {:?}",
        ggml_rpc::probe::op_labels().len(),
        t0.elapsed()
    );
    assert_eq!(devs.len(), 1);
    assert_eq!(devs[0].name(), "RPC0");
    let (free, total) = devs[0].memory().unwrap();
    assert!(total > 0 && free <= total, "{free} {total}");
    let c = devs[0].link_counters().unwrap().snapshot();
    assert!(
        c.round_trips > 0 && c.bytes_sent > c.bytes_received / 100,
        "{c:?}"
    );
}

#[test]
fn a_worker_started_with_c_loads_big_weights_once() {
    let w = worker!(true);
    let n = 11 << 20;
    let data: Vec<u8> = (0..n).map(|i| (i * 13 % 251) as u8).collect();
    let sent = |be: &ggml_rpc::RpcBackend| be.link_counters().unwrap().snapshot().bytes_sent;
    let mut first = 0;
    for run in 0..2 {
        let be = connect_devices(&[w.endpoint()], &opts(30.0))
            .unwrap()
            .remove(0);
        let buf = be.alloc_buffer(n, BufferUsage::Weights).unwrap();
        let before = sent(&be);
        buf.write(0, &data).unwrap();
        let mut back = vec![0u8; 1 << 16];
        buf.read(n - back.len(), &mut back).unwrap();
        assert_eq!(back, data[n - back.len()..], "run {run}");
        let moved = sent(&be) - before;
        if run == 0 {
            first = moved;
            assert!(moved > n as u64, "the first run sends the data: {moved}");
        } else {
            assert!(
                moved < 4096,
                "the second run sends only the hash: {moved} (first {first})"
            );
        }
        // the worker serves one client at a time: let this one go
        drop(buf);
        drop(be);
    }
}

#[test]
fn faults_of_the_stock_worker_through_a_proxy() {
    let w = worker!(false);
    for (fault, want) in [
        (
            ProxyFault::Close(Some(ggml_rpc::Cmd::GetTensor)),
            "closed the connection",
        ),
        (
            ProxyFault::ShortReply(Some(ggml_rpc::Cmd::GetTensor)),
            "short reply",
        ),
        (ProxyFault::Stall(Some(ggml_rpc::Cmd::GetTensor)), "stalled"),
    ] {
        let p = FaultProxy::start(&w.endpoint()).unwrap();
        let be = connect_devices(&[p.endpoint()], &opts(1.0))
            .unwrap()
            .remove(0);
        let (e, took) = small_graph_fault(be.as_ref(), &p, fault).unwrap();
        assert!(took < Duration::from_secs(5), "{fault:?}: {took:?}");
        assert!(
            e.contains(&format!("RPC0 ({})", p.endpoint()))
                && e.contains("GET_TENSOR")
                && e.contains(want),
            "{fault:?}: {e}"
        );
        drop(be);
        drop(p); // the worker takes the next client once this one is gone
    }
}

#[test]
fn a_killed_worker_is_an_error_within_the_timeout() {
    let mut w = worker!(false);
    let be = connect_devices(&[w.endpoint()], &opts(5.0))
        .unwrap()
        .remove(0);
    assert_eq!(small_graph(be.as_ref()).unwrap(), [1.5, 5.0, 6.0, 12.0]);
    w.kill();
    let t0 = Instant::now();
    let e = small_graph(be.as_ref()).err().unwrap().to_string();
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(
        e.contains("RPC0") && (e.contains("gone") || e.contains("closed")),
        "{e}"
    );
}
