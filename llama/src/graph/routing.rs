//! The MoE FFN of deepseek2 and gpt-oss (llama.cpp's `build_moe_ffn` with
//! its gating functions, selection bias, expert groups and expert biases):
//!
//! - DeepSeek-V3: `p = sigmoid(router · x)`; selection scores `p + exp_probs_b`;
//!   experts in contiguous groups, a group scoring the sum of its two best
//!   selection scores, only the best `expert_group_used_count` groups kept;
//!   top-k selection scores pick the experts; weights are the unbiased `p`
//!   of the chosen, normalised and scaled by `expert_weights_scale`.
//! - gpt-oss: `router · x + bias`, top-k of the logits, weights the softmax
//!   over the chosen; experts add per-expert biases through `add_id` and
//!   use the clamped `swiglu_oai` activation.

use ggml_core::op::GluOp;
use ggml_core::TensorId;

use super::GraphBuilder;
use crate::arch::Arch;
use crate::graph::moe::hybrid::HostExperts;
use crate::hparams::ExpertGating;
use crate::model::MoeWeights;

/// llama.cpp's `swiglu_oai` constants for gpt-oss (not in the GGUF).
pub const SWIGLU_OAI_ALPHA: f32 = 1.702;
/// The clamp of `swiglu_oai`.
pub const SWIGLU_OAI_LIMIT: f32 = 7.0;

/// The router's choice: expert ids `[n_used, n_tokens]` and their weights
/// `[1, n_used, n_tokens]`.
#[derive(Clone, Copy, Debug)]
pub struct Routing {
    /// Selected experts, I32 `[n_used, n_tokens]`.
    pub selected: TensorId,
    /// Their weights, F32 `[1, n_used, n_tokens]`.
    pub weights: TensorId,
}

