//! The prefetch's part of `llama-run`'s summary and `--stats-out`: bytes
//! prefetched, of those used and wasted, expert bytes on the critical path,
//! and the decode prediction's recall and precision.

use llama::moe_cache::predict::PredictStats;
use llama::moe_cache::prefetch::PrefetchStats;
use llama::TransferStats;
use serde::Serialize;

use crate::cli::fmt_bytes;

/// The prefetch counters of a run. Field names are `--stats-out` keys.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PrefetchReport {
    /// Staging slots made (`--prefetch-experts-slots`, after the budget).
    pub prefetch_experts_slots: usize,
    /// Expert bytes copied early (staging slots and predicted uploads), part
    /// of `h2d_bytes_experts`.
    pub prefetch_bytes: u64,
    /// Of those, bytes of experts the ubatches' ids named.
    pub prefetch_bytes_used: u64,
    /// Of those, bytes of experts no token used.
    pub prefetch_bytes_wasted: u64,
    /// Expert bytes uploaded on demand, after the ids that need them were
    /// known (`h2d_bytes_experts - prefetch_bytes`): so
    /// `critical_path_h2d_bytes + prefetch_bytes_used + prefetch_bytes_wasted
    /// = h2d_bytes_experts`.
    pub critical_path_h2d_bytes: u64,
    /// Of the next layer's experts, the fraction the decode prediction
    /// named (`null` when nothing was predicted).
    pub moe_predict_recall: Option<f64>,
    /// Of the experts the decode prediction named, the fraction the layer
    /// used (`null` when nothing was predicted).
    pub moe_predict_precision: Option<f64>,
    /// Layer accesses whose experts the decode prediction guessed.
    pub predicted_layers: u64,
    /// Distinct experts those accesses used.
    pub predicted_experts_needed: u64,
    /// Distinct experts the prediction named for them.
    pub predicted_experts: u64,
    /// Experts both named and used.
    pub predicted_experts_correct: u64,
    /// Prefetch auto: expert tensors (per ubatch) left to the selective
    /// copy at their split.
    pub prefetch_auto_none: u64,
    /// Prefetch auto: expert tensors (per ubatch) prefetched whole.
    pub prefetch_auto_whole: u64,
    /// Prefetch auto: expert tensors (per ubatch) prefetched selectively
    /// (the experts guessed through the layer's router early).
    pub prefetch_auto_selective: u64,
    /// Of `critical_path_h2d_bytes`: bytes copied at the split for the
    /// experts a selective prefetch's guess missed.
    pub prefetch_selective_late_bytes: u64,
    /// Of the experts each prompt ubatch's MoE layers needed, the fraction
    /// the prompt guess through the layer's router named (auto; `null`
    /// when nothing was guessed).
    pub prefetch_predict_recall: Option<f64>,
    /// Of the experts the prompt guesses named, the fraction needed
    /// (`null` when nothing was guessed).
    pub prefetch_predict_precision: Option<f64>,
}

impl PrefetchReport {
    /// The report from the run's transfer counters, the prefetch's counters
    /// (`None`: off) and the slots made.
    pub fn new(traffic: &TransferStats, p: Option<PrefetchStats>, slots: usize) -> PrefetchReport {
        Self::with_predict(traffic, p, slots, None)
    }

    /// [`PrefetchReport::new`] with the decode prediction's counters too
    /// (`None`: off); its uploads count as prefetched bytes.
    pub fn with_predict(
        traffic: &TransferStats,
        p: Option<PrefetchStats>,
        slots: usize,
        q: Option<PredictStats>,
    ) -> PrefetchReport {
        let p = p.unwrap_or_default();
        let qs = q.unwrap_or_default();
        let bytes = p.bytes + qs.bytes;
        PrefetchReport {
            prefetch_experts_slots: slots,
            prefetch_bytes: bytes,
            prefetch_bytes_used: p.bytes_used + qs.bytes_used,
            prefetch_bytes_wasted: p.bytes_wasted + qs.bytes_wasted,
            critical_path_h2d_bytes: traffic.h2d_bytes_experts.saturating_sub(bytes),
            moe_predict_recall: q.and_then(|q| q.recall()),
            moe_predict_precision: q.and_then(|q| q.precision()),
            predicted_layers: qs.layers,
            predicted_experts_needed: qs.experts_needed,
            predicted_experts: qs.experts_predicted,
            predicted_experts_correct: qs.experts_correct,
            prefetch_auto_none: p.auto_none,
            prefetch_auto_whole: p.auto_whole,
            prefetch_auto_selective: p.auto_selective,
            prefetch_selective_late_bytes: p.selective_late_bytes,
            prefetch_predict_recall: p.prediction_recall(),
            prefetch_predict_precision: p.prediction_precision(),
        }
    }

