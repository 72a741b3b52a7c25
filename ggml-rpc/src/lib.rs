//! # ggml-rpc
//!
//! A ggml-core device on another host: llama.cpp's RPC protocol 7.0.0,
//! spoken to a stock `ggml-rpc-server` (`ggml-rpc-server -d CPU -H HOST -p
//! PORT`). Each device of each worker is a [`Backend`](ggml_core::Backend)
//! named `RPC0`, `RPC1`, ... in the order of the endpoints, so the
//! scheduler, `--device`, `-ts`, `-ot ...=RPC0`, `--fit` and the expert
//! copy hook treat it as one more device.
//!
//! ## How data flows
//!
//! - **Connect** ([`worker::connect_devices`]): TCP with a timeout, HELLO
//!   (only exactly 7.0.0 is accepted, [`proto::version_mismatch`]),
//!   DEVICE_COUNT, each device's alignment and largest buffer, then the
//!   probe graph ([`probe`]): every op the engine builds, computed there and
//!   here, compared.
//! - **Weights and inputs**: SET_TENSOR into the worker's buffers
//!   ([`buffer::RpcBuffer`]); weights above 10 MiB first as
//!   SET_TENSOR_HASH ([`hash::fnv1a`]), so a worker started with `-c` loads
//!   a model once.
//! - **Compute**: the split's nodes as packed `rpc_tensor`s
//!   ([`wire::RpcTensor`], [`graph_wire`]) with ggml's op ordinals and
//!   `op_params` ([`ordinals`], [`opmap`]) in GRAPH_COMPUTE, or
//!   GRAPH_RECOMPUTE when the graph is the device's last one.
//! - **Results**: GET_TENSOR. Faults (a worker gone, closing the socket,
//!   stalling past the timeout, answering short) are errors naming the
//!   worker and the command ([`conn::RpcError`]); after one the connection
//!   is dead and every later command says so at once.
//! - **Counting**: bytes and messages each way and round trips, per worker
//!   ([`ggml_core::LinkCounters`], through the backend's diagnostics:
//!   `BackendDiagnostics::link_counters`).
//!
//! What this path cannot do: ggml's RPC has no tensor parallelism (a layer
//! runs on one device) and no copies between workers (they go through this
//! host). `docs/scaling.md` has the measured traffic.
//!
//! With the `testkit` feature, the `testkit` module holds an in-process fake worker
//! (computing with this engine's CPU backend, with injected faults and
//! versions) and a fault-injecting proxy, for tests without llama.cpp.
#![warn(missing_docs)]

pub mod backend;
pub mod buffer;
pub mod conn;
pub mod graph_wire;
pub mod hash;
pub mod opmap;
pub mod ordinals;
pub mod probe;
pub mod proto;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod wire;
pub mod worker;

pub use backend::RpcBackend;
pub use conn::{Fault, RpcError, DEFAULT_TIMEOUT, TIMEOUT_ENV};
pub use proto::{Cmd, Version, VERSION};
pub use worker::{connect_devices, RpcOptions};

/// Split a `--rpc host:port[,host:port...]` list; an empty entry is an
/// error naming the list.
pub fn parse_servers(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in list.split(',') {
        let p = part.trim();
        if p.is_empty() {
            return Err(format!("--rpc {list}: an empty server in the list"));
        }
        conn::parse_endpoint(p).map_err(|e| format!("--rpc {list}: {e}"))?;
        out.push(p.to_string());
    }
    Ok(out)
}
