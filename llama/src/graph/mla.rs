//! Multi-head latent attention (deepseek2), as llama.cpp runs DeepSeek-V3
//! GGUFs: the query through its LoRA (`attn_q_a`, norm, `attn_q_b`), the
//! key/value latent `c` and one shared roped key part from `attn_kv_a_mqa`,
//! `attn_k_b` absorbed into the query so that every head attends against a
//! single cached head `K = [c | rope(k_pe)]` with `V = c`, and `attn_v_b`
//! decompressing each head's result before `attn_output`.
//!
//! The cache holds only `kv_lora_rank + qk_rope` values per token; V is a
//! view of the first `kv_lora_rank` values of each K row.

use ggml_core::op::OrderedF32;
use ggml_core::TensorId;

use super::blocks::UbatchInputs;
use super::GraphBuilder;
use crate::kv_cache::LayerKv;
use crate::model::MlaWeights;

/// The YaRN factors of MLA attention: `(rope attn_factor, kq_scale)`, in
/// llama.cpp's f32 steps.
///
/// llama.cpp pre-scales: it passes RoPE `attn_factor = 1 / (1 + 0.1 ln s)`
/// (ggml's YaRN multiplies it back by `1 + 0.1 ln s`, so rotated values keep
/// their length) and puts `mscale² / sqrt(key_length_mla)` in the softmax,
/// with `mscale = attn_factor_org · (1 + 0.1 · mscale_all_dim · ln s)`,
/// `s = 1 / freq_scale`, `attn_factor_org` the pre-adjustment factor
/// (`attn_factor · (1 + 0.1 ln s)`, 1 up to rounding) and `mscale_all_dim`
/// the file's `yarn_log_multiplier / 0.1` (the converter stores 0.1 x it).
pub fn mla_yarn_factors(
    freq_scale: f32,
    yarn_log_mul: f32,
    n_embd_head_k_mla: usize,
) -> (f32, f32) {
    let ln_s = (1.0f32 / freq_scale).ln();
    let attn_factor = 1.0f32 / (1.0f32 + 0.1f32 * ln_s);
    let attn_factor_org = attn_factor * (1.0f32 + 0.1f32 * ln_s);
    let mscale_all_dim = yarn_log_mul / 0.1f32;
    let mscale = attn_factor_org * (1.0f32 + 0.1f32 * mscale_all_dim * ln_s);
    let kq_scale = 1.0f32 * mscale * mscale / (n_embd_head_k_mla as f32).sqrt();
    (attn_factor, kq_scale)
}

