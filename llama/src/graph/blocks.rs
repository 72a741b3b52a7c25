//! The shared blocks: RMS norm, self-attention over the KV cache, and the
//! MoE FFN with softmax top-k routing (llama.cpp's `build_norm`,
//! `build_attn`, `build_moe_ffn`).

use ggml_core::op::{GluOp, OrderedF32, RopeParams};
use ggml_core::TensorId;

use super::GraphBuilder;
use crate::graph::moe::hybrid::HostExperts;
use crate::kv_cache::LayerKv;
use crate::model::WeightId;

/// Per-ubatch inputs every layer reads.
#[derive(Clone, Copy, Debug)]
pub struct UbatchInputs {
    /// Token positions, I32 `[n_tokens]`.
    pub pos: TensorId,
    /// Causal mask, F32 `[n_kv, n_tokens]`.
    pub mask: TensorId,
    /// Causal sliding-window mask, F32 `[n_kv, n_tokens]`, when the model
    /// has sliding-window layers (gpt-oss).
    pub mask_swa: Option<TensorId>,
    /// Tokens in the ubatch.
    pub n_tokens: usize,
    /// The cache cell of each token, I64 `[n_tokens]` (input): where the
    /// ubatch's K and V rows are stored (`set_rows`).
    pub kv_idxs: TensorId,
    /// Cache cells attended to (past every cell of `kv_idxs`; the mask hides
    /// the cells a token does not see).
    pub n_kv: usize,
    /// The Hadamard rotation of Q and K, F32 `[n, n]` (input), for a
    /// quantized K cache ([`crate::kv_cache::rotation`]).
    pub k_rot: Option<TensorId>,
    /// The Hadamard rotation of V and of the attention output, F32
    /// `[64, 64]` (input), for a quantized V cache.
    pub v_rot: Option<TensorId>,
}

/// What some architectures add to [`GraphBuilder::attention`].
#[derive(Clone, Copy, Debug, Default)]
pub struct AttnExtras {
    /// Output projection bias (`attn_output.bias`).
    pub wo_b: Option<WeightId>,
    /// Per-head sink logits joining the softmax denominator (`attn_sinks`).
    pub sinks: Option<WeightId>,
    /// Attend through the sliding-window mask ([`UbatchInputs::mask_swa`]).
    pub swa: bool,
}

