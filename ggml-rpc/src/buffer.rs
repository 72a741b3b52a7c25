//! A buffer in a worker's memory ([`RpcBuffer`]): its handle and remote
//! base address (zeroed at allocation, BUFFER_CLEAR), and byte reads and writes as GET_TENSOR / SET_TENSOR
//! (SET_TENSOR_HASH first for weights above 10 MiB).
//!
//! Bytes move as a one-dimensional I8 tensor spanning exactly the range,
//! so the worker's checks (the tensor inside its buffer) hold for any range;
//! ranges go in pieces of at most 1 GiB (the protocol's `ne` is 32 bits).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use ggml_core::buffer::check_range;
use ggml_core::{BackendError, Buffer, BufferUsage};

use crate::conn::Conn;
use crate::hash::fnv1a;
use crate::ordinals;
use crate::proto::{Cmd, HASH_THRESHOLD};
use crate::wire::RpcTensor;

/// The largest range one SET_TENSOR or GET_TENSOR moves.
pub const MAX_PIECE: usize = 1 << 30;

/// `GGML_TYPE_I8`: the type a raw byte range travels as.
const I8: u32 = 24;

/// A span of `len` bytes at remote address `data` of buffer `buffer`, as
/// the `rpc_tensor` the byte commands take.
pub fn byte_span(buffer: u64, data: u64, len: usize) -> RpcTensor {
    let len = len as u32;
    RpcTensor {
        id: data,
        ty: I8,
        buffer,
        ne: [len, 1, 1, 1],
        nb: [1, len, len, len],
        op: ordinals::op::NONE,
        data,
        ..RpcTensor::default()
    }
}

/// Memory on a worker's device.
pub struct RpcBuffer {
    conn: Arc<Conn>,
    device: u32,
    name: String,
    remote: u64,
    base: u64,
    size: usize,
    usage: BufferUsage,
}

impl RpcBuffer {
    /// Allocate `size` bytes on `device` of the worker behind `conn`;
    /// `name` is the device's (`RPC0`).
    pub fn alloc(
        conn: &Arc<Conn>,
        device: u32,
        name: &str,
        size: usize,
        usage: BufferUsage,
    ) -> Result<RpcBuffer, BackendError> {
        let mut req = Vec::with_capacity(12);
        req.extend_from_slice(&device.to_le_bytes());
        req.extend_from_slice(&(size.max(1) as u64).to_le_bytes());
        let rsp = conn.call(Cmd::AllocBuffer, &[&req], 16)?;
        let remote = u64::from_le_bytes(rsp[..8].try_into().unwrap_or_default());
        let remote_size = u64::from_le_bytes(rsp[8..].try_into().unwrap_or_default());
        if remote == 0 {
            return Err(conn
                .refused(
                    Cmd::AllocBuffer,
                    format!("the worker could not allocate {size} bytes on its device {device}"),
                )
                .into());
        }
        let fail = |e: crate::conn::RpcError| {
            let _ = conn.free_buffer(remote);
            BackendError::from(e)
        };
        if (remote_size as u128) < size as u128 {
            return Err(fail(conn.refused(
                Cmd::AllocBuffer,
                format!("asked for {size} bytes, the worker allocated {remote_size}"),
            )));
        }
        let rsp = conn
            .call(Cmd::BufferGetBase, &[&remote.to_le_bytes()], 8)
            .map_err(fail)?;
        let base = u64::from_le_bytes(rsp[..].try_into().unwrap_or_default());
        // zeroed, as host and CUDA buffers are (a KV cache's unused cells
        // are read with weight 0, and 0 * NaN would be NaN)
        let mut clear = remote.to_le_bytes().to_vec();
        clear.push(0);
        conn.send(Cmd::BufferClear, &[&clear]).map_err(fail)?;
        Ok(RpcBuffer {
            conn: Arc::clone(conn),
            device,
            name: name.to_string(),
            remote,
            base,
            size,
            usage,
        })
    }

    /// The worker's handle of this buffer.
    pub fn remote(&self) -> u64 {
        self.remote
    }

    /// The remote address of byte `offset`.
    pub fn addr(&self, offset: usize) -> u64 {
        self.base + offset as u64
    }

    /// The worker device it lives on.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// The connection it belongs to.
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    fn set_piece(&self, offset: usize, data: &[u8]) -> Result<(), BackendError> {
        let span = byte_span(self.remote, self.addr(offset), data.len());
        let mut head = Vec::with_capacity(crate::proto::RPC_TENSOR_SIZE + 9);
        span.encode(&mut head);
        let mut cache_flag = 0u8;
        if self.usage == BufferUsage::Weights && data.len() > HASH_THRESHOLD {
            let mut req = head.clone();
            req.extend_from_slice(&0u64.to_le_bytes());
            req.extend_from_slice(&fnv1a(data).to_le_bytes());
            let found = self.conn.call(Cmd::SetTensorHash, &[&req], 1)?;
            if found[0] != 0 {
                return Ok(());
            }
            // not in the worker's cache: send it, and ask it to keep it
            cache_flag = 1;
        }
        head.push(cache_flag);
        head.extend_from_slice(&0u64.to_le_bytes());
        self.conn.send(Cmd::SetTensor, &[&head, data])?;
        Ok(())
    }

    fn get_piece(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        let span = byte_span(self.remote, self.addr(offset), out.len());
        let mut req = Vec::with_capacity(crate::proto::RPC_TENSOR_SIZE + 16);
        span.encode(&mut req);
        req.extend_from_slice(&0u64.to_le_bytes());
        req.extend_from_slice(&(out.len() as u64).to_le_bytes());
        self.conn.call_into(Cmd::GetTensor, &[&req], out)?;
        Ok(())
    }
}

impl Drop for RpcBuffer {
    fn drop(&mut self) {
        // a dead connection has nothing left to free
        let _ = self.conn.free_buffer(self.remote);
    }
}

impl fmt::Debug for RpcBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RpcBuffer({} {} bytes at {:#x})",
            self.name, self.size, self.base
        )
    }
}

impl Buffer for RpcBuffer {
    fn name(&self) -> &str {
        &self.name
    }

    fn size(&self) -> usize {
        self.size
    }

    fn is_host(&self) -> bool {
        false
    }

    fn usage(&self) -> BufferUsage {
        self.usage
    }

    fn write(&self, offset: usize, data: &[u8]) -> Result<(), BackendError> {
        check_range(&self.name, self.size, offset, data.len())?;
        for (k, piece) in data.chunks(MAX_PIECE).enumerate() {
            self.set_piece(offset + k * MAX_PIECE, piece)?;
        }
        Ok(())
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        check_range(&self.name, self.size, offset, out.len())?;
        for (k, piece) in out.chunks_mut(MAX_PIECE).enumerate() {
            self.get_piece(offset + k * MAX_PIECE, piece)?;
        }
        Ok(())
    }

    fn base_ptr(&self) -> Option<*mut u8> {
        None
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
