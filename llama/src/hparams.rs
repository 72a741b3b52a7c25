//! Hyper-parameters read from GGUF keys (`{arch}.embedding_length`, ...),
//! with the defaults llama.cpp applies when a key is absent.

use ggml_core::gguf::GgufFile;

use crate::arch::Arch;
use crate::error::{LlamaError, Result};

/// A model's shape and numeric constants.
#[derive(Clone, Debug, PartialEq)]
pub struct HParams {
    /// Architecture.
    pub arch: Arch,
    /// Vocabulary size (rows of `token_embd`).
    pub n_vocab: usize,
    /// Training context length.
    pub n_ctx_train: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Decoder layers.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Key/value heads (GQA).
    pub n_head_kv: usize,
    /// Head dimension of keys and queries.
    pub n_embd_head_k: usize,
    /// Head dimension of values.
    pub n_embd_head_v: usize,
    /// Dense FFN width (`feed_forward_length`).
    pub n_ff: usize,
    /// Experts per layer.
    pub n_expert: usize,
    /// Experts used per token.
    pub n_expert_used: usize,
    /// Width of one expert's FFN.
    pub n_ff_exp: usize,
    /// Width of the shared expert's FFN (qwen2moe).
    pub n_ff_shexp: usize,
    /// RMS norm epsilon.
    pub f_norm_rms_eps: f32,
    /// Rotated dimensions per head.
    pub n_rot: usize,
    /// RoPE base frequency.
    pub rope_freq_base: f32,
    /// RoPE frequency scale (1 / linear scaling factor).
    pub rope_freq_scale: f32,
    /// `rope.scaling.type` is `yarn`.
    pub rope_yarn: bool,
    /// YaRN's original context (`rope.scaling.original_context_length`;
    /// the training context when absent).
    pub n_ctx_orig_yarn: usize,
    /// `rope.scaling.yarn_beta_fast` (32).
    pub yarn_beta_fast: f32,
    /// `rope.scaling.yarn_beta_slow` (1).
    pub yarn_beta_slow: f32,
    /// `rope.scaling.yarn_log_multiplier` (0 when absent).
    pub yarn_log_mul: f32,
    /// Leading dense (non-MoE) layers (`leading_dense_block_count`, deepseek2).
    pub n_layer_dense_lead: usize,
    /// `attention.q_lora_rank` (deepseek2; 0 = plain `attn_q`).
    pub n_lora_q: usize,
    /// `attention.kv_lora_rank` (deepseek2 MLA latent width).
    pub n_lora_kv: usize,
    /// `attention.key_length_mla`: per-head query/key width before absorption
    /// (`qk_nope + qk_rope`).
    pub n_embd_head_k_mla: usize,
    /// `attention.value_length_mla`: per-head value width after `attn_v_b`.
    pub n_embd_head_v_mla: usize,
    /// `expert_shared_count` (deepseek2).
    pub n_expert_shared: usize,
    /// `expert_group_count` (0 or 1: no grouped routing).
    pub n_expert_groups: usize,
    /// `expert_group_used_count`.
    pub n_group_used: usize,
    /// `expert_weights_scale` (1 when absent).
    pub expert_weights_scale: f32,
    /// `expert_weights_norm`.
    pub expert_weights_norm: bool,
    /// `expert_gating_func`.
    pub expert_gating: ExpertGating,
    /// `attention.sliding_window` (gpt-oss; 0 = none).
    pub n_swa: usize,
}

/// How router logits become expert weights (`expert_gating_func`,
/// llama.cpp's `llama_expert_gating_func_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertGating {
    /// Softmax over all experts (1; the default).
    Softmax,
    /// Independent sigmoids (2; DeepSeek-V3).
    Sigmoid,
    /// Raw logits for selection, softmax over the selected (3; gpt-oss).
    SoftmaxWeight,
}

