//! The deepseek2 and gpt-oss layouts of synthetic models: their presets
//! (DeepSeek-V3's and GPT-OSS-120B's layer shapes, fewer layers), the keys
//! a real file of each carries, and each layer's tensors.
//!
//! deepseek2 derives its MLA widths from `head_dim` in DeepSeek-V3's
//! ratios (head 128: qk_nope 128, qk_rope 64, v 128, kv_lora 512, q_lora
//! 1536); the first layer is dense (V3: 3 of 61) with an FFN 9x an
//! expert's, every MoE layer has one shared expert and V3's grouped routing
//! (8 groups, 4 kept, where the expert count allows).

use ggml_core::gguf::GgufWriter;
use ggml_core::GgmlType;

use crate::model::{Init, SynthParams};

/// MLA widths of a synthetic deepseek2 model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlaShape {
    /// `attention.q_lora_rank`.
    pub q_lora: usize,
    /// `attention.kv_lora_rank`.
    pub kv_lora: usize,
    /// Non-rotated query/key part per head.
    pub qk_nope: usize,
    /// Rotated part (`rope.dimension_count`).
    pub qk_rope: usize,
    /// Value width per head (`attention.value_length_mla`).
    pub v_head: usize,
}

impl MlaShape {
    /// DeepSeek-V3's ratios for heads of `head_dim`.
    pub fn from_head_dim(head_dim: usize) -> MlaShape {
        MlaShape {
            q_lora: 12 * head_dim,
            kv_lora: 4 * head_dim,
            qk_nope: head_dim,
            qk_rope: head_dim / 2,
            v_head: head_dim,
        }
    }
}

/// `(expert_group_count, expert_group_used_count)`: V3's 8 groups with 4
/// kept where `n_expert` allows (at least 2 experts per group and enough
/// kept for top-k), else fewer, else none.
pub fn expert_groups(n_expert: usize, n_used: usize) -> (usize, usize) {
    for g in [8usize, 4, 2] {
        let per = n_expert / g;
        if n_expert.is_multiple_of(g) && per >= 2 && (g / 2) * per >= n_used {
            return (g, g / 2);
        }
    }
    (1, 1)
}

/// Leading dense layers: one when the model has more than one layer.
pub fn dense_lead(n_layer: usize) -> usize {
    usize::from(n_layer > 1)
}

/// Sliding window of gpt-oss.
pub const GPTOSS_SLIDING_WINDOW: usize = 128;

impl SynthParams {
    /// DeepSeek-V3's layer shapes, 2 layers (1 dense, 1 MoE).
    pub fn deepseek_v3() -> SynthParams {
        SynthParams {
            arch: "deepseek2".into(),
            n_layer: 2,
            n_expert: 256,
            n_expert_used: 8,
            n_embd: 7168,
            n_ff_exp: 2048,
            n_head: 128,
            n_head_kv: 1,
            head_dim: 128,
            n_ctx_train: 163_840,
            ..SynthParams::default_model()
        }
    }

    /// GPT-OSS-120B's layer shapes, 2 layers (one sliding-window, one full).
    pub fn gpt_oss_120b() -> SynthParams {
        SynthParams {
            arch: "gpt-oss".into(),
            n_layer: 2,
            n_expert: 128,
            n_expert_used: 4,
            n_embd: 2880,
            n_ff_exp: 2880,
            n_head: 64,
            n_head_kv: 8,
            head_dim: 64,
            n_ctx_train: 131_072,
            ..SynthParams::default_model()
        }
    }

    /// The preset of `--arch`: the embedded default for qwen3moe, the real
    /// models' layer shapes for deepseek2 and gpt-oss.
    pub fn preset(arch: &str) -> Option<SynthParams> {
        match arch {
            "qwen3moe" => Some(SynthParams::default_model()),
            "deepseek2" => Some(SynthParams::deepseek_v3()),
            "gpt-oss" => Some(SynthParams::gpt_oss_120b()),
            _ => None,
        }
    }
}

