//! The decoder: token embedding, the stack of layers (attention then MoE
//! FFN, each with a residual), the output norm and head. One builder serves
//! every architecture through its [`crate::arch::LayerStyle`].

use ggml_core::{GgmlType, TensorId};

use super::blocks::{AttnExtras, UbatchInputs};
use super::GraphBuilder;
use crate::arch::{Arch, QkNorm};
use crate::kv_cache::KvCache;
use crate::model::{AttnWeights, FfnWeights, MhaWeights, SharedExpert};

/// The graph of one ubatch and the tensors a caller needs.
pub struct DecoderGraph {
    /// Token ids, I32 `[n_tokens]` (input).
    pub tokens: TensorId,
    /// Positions, I32 `[n_tokens]` (input).
    pub pos: TensorId,
    /// Each token's cache cell, I64 `[n_tokens]` (input): where its K and V
    /// rows are stored.
    pub kv_idxs: TensorId,
    /// Causal mask, F32 `[n_kv, n_tokens]` (input).
    pub mask: TensorId,
    /// Sliding-window causal mask, F32 `[n_kv, n_tokens]` (input), when
    /// some layer attends through a window.
    pub mask_swa: Option<TensorId>,
    /// The Hadamard rotations of a quantized K / V cache, F32 `[n, n]`
    /// (inputs; [`crate::kv_cache::rotation`]).
    pub k_rot: Option<TensorId>,
    /// See [`Self::k_rot`].
    pub v_rot: Option<TensorId>,
    /// Rows whose logits are wanted, I32 `[n_outputs]` (input), when not all.
    pub out_ids: Option<TensorId>,
    /// Logits, F32 `[n_vocab, n_outputs]` (output).
    pub logits: TensorId,
    /// The final norm's output, F32 `[n_embd, n_outputs]` (an output when
    /// [`GraphBuilder::want_embd`]).
    pub embd: Option<TensorId>,
    /// Each layer's selected experts, I32 `[n_used, n_tokens']` (`None`
    /// for a dense layer).
    pub expert_ids: Vec<Option<TensorId>>,
}

