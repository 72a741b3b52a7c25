//! Forced routing in the graph (`--expert-trace-in`): each MoE layer's
//! selection is an I32 input filled from a trace instead of the router's
//! `top_k` ([`crate::moe_cache::trace::forced`]).

use ggml_core::{GgmlType, TensorId};

use crate::graph::GraphBuilder;

impl GraphBuilder<'_> {
    /// Layer `il`'s selected experts: `top_k(scores, n_used)`, or with
    /// forced routing an I32 input `[n_used, n_rows]` the context fills
    /// from the trace (recorded in `forced_ids`).
    pub fn moe_select(&mut self, scores: TensorId, n_used: i32, il: usize) -> TensorId {
        if self.moe.forced.is_none() {
            return self.g.top_k(scores, n_used);
        }
        let nt = self.g.tensor(scores).ne[1];
        let t = self.g.new_tensor_2d(GgmlType::I32, i64::from(n_used), nt);
        self.g.set_input(t);
        self.moe.forced_ids.push((il, t));
        t
    }

    /// With forced routing, the CPU path of hybrid layer `il` reads a twin
    /// of `selected` (its forced ids input) in host memory, filled with
    /// the same ids, so that it needs no copy from the device; otherwise
    /// `selected` itself.
    pub fn moe_select_host(&mut self, selected: TensorId, il: usize) -> TensorId {
        if self.moe.forced.is_none() || !self.moe.forced_ids.iter().any(|&(_, t)| t == selected) {
            return selected;
        }
        let [n_used, nt, ..] = self.g.tensor(selected).ne;
        let t = self.g.new_tensor_2d(GgmlType::I32, n_used, nt);
        self.g.set_input(t);
        self.moe.forced_ids_host.push((il, t));
        t
    }
}