impl HParams {
    /// Read the hyper-parameters of `file`'s architecture.
    pub fn from_gguf(file: &GgufFile) -> Result<HParams> {
        let arch_name =
            file.get_str("general.architecture")?
                .ok_or_else(|| LlamaError::HParam {
                    key: "general.architecture".into(),
                    why: "missing".into(),
                })?;
        let arch = Arch::from_name(arch_name)
            .ok_or_else(|| LlamaError::UnknownArch(arch_name.to_string()))?;
        let a = arch.name();
        let key = |k: &str| format!("{a}.{k}");
        let req = |k: &str| -> Result<usize> {
            let full = key(k);
            let v = file.get_u32(&full)?.ok_or_else(|| LlamaError::HParam {
                key: full.clone(),
                why: "missing".into(),
            })?;
            Ok(v as usize)
        };
        let opt =
            |k: &str| -> Result<Option<usize>> { Ok(file.get_u32(&key(k))?.map(|v| v as usize)) };

        let n_embd = req("embedding_length")?;
        let n_layer = req("block_count")?;
        let n_head = req("attention.head_count")?;
        let n_head_kv = opt("attention.head_count_kv")?.unwrap_or(n_head);
        let n_ff = opt("feed_forward_length")?.unwrap_or(0);
        let n_expert = opt("expert_count")?.unwrap_or(0);
        let n_expert_used = opt("expert_used_count")?.unwrap_or(0);
        let n_embd_head_k = match opt("attention.key_length")? {
            Some(v) => v,
            None if n_head > 0 => n_embd / n_head,
            None => 0,
        };
        let n_embd_head_v = opt("attention.value_length")?.unwrap_or(n_embd_head_k);
        let n_ff_exp = match opt("expert_feed_forward_length")? {
            Some(v) => v,
            None if n_expert_used > 0 && arch != Arch::Llama => n_ff / n_expert_used,
            None => n_ff,
        };
        let n_ff_shexp = opt("expert_shared_feed_forward_length")?.unwrap_or(0);
        let n_rot = opt("rope.dimension_count")?.unwrap_or(n_embd_head_k);
        let f_norm_rms_eps = file
            .get_f32(&key("attention.layer_norm_rms_epsilon"))?
            .unwrap_or(1e-5);
        let rope_freq_base = file.get_f32(&key("rope.freq_base"))?.unwrap_or(10000.0);
        let rope_freq_scale = match file.get_f32(&key("rope.scaling.factor"))? {
            Some(f) if f != 0.0 => 1.0 / f,
            _ => 1.0,
        };
        let n_ctx_train = opt("context_length")?.unwrap_or(2048);
        let rope_yarn = file.get_str(&key("rope.scaling.type"))? == Some("yarn");
        let n_ctx_orig_yarn = opt("rope.scaling.original_context_length")?.unwrap_or(n_ctx_train);
        let yarn_beta_fast = file
            .get_f32(&key("rope.scaling.yarn_beta_fast"))?
            .unwrap_or(32.0);
        let yarn_beta_slow = file
            .get_f32(&key("rope.scaling.yarn_beta_slow"))?
            .unwrap_or(1.0);
        let yarn_log_mul = file
            .get_f32(&key("rope.scaling.yarn_log_multiplier"))?
            .unwrap_or(0.0);
        let n_layer_dense_lead = opt("leading_dense_block_count")?.unwrap_or(0);
        let n_lora_q = opt("attention.q_lora_rank")?.unwrap_or(0);
        let n_lora_kv = opt("attention.kv_lora_rank")?.unwrap_or(0);
        let n_embd_head_k_mla = opt("attention.key_length_mla")?.unwrap_or(0);
        let n_embd_head_v_mla = opt("attention.value_length_mla")?.unwrap_or(0);
        let n_expert_shared = opt("expert_shared_count")?.unwrap_or(0);
        let n_expert_groups = opt("expert_group_count")?.unwrap_or(0);
        let n_group_used = opt("expert_group_used_count")?.unwrap_or(0);
        let expert_weights_scale = match file.get_f32(&key("expert_weights_scale"))? {
            Some(v) => v,
            None if arch == Arch::Deepseek2 => {
                return Err(LlamaError::HParam {
                    key: key("expert_weights_scale"),
                    why: "missing".into(),
                })
            }
            None => 1.0,
        };
        let expert_weights_norm = file.get_bool(&key("expert_weights_norm"))?.unwrap_or(false);
        let expert_gating = match (opt("expert_gating_func")?, arch) {
            (_, Arch::GptOss) => ExpertGating::SoftmaxWeight,
            // llama.cpp: DeepSeek-V2 files without the key use softmax
            (None | Some(0) | Some(1), _) => ExpertGating::Softmax,
            (Some(2), _) => ExpertGating::Sigmoid,
            (Some(3), _) => ExpertGating::SoftmaxWeight,
            (Some(v), _) => {
                return Err(LlamaError::HParam {
                    key: key("expert_gating_func"),
                    why: format!("{v} is not a gating function (1 softmax, 2 sigmoid, 3 softmax over the selected)"),
                })
            }
        };
        let n_swa = match (opt("attention.sliding_window")?, arch) {
            (Some(v), _) => v,
            (None, Arch::GptOss) => {
                return Err(LlamaError::HParam {
                    key: key("attention.sliding_window"),
                    why: "missing".into(),
                })
            }
            (None, _) => 0,
        };
        let n_vocab = match opt("vocab_size")? {
            Some(v) => v,
            None => file
                .get_array("tokenizer.ggml.tokens")?
                .map(|a| a.len())
                .unwrap_or(0),
        };

        let hp = HParams {
            arch,
            n_vocab,
            n_ctx_train,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_embd_head_k,
            n_embd_head_v,
            n_ff,
            n_expert,
            n_expert_used,
            n_ff_exp,
            n_ff_shexp,
            f_norm_rms_eps,
            n_rot,
            rope_freq_base,
            rope_freq_scale,
            rope_yarn,
            n_ctx_orig_yarn,
            yarn_beta_fast,
            yarn_beta_slow,
            yarn_log_mul,
            n_layer_dense_lead,
            n_lora_q,
            n_lora_kv,
            n_embd_head_k_mla,
            n_embd_head_v_mla,
            n_expert_shared,
            n_expert_groups,
            n_group_used,
            expert_weights_scale,
            expert_weights_norm,
            expert_gating,
            n_swa,
        };
        hp.validate()?;
        Ok(hp)
    }

