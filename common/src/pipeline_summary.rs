//! The device pipeline's counts per generated token, for `llama-run`'s
//! summary and `--stats-out`: device-wide synchronizations, router id
//! reads, kernel launches (a graph replay counting as one) and graph
//! replays, from the device backend's [`ggml_core::PipelineCounters`]
//! (filled on CUDA, emulated or not, and on SIM0; zeros on the CPU).

use ggml_core::PipelineCounts;
use serde::Serialize;

/// The generation phase's counts; field names are `--stats-out` keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PipelineSummary {
    /// Device-wide synchronizations per generated-token decode.
    pub device_syncs_per_token: f64,
    /// Router id reads into host memory per generated-token decode.
    pub id_reads_per_token: f64,
    /// Kernel launches issued by the host per generated-token decode, a
    /// graph replay counting as one.
    pub launches_per_token: f64,
    /// Graphs replayed during generation.
    pub graph_replays: u64,
    /// Scheduler splits of the last decode graph.
    pub splits_per_token: usize,
}

impl PipelineSummary {
    /// The summary of `gen` (the counts of the generation phase) over
    /// `decodes` one-token decodes whose last graph had `splits` splits.
    pub fn of(gen: &PipelineCounts, decodes: usize, splits: usize) -> PipelineSummary {
        if decodes == 0 {
            return PipelineSummary::default();
        }
        let n = decodes as f64;
        PipelineSummary {
            device_syncs_per_token: gen.device_syncs as f64 / n,
            id_reads_per_token: gen.id_reads as f64 / n,
            launches_per_token: gen.launches as f64 / n,
            graph_replays: gen.graph_replays,
            splits_per_token: splits,
        }
    }

    /// One summary line (empty when nothing was counted).
    pub fn to_text(&self, device: &str) -> String {
        if self.launches_per_token == 0.0 && self.device_syncs_per_token == 0.0 {
            return String::new();
        }
        format!(
            "pipeline      = {device} per generated token: {:.2} device syncs, {:.2} id reads, {:.1} launches ({} splits), {} graph replays in all\n",
            self.device_syncs_per_token,
            self.id_reads_per_token,
            self.launches_per_token,
            self.splits_per_token,
            self.graph_replays
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_token_figures_divide_by_the_decodes() {
        let c = PipelineCounts {
            device_syncs: 4,
            id_reads: 16,
            launches: 40,
            graph_replays: 30,
        };
        let s = PipelineSummary::of(&c, 4, 10);
        assert_eq!(s.device_syncs_per_token, 1.0);
        assert_eq!(s.id_reads_per_token, 4.0);
        assert_eq!(s.launches_per_token, 10.0);
        assert_eq!(s.graph_replays, 30);
        assert!(s.to_text("CUDA0").contains("1.00 device syncs"));
        assert_eq!(PipelineSummary::of(&c, 0, 10), PipelineSummary::default());
    }
}