impl GraphBuilder<'_> {
    /// Build the forward graph of a ubatch of `n_tokens` tokens stored at
    /// the cache cells of its input [`DecoderGraph::kv_idxs`], attending to
    /// the first `n_kv` cells (past every cell in use; more keeps the
    /// graph's shape, and so the scheduler's plan, stable across tokens:
    /// the mask hides them); the graph does not depend on the cells,
    /// producing logits for all rows or for `n_outputs` selected rows.
    pub fn build_decoder(
        &mut self,
        kv: &KvCache,
        n_tokens: usize,
        n_kv: usize,
        n_outputs: usize,
    ) -> DecoderGraph {
        let m = self.model;
        let hp = m.hparams.clone();
        let style = m.style;
        let nt = n_tokens as i64;
        let tokens = self.g.new_tensor_1d(GgmlType::I32, nt);
        self.g.set_name(tokens, "inp_tokens");
        self.g.set_input(tokens);
        let pos = self.g.new_tensor_1d(GgmlType::I32, nt);
        self.g.set_name(pos, "inp_pos");
        self.g.set_input(pos);
        debug_assert!(n_kv <= kv.size);
        let kv_idxs = self.g.new_tensor_1d(GgmlType::I64, nt);
        self.g.set_name(kv_idxs, "inp_kv_idxs");
        self.g.set_input(kv_idxs);
        let mask = self.g.new_tensor_2d(GgmlType::F32, n_kv as i64, nt);
        self.g.set_name(mask, "kq_mask");
        self.g.set_input(mask);
        let out_ids = (n_outputs < n_tokens).then(|| {
            let t = self.g.new_tensor_1d(GgmlType::I32, n_outputs as i64);
            self.g.set_name(t, "inp_out_ids");
            self.g.set_input(t)
        });
        let mask_swa = (hp.n_swa > 0 && (0..hp.n_layer).any(|il| hp.is_swa(il))).then(|| {
            let t = self.g.new_tensor_2d(GgmlType::F32, n_kv as i64, nt);
            self.g.set_name(t, "kq_mask_swa");
            self.g.set_input(t)
        });
        let (rk, rv) = (kv.rotation.k, kv.rotation.v);
        let mut rot = |n: Option<usize>, name: &str| {
            n.map(|n| {
                let t = self.g.new_tensor_2d(GgmlType::F32, n as i64, n as i64);
                self.g.set_name(t, name);
                self.g.set_input(t)
            })
        };
        let k_rot = rot(rk, "attn_inp_k_rot");
        let v_rot = rot(rv, "attn_inp_v_rot");
        let inp = UbatchInputs {
            pos,
            mask,
            mask_swa,
            n_tokens,
            kv_idxs,
            n_kv,
            k_rot,
            v_rot,
        };

        let embd = self.w(m.tok_embd);
        let mut inp_l = self.g.get_rows(embd, tokens);
        self.name(inp_l, "inp_embd", None);
        let mut expert_ids = Vec::with_capacity(hp.n_layer);

        for (il, lw) in m.layers.iter().enumerate() {
            let mut inp_sa = inp_l;
            let cur = self.rms_norm_w(inp_l, lw.attn_norm);
            self.name(cur, "attn_norm", Some(il));
            let mut cur = match &lw.attn {
                AttnWeights::Mha(a) => self.mha_attention(&kv.layers[il], &inp, a, cur, il),
                AttnWeights::Mla(a) => self.mla_attention(&kv.layers[il], &inp, a, cur, il),
            };

            if il + 1 == hp.n_layer {
                if let Some(ids) = out_ids {
                    cur = self.g.get_rows(cur, ids);
                    inp_sa = self.g.get_rows(inp_sa, ids);
                }
            }
            let ffn_inp = self.g.add(cur, inp_sa);
            self.name(ffn_inp, "ffn_inp", Some(il));
            let cur = self.rms_norm_w(ffn_inp, lw.ffn_norm);
            self.name(cur, "ffn_norm", Some(il));
            let moe = match &lw.ffn {
                FfnWeights::Dense(d) => {
                    expert_ids.push(None);
                    let out = self.ffn_swiglu(cur, d.up, d.gate, d.down);
                    self.name(out, "ffn_out", Some(il))
                }
                FfnWeights::Moe(mw) => {
                    let (out, ids) = match hp.arch {
                        Arch::Deepseek2 | Arch::GptOss => self.moe_ffn_routed(cur, mw, il),
                        _ => self.moe_ffn(
                            cur,
                            mw.gate_inp,
                            mw.up_exps,
                            mw.gate_exps,
                            mw.down_exps,
                            style.norm_topk,
                            il,
                        ),
                    };
                    self.g.set_output(ids);
                    expert_ids.push(Some(ids));
                    match &mw.shexp {
                        Some(sh) => {
                            let y = self.shared_expert(cur, sh, il);
                            self.g.add(out, y)
                        }
                        None => out,
                    }
                }
            };
            let out = self.g.add(moe, ffn_inp);
            inp_l = self.name(out, "l_out", Some(il));
        }
        let cur = self.rms_norm_w(inp_l, m.output_norm);
        self.name(cur, "result_norm", None);
        let embd = self.want_embd.then(|| {
            self.g.set_output(cur);
            cur
        });
        let logits = self.linear(m.output, cur, None);
        self.name(logits, "result_output", None);
        self.g.set_output(logits);
        self.g.build_forward_expand(logits);
        DecoderGraph {
            tokens,
            pos,
            kv_idxs,
            mask,
            mask_swa,
            k_rot,
            v_rot,
            out_ids,
            logits,
            embd,
            expert_ids,
        }
    }

    /// Q, K, V projections (with their biases and norms), RoPE, and
    /// attention over the cache (with gpt-oss's output bias, sinks and
    /// sliding window).
    fn mha_attention(
        &mut self,
        kv: &crate::kv_cache::LayerKv,
        inp: &UbatchInputs,
        a: &MhaWeights,
        cur: TensorId,
        il: usize,
    ) -> TensorId {
        let m = self.model;
        let (hp, style) = (&m.hparams, m.style);
        let nt = inp.n_tokens as i64;
        let (hk, hv) = (hp.n_embd_head_k as i64, hp.n_embd_head_v as i64);
        let (nh, nkv) = (hp.n_head as i64, hp.n_head_kv as i64);
        let swa = hp.is_swa(il);
        let mut q = self.linear(a.wq, cur, a.bq);
        let mut k = self.linear(a.wk, cur, a.bk);
        let v = self.linear(a.wv, cur, a.bv);
        if style.qk_norm == QkNorm::Full {
            q = self.rms_norm_w(q, a.q_norm.expect("loader checked q_norm"));
            k = self.rms_norm_w(k, a.k_norm.expect("loader checked k_norm"));
        }
        let mut q = self.g.reshape_3d(q, hk, nh, nt);
        let mut k = self.g.reshape_3d(k, hk, nkv, nt);
        let v = self.g.reshape_3d(v, hv, nkv, nt);
        if style.qk_norm == QkNorm::PerHead {
            q = self.rms_norm_w(q, a.q_norm.expect("loader checked q_norm"));
            k = self.rms_norm_w(k, a.k_norm.expect("loader checked k_norm"));
        }
        let q = self.rope(q, inp.pos);
        self.name(q, "Qcur", Some(il));
        let k = self.rope(k, inp.pos);
        self.name(k, "Kcur", Some(il));
        let extras = AttnExtras {
            wo_b: a.bo,
            sinks: a.sinks,
            swa,
        };
        self.attention_ext(kv, inp, q, k, v, a.wo, &extras, il)
    }

    /// A shared expert: a SwiGLU FFN, behind a sigmoid gate when it has one.
    fn shared_expert(&mut self, cur: TensorId, sh: &SharedExpert, il: usize) -> TensorId {
        let y = self.ffn_swiglu(cur, sh.up, sh.gate, sh.down);
        let y = match sh.gate_inp {
            Some(gi) => {
                let gate_logit = self.linear(gi, cur, None);
                let gate_w = self.g.sigmoid(gate_logit);
                self.g.mul(y, gate_w)
            }
            None => y,
        };
        self.name(y, "ffn_shexp", Some(il))
    }
}
