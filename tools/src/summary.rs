//! `llama-run`'s closing summary: times, speeds and expert traffic, as text
//! (stderr) and as one JSON object (`--stats-out`).

use llama::TransferStats;
use serde::Serialize;

use crate::cli::fmt_bytes;
use crate::simtime::SimReport;

/// Everything the summary reports. Field names are the JSON keys.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunSummary {
    /// Model file.
    pub model: String,
    /// `--device` in use (`CPU` when none).
    pub device: String,
    /// Whether only the experts the router picked are copied (not
    /// `--no-expert-copy`).
    pub expert_copy: bool,
    /// `--offload-min-batch`.
    pub offload_min_batch: usize,
    /// Seconds to load the model (mapping, checks, copies to the device).
    pub load_s: f64,
    /// Prompt tokens (BOS included when the vocabulary adds one).
    pub prompt_tokens: usize,
    /// Seconds to decode the prompt.
    pub prompt_s: f64,
    /// Prompt tokens per second.
    pub prompt_tps: f64,
    /// Tokens generated (sampled), EOG included when it ended the run.
    pub gen_tokens: usize,
    /// Seconds from the first sample to the end of generation.
    pub gen_s: f64,
    /// Generated tokens per second.
    pub gen_tps: f64,
    /// Single-token decodes during generation.
    pub gen_decodes: usize,
    /// Why generation stopped: `eog`, `n_predict`, `context_full`.
    pub stop: String,
    /// Host -> device traffic of the whole run (its fields are keys of the
    /// summary itself).
    #[serde(flatten)]
    pub traffic: TransferStats,
    /// Expert bytes per generated-token decode.
    pub h2d_bytes_experts_per_token: f64,
    /// Full-copy bytes per generated-token decode.
    pub h2d_bytes_full_copy_per_token: f64,
    /// Experts copied per generated-token decode.
    pub experts_copied_per_token: f64,
    /// Simulated figures (`sim_*` keys), on a sim device only.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimReport>,
}

/// `b - a`, field by field.
pub fn stats_delta(a: &TransferStats, b: &TransferStats) -> TransferStats {
    TransferStats {
        h2d_bytes_experts: b.h2d_bytes_experts - a.h2d_bytes_experts,
        h2d_bytes_other: b.h2d_bytes_other - a.h2d_bytes_other,
        h2d_bytes_full_copy: b.h2d_bytes_full_copy - a.h2d_bytes_full_copy,
        experts_copied: b.experts_copied - a.experts_copied,
        experts_full_copy: b.experts_full_copy - a.experts_full_copy,
        graphs: b.graphs - a.graphs,
    }
}

impl RunSummary {
    /// Fill the traffic fields from the whole run's counters and the
    /// generation phase's.
    pub fn set_traffic(&mut self, total: &TransferStats, gen: &TransferStats) {
        self.traffic = *total;
        let n = self.gen_decodes.max(1) as f64;
        if self.gen_decodes > 0 {
            self.h2d_bytes_experts_per_token = gen.h2d_bytes_experts as f64 / n;
            self.h2d_bytes_full_copy_per_token = gen.h2d_bytes_full_copy as f64 / n;
            self.experts_copied_per_token = gen.experts_copied as f64 / n;
        }
    }

    /// The summary as llama.cpp-style lines.
    pub fn to_text(&self) -> String {
        let ms = |s: f64| s * 1e3;
        let per = |s: f64, n: usize| if n > 0 { ms(s) / n as f64 } else { 0.0 };
        let mut t = String::new();
        t.push_str(&format!("load time     = {:10.2} ms\n", ms(self.load_s)));
        t.push_str(&format!(
            "prompt eval   = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:10.2} tokens per second)\n",
            ms(self.prompt_s),
            self.prompt_tokens,
            per(self.prompt_s, self.prompt_tokens),
            self.prompt_tps
        ));
        t.push_str(&format!(
            "generation    = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:10.2} tokens per second)\n",
            ms(self.gen_s),
            self.gen_tokens,
            per(self.gen_s, self.gen_tokens),
            self.gen_tps
        ));
        t.push_str(&format!("stopped by    = {}\n", self.stop));
        if let Some(sim) = &self.sim {
            t.push_str(&sim.to_text());
        }
        if self.device == "CPU" {
            t.push_str("expert h2d    = none (no --device: experts are used in host memory)\n");
            return t;
        }
        if self.traffic.h2d_bytes_full_copy == 0 {
            t.push_str(&format!(
                "expert h2d    = none: no expert matmul ran on {} with experts in host memory (batches below --offload-min-batch {} run them on the CPU; experts on the device need no copy)\n",
                self.device, self.offload_min_batch
            ));
            t.push_str(&format!(
                "other h2d     = {} (inputs copied to {})\n",
                fmt_bytes(self.traffic.h2d_bytes_other as f64),
                self.device
            ));
            return t;
        }
        if !self.expert_copy {
            t.push_str(&format!(
                "expert h2d    = {} total, {} per generated token: whole expert tensors (--no-expert-copy)\n",
                fmt_bytes(self.traffic.h2d_bytes_full_copy as f64),
                fmt_bytes(self.h2d_bytes_full_copy_per_token),
            ));
            t.push_str(&format!(
                "other h2d     = {} (all inputs copied to {}, whole expert tensors included)\n",
                fmt_bytes(self.traffic.h2d_bytes_other as f64),
                self.device
            ));
            return t;
        }
        let ratio = |a: u64, b: u64| {
            if b > 0 {
                format!("{:.1}%", 100.0 * a as f64 / b as f64)
            } else {
                "-".into()
            }
        };
        t.push_str(&format!(
            "expert h2d    = {} total, {} per generated token; full copies would move {} ({} per token): {} of that\n",
            fmt_bytes(self.traffic.h2d_bytes_experts as f64),
            fmt_bytes(self.h2d_bytes_experts_per_token),
            fmt_bytes(self.traffic.h2d_bytes_full_copy as f64),
            fmt_bytes(self.h2d_bytes_full_copy_per_token),
            ratio(self.traffic.h2d_bytes_experts, self.traffic.h2d_bytes_full_copy)
        ));
        t.push_str(&format!(
            "experts       = {} copied of {} a full copy moves ({}), {:.1} per generated token\n",
            self.traffic.experts_copied,
            self.traffic.experts_full_copy,
            ratio(self.traffic.experts_copied, self.traffic.experts_full_copy),
            self.experts_copied_per_token
        ));
        t.push_str(&format!(
            "other h2d     = {} (non-expert inputs copied to {})\n",
            fmt_bytes(self.traffic.h2d_bytes_other as f64),
            self.device
        ));
        t
    }
}
