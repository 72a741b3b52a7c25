//! A split's nodes as GRAPH_COMPUTE carries them:
//! `device u32 | n_nodes u32 | node ids u64[n_nodes] | n_tensors u32 |
//! rpc_tensor[n_tensors]`.
//!
//! The tensors are the nodes, their sources and the view sources of
//! everything listed; each names its remote buffer and address. A tensor
//! that is not one of the nodes is data to the worker (an input of the
//! split, a weight, a node of an earlier split): its sources are sent as
//! none, since the worker resolves every source id it is given and computes
//! only the listed nodes. Ids are our tensor indices plus one (0 = none).
//!
//! Nodes carry `GGML_TENSOR_FLAG_COMPUTE` (ggml's CPU backend skips nodes
//! without it) and a use count of 0, which keeps the worker from fusing a
//! node into its consumer (RMS_NORM + MUL): a fused node's own output is
//! never written, and another split may read it. That costs the worker a
//! little speed and keeps its results those of the plain kernels.

use ggml_core::tensor::TensorData;
use ggml_core::{BackendError, GgmlType, Graph, TensorId};

use crate::opmap;
use crate::ordinals::flag;
use crate::proto::{MAX_DIMS, MAX_SRC, RPC_TENSOR_SIZE};
use crate::wire::{put_u32, put_u64, Reader, RpcTensor, WireError};

/// Where a tensor lives on the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The remote buffer handle.
    pub buffer: u64,
    /// The tensor's remote address.
    pub data: u64,
}

/// The wire id of a tensor.
pub fn wire_id(t: TensorId) -> u64 {
    u64::from(t.0) + 1
}

fn u32_of(v: u64, what: &str, name: &str) -> Result<u32, BackendError> {
    u32::try_from(v).map_err(|_| {
        BackendError::Unsupported(format!(
            "tensor '{name}': {what} {v} does not fit the RPC protocol's 32-bit field"
        ))
    })
}

/// One tensor as `rpc_tensor`; `place` says where its memory is (or why
/// the worker cannot reach it).
pub fn describe(
    g: &Graph,
    id: TensorId,
    is_node: bool,
    place: &dyn Fn(&TensorData) -> Result<Placed, String>,
) -> Result<RpcTensor, BackendError> {
    let t = g.tensor(id);
    let data = g
        .data_of(id)
        .ok_or_else(|| BackendError::NotAllocated(t.name.clone()))?;
    let p = place(&data)
        .map_err(|why| BackendError::Unsupported(format!("tensor '{}': {why}", t.name)))?;
    let mut r = RpcTensor {
        id: wire_id(id),
        ty: t.ty.id(),
        buffer: p.buffer,
        data: p.data,
        view_src: t.view_src.map_or(0, wire_id),
        view_offs: t.view_offs as u64,
        ..RpcTensor::default()
    };
    for d in 0..MAX_DIMS {
        r.ne[d] = u32_of(t.ne[d].max(0) as u64, "ne", &t.name)?;
        r.nb[d] = u32_of(t.nb[d] as u64, "nb", &t.name)?;
    }
    let (op, params) = opmap::encode(&t.op, t.view_offs);
    r.op = op;
    r.op_params = params;
    if t.flags.input {
        r.flags |= flag::INPUT;
    }
    if t.flags.output {
        r.flags |= flag::OUTPUT;
    }
    if is_node {
        if t.src.len() > MAX_SRC {
            return Err(BackendError::Unsupported(format!(
                "node '{}' has {} sources, more than ggml's {MAX_SRC}",
                t.name,
                t.src.len()
            )));
        }
        for (k, s) in opmap::to_ggml_sources(&t.op, &t.src)
            .into_iter()
            .enumerate()
        {
            r.src[k] = wire_id(s);
        }
        if t.op != ggml_core::Op::None {
            r.flags |= flag::COMPUTE;
        }
    }
    r.set_name(&t.name);
    Ok(r)
}

/// The GRAPH_COMPUTE payload of `nodes` of `g` on worker device `device`.
pub fn serialize(
    g: &Graph,
    nodes: &[TensorId],
    device: u32,
    place: &dyn Fn(&TensorData) -> Result<Placed, String>,
) -> Result<Vec<u8>, BackendError> {
    // 0: not listed, 1: listed as data, 2: listed as a node
    let mut seen = vec![0u8; g.len()];
    let mut order: Vec<TensorId> = Vec::with_capacity(nodes.len() * 3);
    for &n in nodes {
        seen[n.index()] = 2;
    }
    let push = |t: TensorId, seen: &mut Vec<u8>, order: &mut Vec<TensorId>| {
        // the tensor and its view sources
        let mut cur = Some(t);
        while let Some(c) = cur {
            if seen[c.index()] == 1 {
                break;
            }
            if seen[c.index()] == 0 {
                seen[c.index()] = 1;
                order.push(c);
            }
            cur = g.tensor(c).view_src;
        }
    };
    for &n in nodes {
        for &s in &g.tensor(n).src {
            if seen[s.index()] == 0 {
                push(s, &mut seen, &mut order);
            }
        }
        if let Some(v) = g.tensor(n).view_src {
            if seen[v.index()] == 0 {
                push(v, &mut seen, &mut order);
            }
        }
    }
    let n_tensors = order.len() + nodes.len();
    let mut out = Vec::with_capacity(12 + nodes.len() * 8 + n_tensors * RPC_TENSOR_SIZE);
    put_u32(&mut out, device);
    put_u32(&mut out, nodes.len() as u32);
    for &n in nodes {
        put_u64(&mut out, wire_id(n));
    }
    put_u32(&mut out, n_tensors as u32);
    for &t in &order {
        describe(g, t, false, place)?.encode(&mut out);
    }
    for &n in nodes {
        describe(g, n, true, place)?.encode(&mut out);
    }
    Ok(out)
}

/// A GRAPH_COMPUTE payload read back (by the fake worker).
#[derive(Clone, Debug, PartialEq)]
pub struct WireGraph {
    /// The worker's device.
    pub device: u32,
    /// The node ids, in compute order.
    pub nodes: Vec<u64>,
    /// Every tensor the message describes.
    pub tensors: Vec<RpcTensor>,
}

/// Read a GRAPH_COMPUTE payload.
pub fn deserialize(payload: &[u8]) -> Result<WireGraph, WireError> {
    let mut r = Reader::new(payload);
    let device = r.u32()?;
    let n_nodes = r.u32()? as usize;
    if r.remaining() < n_nodes.saturating_mul(8) {
        return Err(WireError(format!(
            "GRAPH_COMPUTE of {n_nodes} nodes in {} bytes",
            payload.len()
        )));
    }
    let nodes = (0..n_nodes)
        .map(|_| r.u64())
        .collect::<Result<Vec<_>, _>>()?;
    let n_tensors = r.u32()? as usize;
    if r.remaining() < n_tensors.saturating_mul(RPC_TENSOR_SIZE) {
        return Err(WireError(format!(
            "GRAPH_COMPUTE of {n_tensors} tensors in {} bytes",
            payload.len()
        )));
    }
    let tensors = (0..n_tensors)
        .map(|_| RpcTensor::decode(&mut r))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(WireGraph {
        device,
        nodes,
        tensors,
    })
}

/// The element type of a wire tensor.
pub fn tensor_type(t: &RpcTensor) -> Result<GgmlType, WireError> {
    GgmlType::from_id(t.ty).ok_or_else(|| WireError(format!("type {} is not one of ours", t.ty)))
}
