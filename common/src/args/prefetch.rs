//! The prefetch flags: `--prefetch-experts-slots N` (upstream's name),
//! `--prefetch-selective on|off` and `--moe-predict off|on|router|history`.

use anyhow::{anyhow, Result};
use clap::Args;

/// Prefetch of host experts ahead of the split that reads them.
#[derive(Args, Debug, Clone)]
pub struct PrefetchArgs {
    /// staging slots for the prefill prefetch: the next splits' host expert
    /// tensors are copied into N rotating device slots (each as large as the
    /// largest expert tensor) while the current split computes; -1 = auto
    /// (3 slots, fewer when they do not fit; per layer and ubatch a tensor
    /// is not prefetched, prefetched whole, or only its experts guessed
    /// through the layer's router, as the link and compute costs, the use
    /// fraction and the guesses' recall measured on earlier ubatches say),
    /// 0 = off;
    /// llama-bench takes a comma-separated list
    #[arg(
        long = "prefetch-experts-slots",
        value_name = "N",
        default_value = "0",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    pub prefetch_experts_slots: Vec<String>,

    /// with --prefetch-experts-slots -1 (auto): on (the default) lets auto
    /// prefetch, per layer and prompt ubatch, only the experts guessed from
    /// the previous layer's hidden state through the layer's router (the
    /// ones the guess missed are copied when the layer comes); off keeps
    /// auto to whole tensors or none
    #[arg(
        long = "prefetch-selective",
        value_name = "on|off",
        default_value = "on",
        value_parser = ["on", "off"]
    )]
    pub prefetch_selective: String,

    /// decode prediction: guess the next cached layer's experts and upload
    /// the predicted misses into the expert cache while this layer computes
    /// (needs the cache, --moe-cache-mib); router (= on): from this layer's
    /// hidden state through the next layer's router; history: from the
    /// experts recent tokens used at that layer and the transitions from
    /// the layer before (also under --expert-trace-in); off
    #[arg(
        long = "moe-predict",
        value_name = "off|on|router|history",
        default_value = "off",
        value_parser = llama::moe_cache::predict::MoePredict::NAMES
    )]
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