impl GraphBuilder<'_> {
    /// The routed experts of a deepseek2 or gpt-oss layer (shared experts
    /// excluded). Returns the output `[n_embd, n_tokens]` and the selected
    /// expert ids.
    pub fn moe_ffn_routed(
        &mut self,
        cur: TensorId,
        m: &MoeWeights,
        il: usize,
    ) -> (TensorId, TensorId) {
        let r = self.route(cur, m, il);
        let act = if self.model.hparams.arch == Arch::GptOss {
            GluOp::SwigluOai {
                alpha: SWIGLU_OAI_ALPHA.into(),
                limit: SWIGLU_OAI_LIMIT.into(),
            }
        } else {
            GluOp::Swiglu
        };
        let out = self.moe_experts(cur, m, &r, act, il);
        (out, r.selected)
    }

    /// Router: gating function, selection bias, expert groups, top-k, and
    /// the weights of the chosen experts.
    pub fn route(&mut self, cur: TensorId, m: &MoeWeights, il: usize) -> Routing {
        let hp = self.model.hparams.clone();
        let (n_expert, n_used) = (hp.n_expert as i64, hp.n_expert_used as i64);
        let nt = self.g.tensor(cur).ne[1];
        let logits = self.linear(m.gate_inp, cur, m.gate_inp_b);
        self.name(logits, "ffn_moe_logits", Some(il));
        let probs = match hp.expert_gating {
            ExpertGating::Softmax => self.g.soft_max_ext(logits, None, 1.0, 0.0),
            ExpertGating::Sigmoid => self.g.sigmoid(logits),
            ExpertGating::SoftmaxWeight => logits,
        };
        self.name(probs, "ffn_moe_probs", Some(il));
        // the selection bias picks experts; the weights stay unbiased
        let mut sel = match m.exp_probs_b {
            Some(b) => {
                let bt = self.w(b);
                let s = self.g.add(probs, bt);
                self.name(s, "ffn_moe_probs_biased", Some(il))
            }
            None => probs,
        };
        if hp.n_expert_groups > 1 {
            sel = self.mask_expert_groups(sel, nt, il);
        }
        let selected = self.moe_select(sel, n_used as i32, il);
        self.name(selected, "ffn_moe_topk", Some(il));
        let p3 = self.g.reshape_3d(probs, 1, n_expert, nt);
        let mut weights = self.g.get_rows(p3, selected);
        self.name(weights, "ffn_moe_weights", Some(il));
        if hp.expert_gating == ExpertGating::SoftmaxWeight {
            let w2 = self.g.reshape_2d(weights, n_used, nt);
            let w2 = self.g.soft_max_ext(w2, None, 1.0, 0.0);
            weights = self.g.reshape_3d(w2, 1, n_used, nt);
            self.name(weights, "ffn_moe_weights_softmax", Some(il));
        }
        if hp.expert_weights_norm {
            let w2 = self.g.reshape_2d(weights, n_used, nt);
            let sum = self.g.sum_rows(w2);
            let w2 = self.g.div(w2, sum);
            weights = self.g.reshape_3d(w2, 1, n_used, nt);
            self.name(weights, "ffn_moe_weights_norm", Some(il));
        }
        if hp.arch == Arch::Deepseek2 && hp.expert_weights_scale != 1.0 {
            weights = self.g.scale(weights, hp.expert_weights_scale);
            self.name(weights, "ffn_moe_weights_scaled", Some(il));
        }
        Routing { selected, weights }
    }

    /// DeepSeek-V3's group-limited selection: scores `[n_expert, n_tokens]`
    /// of the experts outside the best `n_group_used` groups become `-inf`.
    /// A group's score is the sum of its two best scores.
    fn mask_expert_groups(&mut self, sel: TensorId, nt: i64, il: usize) -> TensorId {
        let hp = self.model.hparams.clone();
        let n_groups = hp.n_expert_groups as i64;
        let per_group = hp.n_expert as i64 / n_groups;
        let groups = self.g.reshape_3d(sel, per_group, n_groups, nt);
        let best2 = self.g.top_k(groups, 2); // [2, n_groups, nt]
        let g4 = self.g.reshape(groups, &[1, per_group, n_groups, nt]);
        let best2 = self.g.get_rows(g4, best2); // [1, 2, n_groups, nt]
        let best2 = self.g.reshape_3d(best2, 2, n_groups, nt);
        let scores = self.g.sum_rows(best2); // [1, n_groups, nt]
        let scores = self.g.reshape_2d(scores, n_groups, nt);
        let kept = self.g.top_k(scores, hp.n_group_used as i32); // [n_group_used, nt]
        self.name(kept, "ffn_moe_group_topk", Some(il));
        let kept_rows = self.g.get_rows(groups, kept); // [per_group, n_group_used, nt]
        let all_out = self.g.scale_bias(groups, 0.0, f32::NEG_INFINITY);
        let masked = self.g.set_rows(all_out, kept_rows, kept);
        let masked = self.g.reshape_2d(masked, hp.n_expert as i64, nt);
        self.name(masked, "ffn_moe_probs_masked", Some(il))
    }

    /// The chosen experts' FFN through `mul_mat_id` (per-expert biases
    /// through `add_id` where the layer has them), weighted and summed over
    /// the used experts.
    pub fn moe_experts(
        &mut self,
        cur: TensorId,
        m: &MoeWeights,
        r: &Routing,
        act: GluOp,
        il: usize,
    ) -> TensorId {
        let hp = self.model.hparams.clone();
        let (n_embd, n_used) = (hp.n_embd as i64, hp.n_expert_used as i64);
        let nt = self.g.tensor(cur).ne[1];
        let selected = r.selected;
        let x = self.g.reshape_3d(cur, n_embd, 1, nt);
        // the expert cache, when it serves this layer: banks and slots in
        // place of the host expert tensors and the expert ids (the biases
        // keep the expert ids: their rows are copied by the selective copy)
        let cached = self.moe_cache_lookup(il, selected);
        let (gate_t, up_t, down_t, ids) = match cached {
            Some(c) => (c.banks[0], c.banks[1], c.banks[2], c.slots),
            None => (
                self.w(m.gate_exps),
                self.w(m.up_exps),
                self.w(m.down_exps),
                selected,
            ),
        };
        let mut up = self.g.mul_mat_id(up_t, x, ids);
        if let Some(b) = m.up_exps_b {
            let bt = self.w(b);
            up = self.g.add_id(up, bt, selected);
        }
        self.name(up, "ffn_moe_up", Some(il));
        let mut gate = self.g.mul_mat_id(gate_t, x, ids);
        if let Some(b) = m.gate_exps_b {
            let bt = self.w(b);
            gate = self.g.add_id(gate, bt, selected);
        }
        self.name(gate, "ffn_moe_gate", Some(il));
        let par = self.g.glu_split(gate, up, act);
        let mut experts = self.g.mul_mat_id(down_t, par, ids);
        if cached.is_some() {
            // hybrid experts: the CPU's partial output, before the down bias
            let host = HostExperts {
                exps: [self.w(m.gate_exps), self.w(m.up_exps), self.w(m.down_exps)],
                biases: [
                    m.gate_exps_b.map(|b| self.w(b)),
                    m.up_exps_b.map(|b| self.w(b)),
                ],
                act,
            };
            experts = self.moe_hybrid_add(il, experts, x, selected, host);
        }
        if let Some(b) = m.down_exps_b {
            let bt = self.w(b);
            experts = self.g.add_id(experts, bt, selected);
        }
        self.name(experts, "ffn_moe_down", Some(il));
        let experts = self.g.mul(experts, r.weights);
        let (nb1, nb2) = (self.g.tensor(experts).nb[1], self.g.tensor(experts).nb[2]);
        let mut out = self.g.view_2d(experts, n_embd, nt, nb2, 0);
        for i in 1..n_used as usize {
            let e = self.g.view_2d(experts, n_embd, nt, nb2, i * nb1);
            out = self.g.add(out, e);
        }
        if n_used == 1 {
            out = self.g.cont(out);
        }
        self.name(out, "ffn_moe_out", Some(il))
    }
}
