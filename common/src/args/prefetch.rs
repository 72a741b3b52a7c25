//! The prefetch flags: `--prefetch-experts-slots N` (upstream's name),
//! `--prefetch-selective on|off` and `--moe-predict off|on|router|history`.

use anyhow::{anyhow, Result};
use clap::Args;

/// Prefetch of host experts ahead of the split that reads them.
#[derive(Args, Debug, Clone)]
pub struct PrefetchArgs {
    /// `--prefetch-experts-slots`: staging slots of the prefill prefetch
    /// (-1: auto, 0: off; llama-bench: a list).
    #[arg(long)]
    pub prefetch_experts_slots: Vec<String>,

    /// `--prefetch-selective on|off`: whether auto may prefetch the
    /// experts guessed through the router.
    #[arg(long)]
    pub prefetch_selective: String,

    /// `--moe-predict off|on|router|history`: decode prediction.
    #[arg(long)]
    pub moe_predict: String,
}

impl PrefetchArgs {
    /// Every `--prefetch-experts-slots` value, checked.
    pub fn all_slots(&self) -> Result<Vec<i32>> {
        if self.prefetch_experts_slots.is_empty() {
            return Err(anyhow!("--prefetch-experts-slots needs a value"));
        }
        self.prefetch_experts_slots
            .iter()
            .map(|v| {
                llama::moe_cache::prefetch::parse_slots(v)
                    .map_err(|e| anyhow!("--prefetch-experts-slots {v}: {e}"))
            })
            .collect()
    }

    /// The `--moe-predict` predictor.
    pub fn predict(&self) -> llama::moe_cache::predict::MoePredict {
        self.moe_predict.parse().unwrap_or_default()
    }

    /// Whether auto may take the selective prefetch (`--prefetch-selective`).
    pub fn selective(&self) -> bool {
        self.prefetch_selective != "off"
    }

    /// The prefetch of the one value (llama-run, llama-server), with
    /// `--prefetch-selective` for auto.
    pub fn setting(&self) -> Result<llama::moe_cache::prefetch::PrefetchSlots> {
        let auto = llama::moe_cache::prefetch::AutoPrefetch {
            selective: self.selective(),
            force: None,
        };
        Ok(llama::moe_cache::prefetch::PrefetchSlots::from_count(
            self.slots()?.into(),
            auto,
        )?)
    }

    /// The one value (llama-run).
    pub fn slots(&self) -> Result<i32> {
        match self.all_slots()?.as_slice() {
            [v] => Ok(*v),
            _ => Err(anyhow!(
                "--prefetch-experts-slots {}: give one count here (lists are for llama-bench)",
                self.prefetch_experts_slots.join(",")
            )),
        }
    }
}