/// The keys of `p.arch` beyond the common ones (and those it sets otherwise).
pub fn arch_kvs(p: &SynthParams, w: &mut GgufWriter) {
    let a = p.arch.as_str();
    let u = |v: usize| v as u32;
    match a {
        "deepseek2" => {
            let m = MlaShape::from_head_dim(p.head_dim);
            let (groups, groups_used) = expert_groups(p.n_expert, p.n_expert_used);
            w.set_kv(format!("{a}.attention.head_count_kv"), 1u32);
            w.set_kv(format!("{a}.attention.q_lora_rank"), u(m.q_lora));
            w.set_kv(format!("{a}.attention.kv_lora_rank"), u(m.kv_lora));
            w.set_kv(
                format!("{a}.attention.key_length"),
                u(m.kv_lora + m.qk_rope),
            );
            w.set_kv(format!("{a}.attention.value_length"), u(m.kv_lora));
            w.set_kv(
                format!("{a}.attention.key_length_mla"),
                u(m.qk_nope + m.qk_rope),
            );
            w.set_kv(format!("{a}.attention.value_length_mla"), u(m.v_head));
            w.set_kv(format!("{a}.rope.dimension_count"), u(m.qk_rope));
            w.set_kv(format!("{a}.rope.freq_base"), 10_000f32);
            w.set_kv(format!("{a}.feed_forward_length"), u(9 * p.n_ff_exp));
            w.set_kv(
                format!("{a}.leading_dense_block_count"),
                u(dense_lead(p.n_layer)),
            );
            w.set_kv(format!("{a}.expert_shared_count"), 1u32);
            w.set_kv(format!("{a}.expert_group_count"), u(groups));
            w.set_kv(format!("{a}.expert_group_used_count"), u(groups_used));
            w.set_kv(format!("{a}.expert_gating_func"), 2u32);
            w.set_kv(format!("{a}.expert_weights_norm"), true);
            w.set_kv(format!("{a}.expert_weights_scale"), 2.5f32);
            yarn(w, a, 40.0, 4096);
            w.set_kv(format!("{a}.rope.scaling.yarn_log_multiplier"), 0.1f32);
        }
        "gpt-oss" => {
            w.set_kv(
                format!("{a}.attention.sliding_window"),
                u(GPTOSS_SLIDING_WINDOW),
            );
            w.set_kv(format!("{a}.rope.freq_base"), 150_000f32);
            w.set_kv(format!("{a}.attention.layer_norm_rms_epsilon"), 1e-5f32);
            yarn(w, a, 32.0, 4096);
        }
        _ => {}
    }
}

fn yarn(w: &mut GgufWriter, a: &str, factor: f32, orig: u32) {
    w.set_kv(format!("{a}.rope.scaling.type"), "yarn");
    w.set_kv(format!("{a}.rope.scaling.factor"), factor);
    w.set_kv(format!("{a}.rope.scaling.original_context_length"), orig);
    w.set_kv(format!("{a}.rope.scaling.yarn_beta_fast"), 32f32);
    w.set_kv(format!("{a}.rope.scaling.yarn_beta_slow"), 1f32);
}

/// A tensor to write: name, shape, type, values.
pub type AddTensor<'a> = dyn FnMut(String, Vec<i64>, GgmlType, Init) + 'a;

fn sd_in(fan_in: i64) -> f32 {
    1.0 / (fan_in as f32).sqrt()
}

