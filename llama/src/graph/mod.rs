//! Graph building: the shared blocks every architecture uses
//! ([`blocks`]: norm, attention, MoE FFN) and the decoder that stacks them
//! ([`decoder`]). A new architecture is a [`crate::arch::LayerStyle`] and,
//! at most, a short block of its own: [`mla`] (deepseek2's latent
//! attention) and [`routing`] (grouped sigmoid and biased expert routing of
//! deepseek2 and gpt-oss). The MoE features (expert cache, hybrid experts,
//! decode prediction, forced routing) add their nodes through [`moe`].

pub mod blocks;
pub mod decoder;
pub mod mla;
pub mod moe;
pub mod routing;

use std::collections::HashMap;

use ggml_core::{Graph, Tensor, TensorData, TensorId};

use crate::model::{Model, WeightId};
use moe::MoeGraphInputs;

/// A graph under construction over a model's weights: each weight becomes
/// one leaf, created on first use.
pub struct GraphBuilder<'m> {
    /// The graph.
    pub g: Graph,
    /// The model.
    pub model: &'m Model,
    /// What the MoE layers read and what the build records about them
    /// ([`moe::MoeGraphInputs`]; no MoE feature by default).
    pub moe: MoeGraphInputs,
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
            moe: MoeGraphInputs::default(),
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
