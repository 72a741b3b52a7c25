//! The MoE features' parts of a layer's graph, and what they read and
//! record ([`MoeGraphInputs`], as llama.cpp's `llm_graph_input_*`
//! classes): the expert cache's slot lookup and banks ([`cache`]), the CPU
//! path of hybrid experts ([`hybrid`]), the router's guess of the next
//! layer's experts ([`predict`]), and forced routing's ids inputs
//! ([`forced`]). Each is a method of [`super::GraphBuilder`] that the
//! shared MoE FFN blocks call; each does nothing unless its feature is on
//! in the builder's [`MoeGraphInputs`].
//!
//! Data flow: the context's [`crate::moe_runtime::MoeRuntime`] fills the
//! settings half of a [`MoeGraphInputs`] for each graph it builds; the
//! builder records in its other half what the graph made (bypassed
//! layers, ids inputs); the context keeps it with the graph and, per
//! ubatch, [`MoeGraphInputs::set_inputs`] writes the inputs.

pub mod cache;
pub mod forced;
pub mod hybrid;
pub mod predict;

use std::sync::Arc;

use ggml_core::{Graph, TensorId};

use crate::error::{LlamaError, Result};
use crate::moe_cache::hybrid::CpuMaps;
use crate::moe_cache::trace::forced::ForcedRouting;
use crate::moe_cache::CacheLayout;

/// What a graph's MoE layers read beyond the model's weights (the
/// settings, from the context's MoE runtime) and what building the graph
/// recorded about them. The default: no MoE feature, nothing recorded.
#[derive(Clone, Default)]
pub struct MoeGraphInputs {
    /// The expert cache the MoE layers read, when there is one.
    pub cache: Option<Arc<CacheLayout>>,
    /// The CPU maps of hybrid experts, when hybrid placement is on
    /// ([`crate::moe_cache::hybrid`]).
    pub hybrid: Option<Arc<CpuMaps>>,
    /// Predict the next cached layer's experts through its router
    /// (`--moe-predict router`, see [`crate::moe_cache::predict`]).
    pub predict_router: bool,
    /// Predict every MoE layer's experts for this (prompt) ubatch, for the
    /// selective prefetch ([`crate::moe_cache::prefetch`]).
    pub prefetch_predict: bool,
    /// Route by a trace (`--expert-trace-in`): MoE selections are inputs
    /// filled from it ([`crate::moe_cache::trace::forced`]).
    pub forced: Option<Arc<ForcedRouting>>,
    /// The compute alias lends the cache's banks to this graph (a prompt
    /// ubatch larger than the cache's insert limit): no layer reads the
    /// cache, not even the last one, whose rows are only the outputs
    /// ([`crate::moe_cache::alias`]).
    pub cache_lent: bool,
    /// Recorded: cached layers whose ubatch was too large for their cache
    /// (they read the host expert tensors instead).
    pub bypassed: Vec<u32>,
    /// Recorded, with forced routing: each MoE layer's ids input.
    pub forced_ids: Vec<(usize, TensorId)>,
    /// Recorded, with forced routing and hybrid experts: each cached
    /// layer's twin of its ids input for the CPU path, in host memory (the
    /// device's ids input lives on the device).
    pub forced_ids_host: Vec<(usize, TensorId)>,
}

impl MoeGraphInputs {
    /// Write the inputs the MoE layers made, for a ubatch whose tokens are
    /// at positions `pos` with output rows `out_rows`: with forced routing,
    /// each MoE layer's ids from the trace at its rows' positions (the last
    /// layer routes only the output rows).
    pub fn set_inputs(&self, g: &Graph, pos: &[i32], out_rows: &[i32]) -> Result<()> {
        let Some(f) = &self.forced else {
            return Ok(());
        };
        for &(il, t) in self.forced_ids.iter().chain(&self.forced_ids_host) {
            let rows = g.tensor(t).ne[1] as usize;
            let bytes = if rows == pos.len() {
                f.ids(il, pos.iter().copied())
            } else {
                f.ids(il, out_rows.iter().map(|&o| pos[o as usize]))
            };
            g.write_bytes(t, &bytes.map_err(LlamaError::Invalid)?)?;
        }
        Ok(())
    }
}