/// Layer `il` of a deepseek2 model, except the router and the routed
/// experts (added by the caller as for every MoE architecture).
/// Returns whether the layer is dense.
pub fn deepseek2_layer(p: &SynthParams, il: usize, add: &mut AddTensor<'_>) -> bool {
    let m = MlaShape::from_head_dim(p.head_dim);
    let (d, nh) = (p.n_embd as i64, p.n_head as i64);
    let (ql, kvl, nope, rope, vh) = (
        m.q_lora as i64,
        m.kv_lora as i64,
        m.qk_nope as i64,
        m.qk_rope as i64,
        m.v_head as i64,
    );
    let n = |s: &str| format!("blk.{il}.{s}.weight");
    let ones = || Init::Ones(0.05);
    add(n("attn_norm"), vec![d], GgmlType::F32, ones());
    add(n("attn_q_a"), vec![d, ql], p.ty, Init::Uniform(sd_in(d)));
    add(n("attn_q_a_norm"), vec![ql], GgmlType::F32, ones());
    add(
        n("attn_q_b"),
        vec![ql, nh * (nope + rope)],
        p.ty,
        Init::Uniform(sd_in(ql)),
    );
    add(
        n("attn_kv_a_mqa"),
        vec![d, kvl + rope],
        p.ty,
        Init::Uniform(sd_in(d)),
    );
    add(n("attn_kv_a_norm"), vec![kvl], GgmlType::F32, ones());
    add(
        n("attn_k_b"),
        vec![nope, kvl, nh],
        p.ty,
        Init::Uniform(sd_in(nope)),
    );
    add(
        n("attn_v_b"),
        vec![kvl, vh, nh],
        p.ty,
        Init::Uniform(sd_in(kvl)),
    );
    add(
        n("attn_output"),
        vec![nh * vh, d],
        p.ty,
        Init::Uniform(sd_in(nh * vh)),
    );
    add(n("ffn_norm"), vec![d], GgmlType::F32, ones());
    let f = p.n_ff_exp as i64;
    if il < dense_lead(p.n_layer) {
        let ff = 9 * f;
        add(n("ffn_gate"), vec![d, ff], p.ty, Init::Uniform(sd_in(d)));
        add(n("ffn_up"), vec![d, ff], p.ty, Init::Uniform(sd_in(d)));
        add(n("ffn_down"), vec![ff, d], p.ty, Init::Uniform(sd_in(ff)));
        return true;
    }
    add(
        format!("blk.{il}.exp_probs_b.bias"),
        vec![p.n_expert as i64],
        GgmlType::F32,
        Init::Uniform(0.05),
    );
    add(
        n("ffn_gate_shexp"),
        vec![d, f],
        p.ty,
        Init::Uniform(sd_in(d)),
    );
    add(n("ffn_up_shexp"), vec![d, f], p.ty, Init::Uniform(sd_in(d)));
    add(
        n("ffn_down_shexp"),
        vec![f, d],
        p.ty,
        Init::Uniform(sd_in(f)),
    );
    false
}

/// Layer `il` of a gpt-oss model, except the router weight and the routed
/// experts' matrices (added by the caller); with every bias and the sinks.
pub fn gptoss_layer(p: &SynthParams, il: usize, add: &mut AddTensor<'_>) {
    let (d, f, e) = (p.n_embd as i64, p.n_ff_exp as i64, p.n_expert as i64);
    let (qd, kvd) = (
        (p.n_head * p.head_dim) as i64,
        (p.n_head_kv * p.head_dim) as i64,
    );
    let w = |s: &str| format!("blk.{il}.{s}.weight");
    let b = |s: &str| format!("blk.{il}.{s}.bias");
    let bias = || Init::Uniform(0.02);
    add(w("attn_norm"), vec![d], GgmlType::F32, Init::Ones(0.05));
    add(w("attn_q"), vec![d, qd], p.ty, Init::Uniform(sd_in(d)));
    add(b("attn_q"), vec![qd], GgmlType::F32, bias());
    add(w("attn_k"), vec![d, kvd], p.ty, Init::Uniform(sd_in(d)));
    add(b("attn_k"), vec![kvd], GgmlType::F32, bias());
    add(w("attn_v"), vec![d, kvd], p.ty, Init::Uniform(sd_in(d)));
    add(b("attn_v"), vec![kvd], GgmlType::F32, bias());
    add(
        w("attn_output"),
        vec![qd, d],
        p.ty,
        Init::Uniform(sd_in(qd)),
    );
    add(b("attn_output"), vec![d], GgmlType::F32, bias());
    add(
        w("attn_sinks"),
        vec![p.n_head as i64],
        GgmlType::F32,
        Init::Uniform(1.0),
    );
    add(
        w("post_attention_norm"),
        vec![d],
        GgmlType::F32,
        Init::Ones(0.05),
    );
    add(b("ffn_gate_inp"), vec![e], GgmlType::F32, bias());
    add(b("ffn_gate_exps"), vec![f, e], GgmlType::F32, bias());
    add(b("ffn_up_exps"), vec![f, e], GgmlType::F32, bias());
    add(b("ffn_down_exps"), vec![d, e], GgmlType::F32, bias());
}
