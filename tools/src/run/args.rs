//! llama.cpp flags of `llama-run` beyond the original set: batch threads,
//! KV cache types, end-of-generation handling, reverse prompts, presence
//! and frequency penalties, and the device list.

use anyhow::{bail, Result};
use clap::Args;
use ggml_core::GgmlType;

/// The KV cache types llama.cpp's `-ctk` / `-ctv` take that exist here.
pub const KV_TYPES: &[&str] = &["f16", "f32", "bf16", "q8_0", "q4_0"];

/// More of llama.cpp's `llama-cli` flags (each declared by its entry in
/// [`common::flags::table`]).
#[derive(Args, Debug, Clone, Default)]
pub struct RunExtraArgs {
    /// `-tb`: threads of prompt batches (-1: as `-t`).
    #[arg(long)]
    pub threads_batch: Option<i64>,

    /// `-ctk`: the K cache type.
    #[arg(long)]
    pub cache_type_k: String,

    /// `-ctv`: the V cache type.
    #[arg(long)]
    pub cache_type_v: String,

    /// `--ignore-eos`: never stop at an end-of-generation token.
    #[arg(long)]
    pub ignore_eos: bool,

    /// `-r`: stop where the text ends with one of these.
    #[arg(long)]
    pub reverse_prompt: Vec<String>,

    /// `--presence-penalty`.
    #[arg(long)]
    pub presence_penalty: f32,

    /// `--frequency-penalty`.
    #[arg(long)]
    pub frequency_penalty: f32,

    /// `--list-devices`: print the devices and exit.
    #[arg(long)]
    pub list_devices: bool,
}

impl RunExtraArgs {
    /// The K and V cache element types, checked as llama.cpp checks them:
    /// known names, a quantized V only with flash attention (what the model
    /// allows, heads in whole blocks, is checked when the cache is made).
    pub fn kv_types(&self, flash_attn: bool) -> Result<(GgmlType, GgmlType)> {
        let parse = |flag: &str, s: &str| -> Result<GgmlType> {
            let lower = s.to_ascii_lowercase();
            if !KV_TYPES.contains(&lower.as_str()) {
                bail!(
                    "{flag} {s}: unknown KV cache type (one of {})",
                    KV_TYPES.join(", ")
                );
            }
            let t = GgmlType::from_name(&lower)
                .ok_or_else(|| anyhow::anyhow!("{flag} {s}: unknown type"))?;
            Ok(t)
        };
        let k = parse("-ctk", &self.cache_type_k)?;
        let v = parse("-ctv", &self.cache_type_v)?;
        if v.is_quantized() && !flash_attn {
            bail!(
                "-ctv {}: a quantized V cache needs flash attention (-fa on)",
                self.cache_type_v
            );
        }
        Ok((k, v))
    }

    /// Errs on out-of-range values.
    pub fn check(&self) -> Result<()> {
        if let Some(n) = self.threads_batch {
            if n == 0 || n < -1 {
                bail!("-tb {n}: must be -1 or at least 1");
            }
        }
        for (flag, v) in [
            ("--presence-penalty", self.presence_penalty),
            ("--frequency-penalty", self.frequency_penalty),
        ] {
            if !v.is_finite() {
                bail!("{flag} {v}: must be a number");
            }
        }
        if self.reverse_prompt.iter().any(String::is_empty) {
            bail!("-r: the reverse prompt is empty");
        }
        Ok(())
    }
}

/// Whether `text` ends with one of the reverse prompts.
pub fn ends_with_reverse_prompt(text: &str, prompts: &[String]) -> bool {
    prompts.iter().any(|p| text.ends_with(p.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_types_as_llama_cpp() {
        let mut a = RunExtraArgs {
            cache_type_k: "f16".into(),
            cache_type_v: "f16".into(),
            ..Default::default()
        };
        let err = |a: &RunExtraArgs, fa: bool| a.kv_types(fa).unwrap_err().to_string();
        assert_eq!(a.kv_types(false).unwrap(), (GgmlType::F16, GgmlType::F16));
        a.cache_type_k = "F32".into();
        assert_eq!(a.kv_types(false).unwrap(), (GgmlType::F32, GgmlType::F16));
        a.cache_type_v = "q8_0".into();
        assert!(err(&a, false).contains("needs flash attention (-fa on)"));
        assert_eq!(a.kv_types(true).unwrap(), (GgmlType::F32, GgmlType::Q8_0));
        for (name, t) in [
            ("bf16", GgmlType::BF16),
            ("Q4_0", GgmlType::Q4_0),
            ("q8_0", GgmlType::Q8_0),
        ] {
            a.cache_type_k = name.into();
            a.cache_type_v = name.into();
            assert_eq!(a.kv_types(true).unwrap(), (t, t));
        }
        a.cache_type_k = "q9".into();
        assert!(err(&a, true).contains("unknown KV cache type"));
    }
}