impl GraphBuilder<'_> {
    /// `rms_norm(x) * w`.
    pub fn rms_norm_w(&mut self, x: TensorId, w: WeightId) -> TensorId {
        let eps = self.model.hparams.f_norm_rms_eps;
        let n = self.g.rms_norm(x, eps);
        let wt = self.w(w);
        self.g.mul(n, wt)
    }

    /// `w · x (+ b)`.
    pub fn linear(&mut self, w: WeightId, x: TensorId, b: Option<WeightId>) -> TensorId {
        let wt = self.w(w);
        let y = self.g.mul_mat(wt, x);
        match b {
            Some(b) => {
                let bt = self.w(b);
                self.g.add(y, bt)
            }
            None => y,
        }
    }

    /// The model's RoPE parameters (YaRN with `ext_factor` 1 where the
    /// file says `rope.scaling.type = yarn`, as llama.cpp's default).
    pub fn rope_params(&self) -> RopeParams {
        let hp = &self.model.hparams;
        RopeParams {
            n_dims: hp.n_rot as i32,
            mode: self.model.style.rope,
            n_ctx_orig: hp.n_ctx_orig_yarn as i32,
            freq_base: OrderedF32::new(hp.rope_freq_base),
            freq_scale: OrderedF32::new(hp.rope_freq_scale),
            ext_factor: OrderedF32::new(if hp.rope_yarn { 1.0 } else { 0.0 }),
            attn_factor: OrderedF32::new(1.0),
            beta_fast: OrderedF32::new(hp.yarn_beta_fast),
            beta_slow: OrderedF32::new(hp.yarn_beta_slow),
        }
    }

    /// RoPE with the model's parameters.
    pub fn rope(&mut self, x: TensorId, pos: TensorId) -> TensorId {
        let p = self.rope_params();
        self.g.rope_ext(x, pos, None, p)
    }

    /// Store this ubatch's K and V in the cache, then attend over the cache:
    /// `softmax(K·Q * scale + mask) · V`, merged over heads and projected by
    /// `wo` — as `mul_mat`, `soft_max_ext`, `mul_mat` over a transposed V
    /// cache, or with flash attention (`flash_attn_ext`, V stored as rows)
    /// when the cache was made for it. `q`, `k`, `v` are `[head_dim, heads, n_tokens]`.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &mut self,
        kv: &LayerKv,
        inp: &UbatchInputs,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        wo: WeightId,
        il: usize,
    ) -> TensorId {
        self.attention_ext(kv, inp, q, k, v, wo, &AttnExtras::default(), il)
    }

    /// [`Self::attention`] with an output bias, sinks and a sliding window.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_ext(
        &mut self,
        kv: &LayerKv,
        inp: &UbatchInputs,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        wo: WeightId,
        x: &AttnExtras,
        il: usize,
    ) -> TensorId {
        let hp = self.model.hparams.clone();
        let mask = match (x.swa, inp.mask_swa) {
            (true, Some(m)) => m,
            _ => inp.mask,
        };
        let sinks = x.sinks.map(|s| self.w(s));
        let (hk, hv, nh, nkv) = (hp.n_embd_head_k, hp.n_embd_head_v, hp.n_head, hp.n_head_kv);
        let nt = inp.n_tokens as i64;
        let kc = self.bound(&format!("cache_k_l{il}"), kv.ty, kv.k_ne(), kv.k.clone());
        let v_data =
            kv.v.clone()
                .expect("an MHA layer's cache has V (only MLA caches go without)");
        let vc = self.bound(&format!("cache_v_l{il}"), kv.ty_v, kv.v_ne(), v_data);
        let esz = kv.ty_v.type_size();
        let k_row = kv.ty.row_size(hp.n_embd_k_gqa() as u64).unwrap_or(0);
        // llama.cpp's rotation for a quantized cache: Q and K (V) times the
        // Hadamard matrix before the store, the output after attention
        let (q, k) = match inp.k_rot {
            Some(r) => (self.hadamard_rotate(q, r), self.hadamard_rotate(k, r)),
            None => (q, k),
        };
        let v = match inp.v_rot {
            Some(r) => self.hadamard_rotate(v, r),
            None => v,
        };

        // store: K rows at the ubatch's cells; V transposed (one row per
        // channel) for the mul_mat path, rows like K for flash attention
        let k2 = self.g.reshape_2d(k, hp.n_embd_k_gqa() as i64, nt);
        let k_store = self.g.set_rows(kc, k2, inp.kv_idxs);
        self.name(k_store, "k_store", Some(il));
        self.g.build_forward_expand(k_store);
        let ev = hp.n_embd_v_gqa() as i64;
        let v2 = self.g.reshape_2d(v, ev, nt);
        let v_store = if kv.v_trans {
            // one element per row: element (channel c, token t) of V goes
            // to row kv_idxs[t] of plane c of the cache seen as
            // [1, size, channels] (the index broadcast over the planes)
            let f32_size = std::mem::size_of::<f32>();
            let src = self
                .g
                .view_3d(v2, 1, nt, ev, ev as usize * f32_size, f32_size, 0);
            let dst = self
                .g
                .view_3d(vc, 1, kv.size as i64, ev, esz, kv.size * esz, 0);
            self.g.set_rows(dst, src, inp.kv_idxs)
        } else {
            self.g.set_rows(vc, v2, inp.kv_idxs)
        };
        self.name(v_store, "v_store", Some(il));
        self.g.build_forward_expand(v_store);

        // attend
        let n_kv = inp.n_kv as i64;
        let k_head = kv.ty.row_size(hk as u64).unwrap_or(0);
        let kview = self
            .g
            .view_3d(kc, hk as i64, n_kv, nkv as i64, k_row, k_head, 0);
        let qp = self.g.permute(q, [0, 2, 1, 3]);
        let scale = 1.0 / (hk as f32).sqrt();
        let cur = if !kv.flash_attn {
            let kq = self.g.mul_mat(kview, qp);
            self.name(kq, "kq", Some(il));
            let kq = self.g.soft_max_ext(kq, Some(mask), scale, 0.0);
            if let Some(s) = sinks {
                self.g.soft_max_add_sinks(kq, s);
            }
            self.name(kq, "kq_soft_max", Some(il));
            // V as [n_kv, hv, nkv]: the transposed cache, or a transposed
            // view of V rows
            let vview = if kv.v_trans {
                let v_row = kv.size * esz;
                self.g
                    .view_3d(vc, n_kv, hv as i64, nkv as i64, v_row, v_row * hv, 0)
            } else {
                let v_row = kv.ty_v.row_size(hp.n_embd_v_gqa() as u64).unwrap_or(0);
                let rows = self
                    .g
                    .view_3d(vc, hv as i64, n_kv, nkv as i64, v_row, hv * esz, 0);
                self.g.transpose(rows)
            };
            let kqv = self.g.mul_mat(vview, kq);
            let merged = self.g.permute(kqv, [0, 2, 1, 3]);
            self.g.cont_reshape(merged, &[(hv * nh) as i64, nt])
        } else {
            // flash attention: V rows like K, one fused op, output [hv, nh, nt]
            let v_row = kv.ty_v.row_size(hp.n_embd_v_gqa() as u64).unwrap_or(0);
            let v_head = kv.ty_v.row_size(hv as u64).unwrap_or(0);
            let vview = self
                .g
                .view_3d(vc, hv as i64, n_kv, nkv as i64, v_row, v_head, 0);
            let fa = self
                .g
                .flash_attn_ext(qp, kview, vview, Some(mask), scale, 0.0, 0.0);
            if let Some(s) = sinks {
                self.g.flash_attn_ext_add_sinks(fa, s);
            }
            self.name(fa, "fattn", Some(il));
            self.g.reshape_2d(fa, (hv * nh) as i64, nt)
        };
        let cur = match inp.v_rot {
            Some(r) => self.hadamard_rotate(cur, r),
            None => cur,
        };
        let out = self.linear(wo, cur, x.wo_b);
        self.name(out, "attn_out", Some(il))
    }

    /// `x` times the `[n, n]` rotation `rot` in consecutive blocks of `n`
    /// values (llama.cpp's `llama_mul_mat_hadamard`), in `x`'s shape.
    fn hadamard_rotate(&mut self, x: TensorId, rot: TensorId) -> TensorId {
        let n = self.g.tensor(rot).ne[0];
        let ne = self.g.tensor(x).ne;
        let nel: i64 = ne.iter().product();
        let flat = self.g.cont_reshape(x, &[n, nel / n]);
        let r = self.g.mul_mat(rot, flat);
        self.g.reshape(r, &ne)
    }

    /// The MoE FFN: softmax router, top-k experts, SwiGLU experts through
    /// `mul_mat_id`, weighted sum over the used experts. Returns the output
    /// `[n_embd, n_tokens]` and the selected expert ids `[n_used, n_tokens]`.
    #[allow(clippy::too_many_arguments)]
    pub fn moe_ffn(
        &mut self,
        cur: TensorId,
        gate_inp: WeightId,
        up: WeightId,
        gate: WeightId,
        down: WeightId,
        norm_w: bool,
        il: usize,
    ) -> (TensorId, TensorId) {
        let hp = self.model.hparams.clone();
        let (n_embd, n_expert, n_used) = (
            hp.n_embd as i64,
            hp.n_expert as i64,
            hp.n_expert_used as i64,
        );
        let nt = self.g.tensor(cur).ne[1];
        let logits = self.linear(gate_inp, cur, None);
        self.name(logits, "ffn_moe_logits", Some(il));
        let probs = self.g.soft_max_ext(logits, None, 1.0, 0.0);
        self.name(probs, "ffn_moe_probs", Some(il));
        let selected = self.moe_select(probs, n_used as i32, il);
        self.name(selected, "ffn_moe_topk", Some(il));
        self.moe_predict_next(il, cur);
        let p3 = self.g.reshape_3d(probs, 1, n_expert, nt);
        let mut weights = self.g.get_rows(p3, selected);
        self.name(weights, "ffn_moe_weights", Some(il));
        if norm_w {
            let w2 = self.g.reshape_2d(weights, n_used, nt);
            let sum = self.g.sum_rows(w2);
            let w2 = self.g.div(w2, sum);
            weights = self.g.reshape_3d(w2, 1, n_used, nt);
            self.name(weights, "ffn_moe_weights_norm", Some(il));
        }
        let x = self.g.reshape_3d(cur, n_embd, 1, nt);
        // the expert cache, when it serves this layer: banks and slots in
        // place of the host expert tensors and the expert ids
        let cached = self.moe_cache_lookup(il, selected);
        let (gate_t, up_t, down_t, ids) = match cached {
            Some(c) => (c.banks[0], c.banks[1], c.banks[2], c.slots),
            None => {
                let (u, g) = (self.w(up), self.w(gate));
                (g, u, self.w(down), selected)
            }
        };
        let up_y = self.g.mul_mat_id(up_t, x, ids);
        self.name(up_y, "ffn_moe_up", Some(il));
        let gate_y = self.g.mul_mat_id(gate_t, x, ids);
        self.name(gate_y, "ffn_moe_gate", Some(il));
        let par = self.g.swiglu_split(gate_y, up_y);
        let mut experts = self.g.mul_mat_id(down_t, par, ids);
        self.name(experts, "ffn_moe_down", Some(il));
        if cached.is_some() {
            // hybrid experts: the misses the CPU computes, added here
            let exps = [self.w(gate), self.w(up), self.w(down)];
            let host = HostExperts {
                exps,
                biases: [None, None],
                act: GluOp::Swiglu,
            };
            experts = self.moe_hybrid_add(il, experts, x, selected, host);
        }
        let experts = self.g.mul(experts, weights);
        let (nb1, nb2) = (self.g.tensor(experts).nb[1], self.g.tensor(experts).nb[2]);
        let mut out = self.g.view_2d(experts, n_embd, nt, nb2, 0);
        for i in 1..n_used as usize {
            let e = self.g.view_2d(experts, n_embd, nt, nb2, i * nb1);
            out = self.g.add(out, e);
        }
        if n_used == 1 {
            out = self.g.cont(out);
        }
        (self.name(out, "ffn_moe_out", Some(il)), selected)
    }

    /// A dense SwiGLU FFN: `down · (silu(gate · x) * (up · x))`.
    pub fn ffn_swiglu(
        &mut self,
        x: TensorId,
        up: WeightId,
        gate: WeightId,
        down: WeightId,
    ) -> TensorId {
        let u = self.linear(up, x, None);
        let g = self.linear(gate, x, None);
        let h = self.g.swiglu_split(g, u);
        self.linear(down, h, None)
    }
}
