//! The supported architectures and what distinguishes their decoder layers.
//! Each architecture is a [`LayerStyle`]: a handful of switches over the
//! shared blocks in [`crate::graph`].

use ggml_core::op::RopeMode;

/// A model architecture, as named by `general.architecture`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Qwen3-MoE: per-head Q/K RMS norm, normalised top-k weights.
    Qwen3Moe,
    /// Qwen2-MoE: QKV biases, shared expert behind a sigmoid gate.
    Qwen2Moe,
    /// LLaMA with experts (Mixtral).
    Llama,
    /// OLMoE: Q/K RMS norm over the whole projection.
    Olmoe,
    /// DeepSeek-V2/V3 (and loaders of the same layout): MLA attention,
    /// leading dense layers, shared experts, grouped sigmoid routing.
    Deepseek2,
    /// GPT-OSS: attention sinks, alternating sliding-window layers, biases
    /// everywhere, `swiglu_oai` experts (MXFP4 in released files).
    GptOss,
}

/// Where Q/K normalisation applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    /// None.
    None,
    /// RMS norm over each head (`[head_dim]` weights).
    PerHead,
    /// RMS norm over the whole projection (`[n_embd]` weights).
    Full,
}

/// The switches that make one architecture's layer differ from another's.
#[derive(Clone, Copy, Debug)]
pub struct LayerStyle {
    /// RoPE pairing.
    pub rope: RopeMode,
    /// Q/K norm placement.
    pub qk_norm: QkNorm,
    /// Whether Q, K, V projections carry biases (required).
    pub qkv_bias: bool,
    /// Whether the top-k expert weights are renormalised to sum to one.
    pub norm_topk: bool,
    /// Whether a shared expert with a sigmoid gate is added.
    pub shared_expert: bool,
}

impl Arch {
    /// All supported architectures.
    pub const ALL: [Arch; 6] = [
        Arch::Qwen3Moe,
        Arch::Qwen2Moe,
        Arch::Llama,
        Arch::Olmoe,
        Arch::Deepseek2,
        Arch::GptOss,
    ];

    /// Parse `general.architecture`.
    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL.iter().copied().find(|a| a.name() == name)
    }

    /// The GGUF name (prefix of the hyper-parameter keys).
    pub fn name(self) -> &'static str {
        match self {
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::Llama => "llama",
            Arch::Olmoe => "olmoe",
            Arch::Deepseek2 => "deepseek2",
            Arch::GptOss => "gpt-oss",
        }
    }

    /// Comma-separated names, for error messages.
    pub fn supported_names() -> String {
        Arch::ALL
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The layer switches (llama.cpp's per-architecture builders).
    pub fn style(self) -> LayerStyle {
        match self {
            Arch::Qwen3Moe => LayerStyle {
                rope: RopeMode::Neox,
                qk_norm: QkNorm::PerHead,
                qkv_bias: false,
                norm_topk: true,
                shared_expert: false,
            },
            Arch::Qwen2Moe => LayerStyle {
                rope: RopeMode::Neox,
                qk_norm: QkNorm::None,
                qkv_bias: true,
                norm_topk: false,
                shared_expert: true,
            },
            Arch::Llama => LayerStyle {
                rope: RopeMode::Normal,
                qk_norm: QkNorm::None,
                qkv_bias: false,
                norm_topk: true,
                shared_expert: false,
            },
            Arch::Olmoe => LayerStyle {
                rope: RopeMode::Neox,
                qk_norm: QkNorm::Full,
                qkv_bias: false,
                norm_topk: false,
                shared_expert: false,
            },
            // routing and the shared experts follow the file's keys
            // (`expert_weights_norm`, `expert_shared_count`): see graph::mla
            Arch::Deepseek2 => LayerStyle {
                rope: RopeMode::Normal,
                qk_norm: QkNorm::None,
                qkv_bias: false,
                norm_topk: false,
                shared_expert: false,
            },
            Arch::GptOss => LayerStyle {
                rope: RopeMode::Neox,
                qk_norm: QkNorm::None,
                qkv_bias: true,
                norm_topk: false,
                shared_expert: false,
            },
        }
    }
}