impl GraphBuilder<'_> {
    /// MLA self-attention of one layer over its compressed cache; `cur` is
    /// the normed input `[n_embd, n_tokens]`, the result `[n_embd, n_tokens]`.
    pub fn mla_attention(
        &mut self,
        kv: &LayerKv,
        inp: &UbatchInputs,
        a: &MlaWeights,
        cur: TensorId,
        il: usize,
    ) -> TensorId {
        let hp = self.model.hparams.clone();
        let nt = inp.n_tokens as i64;
        let nh = hp.n_head as i64;
        let kv_lora = hp.n_lora_kv as i64;
        let n_rope = hp.n_rot as i64;
        let hk_mla = hp.n_embd_head_k_mla as i64;
        let nope = hk_mla - n_rope;
        let f32s = std::mem::size_of::<f32>();

        // query: [n_head * (qk_nope + qk_rope), n_tokens]
        let q = match (a.q_a_norm, a.wq_b) {
            (Some(norm), Some(wq_b)) => {
                let q = self.linear(a.wq_a, cur, None);
                let q = self.rms_norm_w(q, norm);
                self.linear(wq_b, q, None)
            }
            _ => self.linear(a.wq_a, cur, None),
        };
        self.name(q, "q", Some(il));
        let q_row = hk_mla as usize * f32s;
        let q_nope = self
            .g
            .view_3d(q, nope, nh, nt, q_row, q_row * nh as usize, 0);
        let q_pe = self.g.view_3d(
            q,
            n_rope,
            nh,
            nt,
            q_row,
            q_row * nh as usize,
            nope as usize * f32s,
        );

        // latent and shared key part: [kv_lora + qk_rope, n_tokens]
        let kv_pe = self.linear(a.wkv_a_mqa, cur, None);
        self.name(kv_pe, "kv_cmpr_pe", Some(il));
        let kv_row = (kv_lora + n_rope) as usize * f32s;
        let c = self.g.view_2d(kv_pe, kv_lora, nt, kv_row, 0);
        let k_pe = self.g.view_3d(
            kv_pe,
            n_rope,
            1,
            nt,
            kv_row,
            kv_row,
            kv_lora as usize * f32s,
        );

        let (attn_factor, kq_scale) =
            mla_yarn_factors(hp.rope_freq_scale, hp.yarn_log_mul, hp.n_embd_head_k_mla);
        let mut rp = self.rope_params();
        rp.attn_factor = OrderedF32::new(attn_factor);
        let q_pe = self.g.rope_ext(q_pe, inp.pos, None, rp);
        self.name(q_pe, "q_pe", Some(il));
        let k_pe = self.g.rope_ext(k_pe, inp.pos, None, rp);
        self.name(k_pe, "k_pe", Some(il));
        let c = self.rms_norm_w(c, a.kv_a_norm);
        self.name(c, "kv_cmpr", Some(il));

        // absorb attn_k_b into the query: per head q_abs = k_b[h] · q_nope
        let q_nope = self.g.permute(q_nope, [0, 2, 1, 3]); // [nope, nt, nh]
        let wk_b = self.w(a.wk_b);
        let q_abs = self.g.mul_mat(wk_b, q_nope); // [kv_lora, nt, nh]
        self.name(q_abs, "q_nope_absorbed", Some(il));
        let q_abs = self.g.permute(q_abs, [0, 2, 1, 3]); // [kv_lora, nh, nt]
        let q_cur = self.g.concat(q_abs, q_pe, 0); // [kv_lora + rope, nh, nt]
        self.name(q_cur, "Qcur", Some(il));
        let c3 = self.g.reshape_3d(c, kv_lora, 1, nt);
        let k_cur = self.g.concat(c3, k_pe, 0); // [kv_lora + rope, 1, nt]
        self.name(k_cur, "Kcur", Some(il));

        // store the ubatch's rows
        let dk = kv_lora + n_rope;
        let kc = self.bound(&format!("cache_k_l{il}"), kv.ty, kv.k_ne(), kv.k.clone());
        let k_row = kv.ty.row_size(dk as u64).unwrap_or(0);
        let k2 = self.g.reshape_2d(k_cur, dk, nt);
        let k_store = self.g.set_rows(kc, k2, inp.kv_idxs);
        self.name(k_store, "k_store", Some(il));
        self.g.build_forward_expand(k_store);

        // attend: every head against the one latent head
        let n_kv = inp.n_kv as i64;
        let plane = k_row * kv.size;
        let kview = self.g.view_3d(kc, dk, n_kv, 1, k_row, plane, 0);
        let qp = self.g.permute(q_cur, [0, 2, 1, 3]); // [dk, nt, nh]
        let kqv = if !kv.flash_attn {
            let kq = self.g.mul_mat(kview, qp); // [n_kv, nt, nh]
            self.name(kq, "kq", Some(il));
            let kq = self.g.soft_max_ext(kq, Some(inp.mask), kq_scale, 0.0);
            self.name(kq, "kq_soft_max", Some(il));
            // V = c, read from the K rows: multiplied as a transposed view,
            // or laid out as rows over cells first (`v_trans`)
            let vview = self.g.view_2d(kc, kv_lora, n_kv, k_row, 0);
            let vt = self.g.transpose(vview); // [n_kv, kv_lora]
            let vt = if kv.v_trans { self.g.cont(vt) } else { vt };
            self.g.mul_mat(vt, kq) // [kv_lora, nt, nh]
        } else {
            let vview = self.g.view_3d(kc, kv_lora, n_kv, 1, k_row, plane, 0);
            let fa = self
                .g
                .flash_attn_ext(qp, kview, vview, Some(inp.mask), kq_scale, 0.0, 0.0);
            self.name(fa, "fattn", Some(il)); // [kv_lora, nh, nt]
            self.g.permute(fa, [0, 2, 1, 3]) // [kv_lora, nt, nh]
        };
        // decompress each head: attn_v_b[h] · kqv[h]
        let wv_b = self.w(a.wv_b);
        let o = self.g.mul_mat(wv_b, kqv); // [v_mla, nt, nh]
        let o = self.g.permute(o, [0, 2, 1, 3]); // [v_mla, nh, nt]
        let o = self
            .g
            .cont_reshape(o, &[hp.n_embd_head_v_mla as i64 * nh, nt]);
        self.name(o, "kqv_out", Some(il));
        let out = self.linear(a.wo, o, None);
        self.name(out, "attn_out", Some(il))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yarn_factors_of_deepseek_v3() {
        // factor 40, yarn_log_multiplier 0.1, key_length_mla 192
        let (af, kq) = mla_yarn_factors(1.0 / 40.0, 0.1, 192);
        let m = 1.0 + 0.1 * 40f64.ln();
        assert!((af as f64 - 1.0 / m).abs() < 1e-6, "{af}");
        assert!((kq as f64 - m * m / 192f64.sqrt()).abs() < 1e-6, "{kq}");
        // no scaling: plain 1/sqrt(d)
        let (af, kq) = mla_yarn_factors(1.0, 0.0, 64);
        assert_eq!((af, kq), (1.0, 0.125));
    }
}
