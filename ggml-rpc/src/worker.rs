//! Connecting to workers: HELLO and the version check, the worker's device
//! count, each device's alignment and largest buffer, and the names
//! `RPC0`, `RPC1`, ... given in the order of the endpoints and of each
//! worker's devices (as llama.cpp numbers them).

use std::sync::Arc;
use std::time::Duration;

use ggml_core::BackendError;

use crate::backend::RpcBackend;
use crate::conn::{Conn, Fault, RpcError};
use crate::proto::{version_mismatch, Cmd, Version, CONN_CAPS_SIZE};

/// How to connect.
#[derive(Clone, Debug)]
pub struct RpcOptions {
    /// Connect, reply and write timeout.
    pub timeout: Duration,
    /// Smallest batch for which a device runs an op whose weights are in
    /// host memory (`-nomb`).
    pub offload_min_batch: i64,
    /// Run the probe graph on every device at connect ([`crate::probe`]).
    pub probe: bool,
    /// CPU threads of the probe's local reference run.
    pub n_threads: usize,
}

impl Default for RpcOptions {
    fn default() -> Self {
        RpcOptions {
            timeout: crate::conn::DEFAULT_TIMEOUT,
            offload_min_batch: 32,
            probe: true,
            n_threads: 1,
        }
    }
}

/// The largest alignment a worker's buffers may ask for: the engine places
/// weights at multiples of 64 bytes.
pub const MAX_ALIGNMENT: u64 = 64;

/// HELLO on a fresh connection: the worker's version, refused unless it is
/// exactly [`crate::proto::VERSION`].
pub fn hello(conn: &Conn) -> Result<Version, RpcError> {
    let caps = [0u8; CONN_CAPS_SIZE];
    let rsp = conn.call(Cmd::Hello, &[&caps], 4 + CONN_CAPS_SIZE).map_err(|mut e| {
        if e.fault == Fault::Closed {
            e.fault = Fault::Refused(
                "the worker closed the connection on HELLO (a ggml-rpc-server of another protocol version does: this build speaks exactly 7.0.0)".into(),
            );
        }
        e
    })?;
    let v = Version {
        major: rsp[0],
        minor: rsp[1],
        patch: rsp[2],
    };
    match version_mismatch(v) {
        None => Ok(v),
        Some(why) => Err(conn.refused(Cmd::Hello, why)),
    }
}

fn u32_reply(conn: &Conn, cmd: Cmd, req: &[u8]) -> Result<u32, RpcError> {
    let r = conn.call(cmd, &[req], 4)?;
    Ok(u32::from_le_bytes([r[0], r[1], r[2], r[3]]))
}

fn u64_reply(conn: &Conn, cmd: Cmd, req: &[u8]) -> Result<u64, RpcError> {
    let r = conn.call(cmd, &[req], 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(&r);
    Ok(u64::from_le_bytes(a))
}

/// A device's `(free, total)` memory in bytes.
pub fn device_memory(conn: &Conn, device: u32) -> Result<(u64, u64), RpcError> {
    let r = conn.call(Cmd::GetDeviceMemory, &[&device.to_le_bytes()], 16)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(&r[..8]);
    let free = u64::from_le_bytes(a);
    a.copy_from_slice(&r[8..]);
    Ok((free, u64::from_le_bytes(a)))
}

/// Connect to every endpoint in order and open all their devices, named
/// `RPC0`, `RPC1`, ...; with `opts.probe` each device first passes the
/// probe graph. An endpoint listed twice, a worker of another protocol
/// version, one without devices and any fault are errors naming the
/// endpoint.
pub fn connect_devices(
    endpoints: &[String],
    opts: &RpcOptions,
) -> Result<Vec<Arc<RpcBackend>>, BackendError> {
    let mut out: Vec<Arc<RpcBackend>> = Vec::new();
    for (i, ep) in endpoints.iter().enumerate() {
        let ep = ep.trim();
        if endpoints[..i].iter().any(|e| e.trim() == ep) {
            return Err(BackendError::NoDevice(format!(
                "--rpc {}: the worker {ep} is listed twice",
                endpoints.join(",")
            )));
        }
        let conn = Arc::new(Conn::connect(ep, opts.timeout)?);
        hello(&conn)?;
        let n = u32_reply(&conn, Cmd::DeviceCount, &[])?;
        if n == 0 {
            return Err(BackendError::NoDevice(format!(
                "RPC worker {ep} has no devices"
            )));
        }
        let first = out.len();
        let names: Vec<String> = (0..n as usize)
            .map(|d| format!("RPC{}", first + d))
            .collect();
        conn.set_label(format!("{} ({ep})", names.join(",")));
        for (d, name) in names.into_iter().enumerate() {
            let dev = d as u32;
            let alignment = u64_reply(&conn, Cmd::GetAlignment, &dev.to_le_bytes())?;
            if alignment == 0 || alignment > MAX_ALIGNMENT || !alignment.is_power_of_two() {
                return Err(BackendError::Unsupported(format!(
                    "{name} ({ep}): the worker's buffers need an alignment of {alignment} bytes; this engine places tensors at multiples of {MAX_ALIGNMENT}"
                )));
            }
            let max_size = u64_reply(&conn, Cmd::GetMaxSize, &dev.to_le_bytes())?;
            let be = Arc::new(RpcBackend::new(
                name,
                Arc::clone(&conn),
                dev,
                usize::try_from(max_size).unwrap_or(usize::MAX),
                opts.offload_min_batch,
            ));
            if opts.probe {
                crate::probe::check(&be, opts.n_threads)?;
            }
            out.push(be);
        }
    }
    Ok(out)
}
