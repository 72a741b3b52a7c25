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
        Ok(())
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
