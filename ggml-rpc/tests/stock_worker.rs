//! Against llama.cpp's own `ggml-rpc-server -d CPU` on loopback: the probe
//! graph passes (every op the engine builds computes there as here), the
//! hash path of `-c`, and the faults of a real worker. Skips, saying why,
//! where no stock server is built (`GGML_RPC_SERVER`, or the reference
//! build of `../shared/tools/llama-cpp-ref.sh`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ggml_core::{Backend, BufferUsage};
use ggml_rpc::testkit::{FaultProxy, ProxyFault, StockWorker};
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
    println!("probe of {} ops: {:?}", ggml_rpc::probe::op_labels().len(), t0.elapsed());
    assert_eq!(devs.len(), 1);
    assert_eq!(devs[0].name(), "RPC0");
    let (free, total) = devs[0].memory().unwrap();
    assert!(total > 0 && free <= total, "{free} {total}");
    let c = devs[0].link_counters().unwrap().snapshot();
    assert!(c.round_trips > 0 && c.bytes_sent > c.bytes_received / 100, "{c:?}");
}
