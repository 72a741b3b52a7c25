//! [`RpcBackend`]: one device of a worker as a ggml-core [`Backend`].
//!
//! - **Buffers** are the worker's ([`RpcBuffer`]); the backend can use the
//!   buffers of its own worker device only.
//! - **Compute** serializes the split's nodes ([`crate::graph_wire`]) and
//!   sends GRAPH_COMPUTE, or GRAPH_RECOMPUTE when the bytes are those of the
//!   device's last graph. Nothing is awaited: the next read (the split's
//!   outputs, router ids) waits for it, since the worker serves one
//!   connection's commands in order.
//! - **Streams and events**: one stream. Every command is on the wire in
//!   issue order by the time its call returns, so events are complete when
//!   recorded and waits are no-ops; `synchronize` has nothing to wait for
//!   (a failed compute shows as the error of the next command with a
//!   reply).
//! - **Copies** within one worker are COPY_TENSOR on the worker; between
//!   two workers they go through this host (the protocol has no peer copy).
//! - **Supported ops**: those the CPU kernels here implement (the probe
//!   graph at connect checks the worker computes them alike), with every
//!   shape and stride within the protocol's 32-bit fields and rows of
//!   consecutive elements where ggml's CPU kernels assert them (a
//!   transposed V cache view is not multiplied there: the cache is stored
//!   transposed instead, as llama.cpp does).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use ggml_core::offload::offload_host_weight_op;
use ggml_core::tensor::TensorData;
use ggml_core::{
    Backend, BackendDevice, BackendDiagnostics, BackendError, BackendStream, Buffer, BufferUsage,
    Event, Graph, LinkCounters, Op, Stream, TensorId,
};

use crate::buffer::{byte_span, RpcBuffer};
use crate::conn::Conn;
use crate::graph_wire::{self, Placed};
use crate::proto::{Cmd, RPC_TENSOR_SIZE};

/// A device of a remote `ggml-rpc-server` (`RPC0`, ...).
pub struct RpcBackend {
    name: String,
    conn: Arc<Conn>,
    device: u32,
    max_size: usize,
    offload_min_batch: AtomicI64,
}

impl RpcBackend {
    /// Device `device` of the worker behind `conn`, named `name`.
    pub fn new(
        name: String,
        conn: Arc<Conn>,
        device: u32,
        max_size: usize,
        offload_min_batch: i64,
    ) -> RpcBackend {
        RpcBackend {
            name,
            conn,
            device,
            max_size,
            offload_min_batch: AtomicI64::new(offload_min_batch),
        }
    }

    /// The worker's endpoint (`host:port`).
    pub fn endpoint(&self) -> &str {
        self.conn.endpoint()
    }

    /// The device's index on its worker.
    pub fn device_index(&self) -> u32 {
        self.device
    }

    /// Set the smallest batch for which this device runs an op whose
    /// weights are in host memory (`-nomb`; a connection serves several
    /// runs of one process).
    pub fn set_offload_min_batch(&self, n: i64) {
        self.offload_min_batch.store(n, Ordering::Relaxed);
    }

    /// The connection (shared by the worker's devices).
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    /// `(free, total)` bytes of the worker device's memory, asked now.
    pub fn device_memory(&self) -> Result<(u64, u64), BackendError> {
        Ok(crate::worker::device_memory(&self.conn, self.device)?)
    }

    fn own<'a>(&self, buf: &'a dyn Buffer) -> Option<&'a RpcBuffer> {
        buf.as_any()
            .downcast_ref::<RpcBuffer>()
            .filter(|b| Arc::ptr_eq(b.conn(), &self.conn) && b.device() == self.device)
    }

    fn place(&self, d: &TensorData) -> Result<Placed, String> {
        match self.own(d.buffer.as_ref()) {
            Some(b) => Ok(Placed {
                buffer: b.remote(),
                data: b.addr(d.offset),
            }),
            None => Err(format!(
                "its memory is in {}, which {} cannot read (a copy to {} was expected)",
                d.buffer.name(),
                self.name,
                self.name
            )),
        }
    }

    /// COPY_TENSOR of `len` bytes between two ranges of this worker.
    fn copy_on_worker(
        &self,
        src: &RpcBuffer,
        src_off: usize,
        dst: &RpcBuffer,
        dst_off: usize,
        len: usize,
    ) -> Result<bool, BackendError> {
        if len == 0 {
            return Ok(true);
        }
        if len > u32::MAX as usize {
            return Ok(false);
        }
        ggml_core::buffer::check_range(src.name(), src.size(), src_off, len)?;
        ggml_core::buffer::check_range(dst.name(), dst.size(), dst_off, len)?;
        let mut req = Vec::with_capacity(2 * RPC_TENSOR_SIZE);
        byte_span(src.remote(), src.addr(src_off), len).encode(&mut req);
        byte_span(dst.remote(), dst.addr(dst_off), len).encode(&mut req);
        let ok = self.conn.call(Cmd::CopyTensor, &[&req], 1)?;
        Ok(ok[0] != 0)
    }
}

