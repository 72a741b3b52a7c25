//! Decode prediction in the graph (`--moe-predict router`, and the guess
//! of the selective prefetch): beside layer `l`'s router, layer `l + 1`'s
//! router applied to layer `l`'s normalized FFN input, a graph output the
//! hook reads ([`crate::moe_cache::predict`]).

use ggml_core::TensorId;

use crate::graph::GraphBuilder;
use crate::model::FfnWeights;
use crate::moe_cache::predict::pred_name;

impl GraphBuilder<'_> {
    /// With the prediction on and the cache serving layer `il + 1` for this
    /// ubatch, or with the selective prefetch possible for it
    /// (`prefetch_predict`): predict layer `il + 1`'s experts from `cur`
    /// (layer `il`'s normalized FFN input, `[n_embd, n_tokens]`) through
    /// its router.
    pub fn moe_predict_next(&mut self, il: usize, cur: TensorId) {
        let nt = self.g.tensor(cur).ne[1].max(0) as usize;
        let for_cache = self.moe.predict_router
            && !self.moe.cache_lent
            && self
                .moe
                .cache
                .as_ref()
                .is_some_and(|l| l.layer_for(il + 1, nt).is_some());
        if !for_cache && !self.moe.prefetch_predict {
            return;
        }
        let Some(FfnWeights::Moe(mw)) = self.model.layers.get(il + 1).map(|l| &l.ffn) else {
            return;
        };
        let gate_inp = mw.gate_inp;
        let n_used = self.model.hparams.n_expert_used as i32;
        let logits = self.linear(gate_inp, cur, None);
        self.name(logits, "ffn_moe_pred_logits", Some(il + 1));
        let pred = self.g.top_k(logits, n_used);
        self.g.tensor_mut(pred).name = pred_name(il + 1);
        self.g.set_output(pred);
        self.g.build_forward_expand(pred);
    }
}
