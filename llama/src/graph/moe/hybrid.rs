//! Hybrid experts in the graph: the CPU path of a cached layer, whose
//! partial output is added to the device path's before the expert weights
//! apply (see [`crate::moe_cache::hybrid`]).
//!
//! The CPU path is `cpu_ids = get_rows(cpu_map, ids)`, then gate, up, GLU
//! and down through `mul_mat_id` over the host expert tensors with
//! `cpu_ids`; every node of it is flagged `host`, so that the scheduler
//! keeps it on the CPU even where the device would claim host-weight ops
//! (`--offload-min-batch`). It reads the activations and the ids from the
//! device (copies after the router's split) and nothing the device path
//! computes, so it runs while the device path is in flight.

use ggml_core::op::GluOp;
use ggml_core::{GgmlType, Tensor, TensorId};

use crate::graph::GraphBuilder;

/// What the CPU path of a layer reads besides the activations and ids.
#[derive(Clone, Copy, Debug)]
pub struct HostExperts {
    /// The host expert tensors (gate, up, down).
    pub exps: [TensorId; 3],
    /// Per-expert biases of gate and up (`add_id` by the router's ids).
    pub biases: [Option<TensorId>; 2],
    /// The gated activation.
    pub act: GluOp,
}

impl GraphBuilder<'_> {
    /// When hybrid experts serve cached layer `il`: `device` (the device
    /// path's down output, `[n_embd, n_used, n_tokens]`, before weights and
    /// down biases) plus the CPU path's over `x` (`[n_embd, 1, n_tokens]`)
    /// and the router's `selected` ids; otherwise `device` unchanged.
    pub fn moe_hybrid_add(
        &mut self,
        il: usize,
        device: TensorId,
        x: TensorId,
        selected: TensorId,
        host: HostExperts,
    ) -> TensorId {
        let Some(data) = self
            .moe
            .hybrid
            .as_ref()
            .and_then(|m| m.layers.get(il).cloned().flatten())
        else {
            return device;
        };
        let first = self.g.len();
        // forced routing: the ids' twin in host memory
        let selected = self.moe_select_host(selected, il);
        let [n_used, nt, ..] = self.g.tensor(selected).ne;
        let n_expert = self.g.tensor(host.exps[0]).ne[2];
        let mut map = Tensor::new(GgmlType::I32, [1, n_expert, 1, 1]);
        map.name = format!("moe_hybrid_cpu_map-{il}");
        map.flags.weight = true;
        map.data = Some(data);
        let map = self.g.push(map);
        let flat = self.g.reshape(selected, &[n_used * nt, 1]);
        let ids = self.g.get_rows(map, flat);
        self.name(ids, "ffn_moe_cpu_ids", Some(il));
        let ids = self.g.reshape(ids, &[n_used, nt]);
        let [gate_w, up_w, down_w] = host.exps;
        let mut up = self.g.mul_mat_id(up_w, x, ids);
        if let Some(b) = host.biases[1] {
            up = self.g.add_id(up, b, selected);
        }
        self.name(up, "ffn_moe_up_cpu", Some(il));
        let mut gate = self.g.mul_mat_id(gate_w, x, ids);
        if let Some(b) = host.biases[0] {
            gate = self.g.add_id(gate, b, selected);
        }
        self.name(gate, "ffn_moe_gate_cpu", Some(il));
        let par = self.g.glu_split(gate, up, host.act);
        let down = self.g.mul_mat_id(down_w, par, ids);
        self.name(down, "ffn_moe_down_cpu", Some(il));
        for i in first..self.g.len() {
            let id = TensorId(i as u32);
            let t = self.g.tensor_mut(id);
            if !t.op.is_view() && t.op != ggml_core::Op::None {
                t.flags.host = true;
            }
        }
        let sum = self.g.add(device, down);
        self.name(sum, "ffn_moe_down_hybrid", Some(il))
    }
}