impl std::fmt::Debug for RpcBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RpcBackend({} of {})", self.name, self.endpoint())
    }
}

/// Whether a node's element strides are what ggml's CPU kernels assert:
/// every op but the copies and views reads and writes rows of consecutive
/// elements (`nb[0]` the type's size); ggml aborts the worker otherwise
/// (this engine's CPU kernels take any strides, so its own `supports_op`
/// cannot tell).
fn ggml_rows_ok(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    if t.op.is_view() || matches!(t.op, Op::None | Op::Cpy | Op::Cont | Op::Dup) {
        return true;
    }
    std::iter::once(node)
        .chain(t.src.iter().copied())
        .all(|x| g.tensor(x).rows_contiguous())
}

fn fits_u32(g: &Graph, t: TensorId) -> bool {
    let x = g.tensor(t);
    x.ne.iter().all(|&n| (0..=u32::MAX as i64).contains(&n))
        && x.nb.iter().all(|&b| b <= u32::MAX as usize)
}

impl BackendDevice for RpcBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_host(&self) -> bool {
        false
    }

    fn alloc_buffer(
        &self,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Arc<dyn Buffer>, BackendError> {
        if size > self.max_size {
            return Err(BackendError::OutOfMemory(format!(
                "{} ({}): a buffer of {size} bytes is larger than the worker's largest, {}",
                self.name,
                self.endpoint(),
                self.max_size
            )));
        }
        Ok(Arc::new(RpcBuffer::alloc(
            &self.conn,
            self.device,
            &self.name,
            size,
            usage,
        )?))
    }

    fn can_use_buffer(&self, buf: &dyn Buffer) -> bool {
        self.own(buf).is_some()
    }

    fn supports_op(&self, g: &Graph, node: TensorId) -> bool {
        let t = g.tensor(node);
        t.src.len() <= crate::proto::MAX_SRC
            && fits_u32(g, node)
            && t.src.iter().all(|&s| fits_u32(g, s))
            && ggml_rows_ok(g, node)
            && ggml_core::cpu::ops::supports(g, node)
    }

    fn offload_op(&self, g: &Graph, node: TensorId) -> bool {
        offload_host_weight_op(g, node, self.offload_min_batch.load(Ordering::Relaxed))
    }

    fn memory(&self) -> Option<(usize, usize)> {
        let (free, total) = self.device_memory().ok()?;
        Some((
            usize::try_from(free).unwrap_or(usize::MAX),
            usize::try_from(total).unwrap_or(usize::MAX),
        ))
    }
}

impl BackendStream for RpcBackend {
    fn compute(&self, g: &Graph, nodes: &[TensorId]) -> Result<(), BackendError> {
        if nodes.is_empty() {
            return Ok(());
        }
        let payload = graph_wire::serialize(g, nodes, self.device, &|d| self.place(d))?;
        self.conn.graph_compute(self.device, payload)?;
        Ok(())
    }

    fn record_event(&self) -> Result<Event, BackendError> {
        Ok(Event(Arc::new(())))
    }

    fn copy_within(
        &self,
        src: &TensorData,
        src_off: usize,
        dst: &TensorData,
        dst_off: usize,
        len: usize,
    ) -> Result<bool, BackendError> {
        match (self.own(src.buffer.as_ref()), self.own(dst.buffer.as_ref())) {
            (Some(s), Some(d)) => {
                self.copy_on_worker(s, src.offset + src_off, d, dst.offset + dst_off, len)
            }
            _ => Ok(false),
        }
    }

    fn copy_from_peer(
        &self,
        _src_be: &dyn BackendDevice,
        src: &TensorData,
        dst: &TensorData,
        len: usize,
        _stream: Stream,
        _after: Option<&Event>,
    ) -> Result<bool, BackendError> {
        // devices of one worker copy on the worker; other pairs through
        // this host
        let s = src.buffer.as_any().downcast_ref::<RpcBuffer>();
        match (s, self.own(dst.buffer.as_ref())) {
            (Some(s), Some(d)) if Arc::ptr_eq(s.conn(), &self.conn) => {
                self.copy_on_worker(s, src.offset, d, dst.offset, len)
            }
            _ => Ok(false),
        }
    }
}

impl BackendDiagnostics for RpcBackend {
    fn link_counters(&self) -> Option<&LinkCounters> {
        Some(self.conn.counters())
    }
}

impl Backend for RpcBackend {
    fn diagnostics(&self) -> Option<&dyn BackendDiagnostics> {
        Some(self)
    }
}
