//! Graph building: the shared blocks every architecture uses
//! ([`blocks`]: norm, attention, MoE FFN) and the decoder that stacks them
//! ([`decoder`]). A new architecture is a [`crate::arch::LayerStyle`] and,
//! at most, a short block of its own: [`mla`] (deepseek2's latent
//! attention) and [`routing`] (grouped sigmoid and biased expert routing of
//! deepseek2 and gpt-oss).

pub mod blocks;
pub mod decoder;
pub mod mla;
pub mod moe;
pub mod routing;

use std::collections::HashMap;
use std::sync::Arc;

use ggml_core::{Graph, Tensor, TensorData, TensorId};

use crate::model::{Model, WeightId};
use crate::moe_cache::CacheLayout;

/// A graph under construction over a model's weights: each weight becomes
/// one leaf, created on first use.
pub struct GraphBuilder<'m> {
    /// The graph.
    pub g: Graph,
    /// The model.
    pub model: &'m Model,
    /// The expert cache the MoE layers read, when there is one.
    pub moe_cache: Option<Arc<CacheLayout>>,
    /// Cached layers whose ubatch was too large for their cache (they read
    /// the host expert tensors instead).
    pub moe_cache_bypassed: Vec<u32>,
    /// The CPU maps of hybrid experts, when hybrid placement is on
    /// ([`crate::moe_cache::hybrid`]).
    pub moe_hybrid: Option<Arc<crate::moe_cache::hybrid::CpuMaps>>,
    /// Predict the next cached layer's experts through its router
    /// (`--moe-predict router`, see [`crate::moe_cache::predict`]).
    pub moe_predict: bool,
    /// Predict every MoE layer's experts for this (prompt) ubatch, for the
    /// selective prefetch ([`crate::moe_cache::prefetch`]).
    pub prefetch_predict: bool,
    /// Route by a trace (`--expert-trace-in`): MoE selections are inputs
    /// ([`crate::moe_cache::trace::forced`]).
    pub forced_routing: bool,
    /// With forced routing, each MoE layer's ids input, for the context.
    pub forced_ids: Vec<(usize, TensorId)>,
    /// With forced routing and hybrid experts, each cached layer's twin of
    /// its ids input for the CPU path, in host memory (the device's ids
    /// input lives on the device).
    pub forced_ids_host: Vec<(usize, TensorId)>,
    /// Keep the final norm's output (the last hidden states of the output
    /// rows) as a graph output ([`decoder::DecoderGraph::embd`]).
    pub want_embd: bool,
    leafs: HashMap<WeightId, TensorId>,
}

impl<'m> GraphBuilder<'m> {
    /// An empty graph over `model`.
    pub fn new(model: &'m Model) -> GraphBuilder<'m> {
        GraphBuilder {
            g: Graph::new(),
            model,
            moe_cache: None,
            moe_cache_bypassed: Vec::new(),
            moe_hybrid: None,
            moe_predict: false,
            prefetch_predict: false,
            forced_routing: false,
            forced_ids: Vec::new(),
            forced_ids_host: Vec::new(),
            want_embd: false,
            leafs: HashMap::new(),
        }
    }

    /// The leaf for a weight.
    pub fn w(&mut self, id: WeightId) -> TensorId {
        if let Some(&t) = self.leafs.get(&id) {
            return t;
        }
        let w = self.model.weight(id);
        let mut t = Tensor::new(w.ty, w.ne);
        t.name = w.name.clone();
        t.flags.weight = true;
        t.data = Some(w.data.clone());
        let tid = self.g.push(t);
        self.leafs.insert(id, tid);
        tid
    }

    /// A leaf over existing memory (KV cache tensors).
    pub fn bound(
        &mut self,
        name: &str,
        ty: ggml_core::GgmlType,
        ne: [i64; 4],
        data: TensorData,
    ) -> TensorId {
        let mut t = Tensor::new(ty, ne);
        t.name = name.to_string();
        t.data = Some(data);
        self.g.push(t)
    }

    /// Name a tensor `name-il` (llama.cpp's callback names).
    pub fn name(&mut self, t: TensorId, name: &str, il: Option<usize>) -> TensorId {
        let n = match il {
            Some(il) => format!("{name}-{il}"),
            None => name.to_string(),
        };
        self.g.set_name(t, n)
    }
}