    fn validate(&self) -> Result<()> {
        let a = self.arch.name();
        let bad = |k: &str, why: String| {
            Err(LlamaError::HParam {
                key: format!("{a}.{k}"),
                why,
            })
        };
        if self.n_embd == 0 || self.n_embd > 1 << 20 {
            return bad(
                "embedding_length",
                format!("{} is out of range", self.n_embd),
            );
        }
        if self.n_layer == 0 || self.n_layer > 4096 {
            return bad("block_count", format!("{} is out of range", self.n_layer));
        }
        if self.n_head == 0 || self.n_head_kv == 0 || !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad(
                "attention.head_count_kv",
                format!(
                    "{} heads cannot share {} kv heads",
                    self.n_head, self.n_head_kv
                ),
            );
        }
        if self.n_embd_head_k == 0
            || self.n_rot == 0
            || self.n_rot > self.n_embd_head_k
            || !self.n_rot.is_multiple_of(2)
        {
            return bad(
                "rope.dimension_count",
                format!(
                    "{} rotated dims for heads of {}",
                    self.n_rot, self.n_embd_head_k
                ),
            );
        }
        if self.n_expert == 0 || self.n_expert_used == 0 || self.n_expert_used > self.n_expert {
            return bad(
                "expert_used_count",
                format!(
                    "{} used of {} experts (a MoE model needs 1 <= used <= experts)",
                    self.n_expert_used, self.n_expert
                ),
            );
        }
        if self.n_ff_exp == 0 {
            return bad("expert_feed_forward_length", "is 0".into());
        }
        if self.n_vocab == 0 {
            return bad("vocab_size", "is 0".into());
        }
        if !(self.f_norm_rms_eps > 0.0 && self.f_norm_rms_eps < 1.0) {
            return bad(
                "attention.layer_norm_rms_epsilon",
                format!("{} is out of range", self.f_norm_rms_eps),
            );
        }
        self.validate_routing()?;
        match self.arch {
            Arch::Deepseek2 => self.validate_mla(),
            Arch::GptOss if self.n_swa == 0 => bad(
                "attention.sliding_window",
                "is 0 (gpt-oss alternates sliding-window layers; the window must be at least 1)"
                    .into(),
            ),
            _ => Ok(()),
        }
    }

    /// Grouped routing: the groups split the experts evenly, at least two
    /// per group (a group scores by its two best), and the kept groups hold
    /// enough experts for top-k.
    fn validate_routing(&self) -> Result<()> {
        let a = self.arch.name();
        let bad = |k: &str, why: String| {
            Err(LlamaError::HParam {
                key: format!("{a}.{k}"),
                why,
            })
        };
        let ng = self.n_expert_groups;
        if ng <= 1 {
            return Ok(());
        }
        if !self.n_expert.is_multiple_of(ng) {
            return bad(
                "expert_group_count",
                format!("{ng} groups do not divide {} experts", self.n_expert),
            );
        }
        if self.n_expert / ng < 2 {
            return bad(
                "expert_group_count",
                format!(
                    "{ng} groups of {} experts (a group scores by its 2 best, so at least 2 each)",
                    self.n_expert / ng
                ),
            );
        }
        if self.n_group_used == 0 || self.n_group_used > ng {
            return bad(
                "expert_group_used_count",
                format!("{} used of {ng} groups", self.n_group_used),
            );
        }
        if self.n_expert_used > self.n_group_used * (self.n_expert / ng) {
            return bad(
                "expert_used_count",
                format!(
                    "{} used experts do not fit in {} groups of {}",
                    self.n_expert_used,
                    self.n_group_used,
                    self.n_expert / ng
                ),
            );
        }
        Ok(())
    }

    /// MLA: the cached key is `[latent | rope part]`, the value the latent.
    fn validate_mla(&self) -> Result<()> {
        let a = self.arch.name();
        let bad = |k: &str, why: String| {
            Err(LlamaError::HParam {
                key: format!("{a}.{k}"),
                why,
            })
        };
        if self.n_lora_kv == 0 || self.n_lora_kv > 1 << 16 {
            return bad(
                "attention.kv_lora_rank",
                format!("{} is out of range (MLA needs a latent)", self.n_lora_kv),
            );
        }
        if self.n_head_kv != 1 {
            return bad(
                "attention.head_count_kv",
                format!("{} (MLA stores one latent head)", self.n_head_kv),
            );
        }
        if self.n_embd_head_k != self.n_lora_kv + self.n_rot {
            return bad(
                "attention.key_length",
                format!(
                    "{} is not kv_lora_rank {} + rope.dimension_count {}",
                    self.n_embd_head_k, self.n_lora_kv, self.n_rot
                ),
            );
        }
        if self.n_embd_head_v != self.n_lora_kv {
            return bad(
                "attention.value_length",
                format!(
                    "{} is not kv_lora_rank {}",
                    self.n_embd_head_v, self.n_lora_kv
                ),
            );
        }
        if self.n_embd_head_k_mla <= self.n_rot || self.n_embd_head_k_mla > 1 << 16 {
            return bad(
                "attention.key_length_mla",
                format!(
                    "{} must exceed rope.dimension_count {}",
                    self.n_embd_head_k_mla, self.n_rot
                ),
            );
        }
        if self.n_embd_head_v_mla == 0 || self.n_embd_head_v_mla > 1 << 16 {
            return bad(
                "attention.value_length_mla",
                format!("{} is out of range", self.n_embd_head_v_mla),
            );
        }
        if self.n_layer_dense_lead > self.n_layer {
            return bad(
                "leading_dense_block_count",
                format!("{} of {} layers", self.n_layer_dense_lead, self.n_layer),
            );
        }
        if self.n_layer_dense_lead > 0 && self.n_ff == 0 {
            return bad(
                "feed_forward_length",
                "is 0 but there are dense layers".into(),
            );
        }
        Ok(())
    }

    /// Whether the attention is MLA (deepseek2 with absorbed `attn_k_b`).
    pub fn is_mla(&self) -> bool {
        self.arch == Arch::Deepseek2
    }

    /// Whether layer `il` attends through a sliding window (gpt-oss: the
    /// even layers, llama.cpp's swa pattern 2).
    pub fn is_swa(&self, il: usize) -> bool {
        self.n_swa > 0 && self.arch == Arch::GptOss && il.is_multiple_of(2)
    }

    /// Whether layer `il` has a dense FFN instead of experts.
    pub fn is_dense_layer(&self, il: usize) -> bool {
        il < self.n_layer_dense_lead
    }

    /// `n_embd_head_k * n_head_kv`.
    pub fn n_embd_k_gqa(&self) -> usize {
        self.n_embd_head_k * self.n_head_kv
    }

    /// `n_embd_head_v * n_head_kv`.
    pub fn n_embd_v_gqa(&self) -> usize {
        self.n_embd_head_v * self.n_head_kv
    }
}