    /// The summary line (empty when nothing was prefetched).
    pub fn to_text(&self) -> String {
        if self.prefetch_experts_slots == 0
            && self.prefetch_bytes == 0
            && self.moe_predict_recall.is_none()
        {
            return String::new();
        }
        let hit = if self.prefetch_bytes > 0 {
            100.0 * self.prefetch_bytes_used as f64 / self.prefetch_bytes as f64
        } else {
            0.0
        };
        let recall = match self.moe_predict_recall {
            Some(r) => format!(
                "; decode prediction recall {:.1}%, precision {:.1}% over {} layer accesses",
                100.0 * r,
                100.0 * self.moe_predict_precision.unwrap_or(0.0),
                self.predicted_layers
            ),
            None => String::new(),
        };
        let n_auto =
            self.prefetch_auto_none + self.prefetch_auto_whole + self.prefetch_auto_selective;
        let auto = if n_auto > 0 {
            let guess = match (
                self.prefetch_predict_recall,
                self.prefetch_predict_precision,
            ) {
                (Some(r), Some(p)) => format!(
                    ", prompt guess recall {:.1}%, precision {:.1}%",
                    100.0 * r,
                    100.0 * p
                ),
                _ => String::new(),
            };
            format!(
                "; auto: {} none, {} whole, {} selective ({} late{guess})",
                self.prefetch_auto_none,
                self.prefetch_auto_whole,
                self.prefetch_auto_selective,
                fmt_bytes(self.prefetch_selective_late_bytes as f64)
            )
        } else {
            String::new()
        };
        format!(
            "prefetch      = {} staging slots: {} prefetched, {} used ({hit:.1}% hit rate), {} wasted; {} of expert bytes on the critical path{auto}{recall}\n",
            self.prefetch_experts_slots,
            fmt_bytes(self.prefetch_bytes as f64),
            fmt_bytes(self.prefetch_bytes_used as f64),
            fmt_bytes(self.prefetch_bytes_wasted as f64),
            fmt_bytes(self.critical_path_h2d_bytes as f64)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_add_up_and_keys_are_exact() {
        let t = TransferStats {
            h2d_bytes_experts: 1000,
            ..TransferStats::default()
        };
        let p = PrefetchStats {
            bytes: 600,
            bytes_used: 450,
            bytes_wasted: 150,
            inputs: 2,
            experts: 8,
            ..PrefetchStats::default()
        };
        let r = PrefetchReport::new(&t, Some(p), 3);
        assert_eq!(
            r.critical_path_h2d_bytes + r.prefetch_bytes_used + r.prefetch_bytes_wasted,
            t.h2d_bytes_experts
        );
        let v = serde_json::to_value(&r).unwrap();
        for k in [
            "prefetch_bytes",
            "prefetch_bytes_used",
            "prefetch_bytes_wasted",
            "critical_path_h2d_bytes",
            "moe_predict_recall",
            "moe_predict_precision",
            "predicted_experts_needed",
            "prefetch_auto_none",
            "prefetch_auto_whole",
            "prefetch_auto_selective",
            "prefetch_selective_late_bytes",
            "prefetch_predict_recall",
            "prefetch_predict_precision",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert!(v["moe_predict_recall"].is_null());
        assert!(r.to_text().contains("75.0% hit rate"), "{}", r.to_text());
        let q = PrefetchStats {
            auto_none: 2,
            auto_whole: 1,
            auto_selective: 3,
            predicted_experts_needed: 10,
            predicted_experts: 8,
            predicted_experts_correct: 6,
            ..p
        };
        let r = PrefetchReport::new(&t, Some(q), 3);
        assert_eq!(r.prefetch_auto_selective, 3);
        assert_eq!(r.prefetch_predict_recall, Some(0.6));
        let text = r.to_text();
        assert!(
            text.contains("2 none, 1 whole, 3 selective") && text.contains("recall 60.0%"),
            "{text}"
        );
        assert_eq!(PrefetchReport::new(&t, None, 0).to_text(), "");
    }
}
