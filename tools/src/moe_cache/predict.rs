//! `--predict`: the history predictor of `--moe-predict history`
//! ([`llama::moe_cache::predict::history`]) replayed on the trace in front
//! of the cache, at each size, with the live hook's order
//! ([`llama::moe_cache::predict::replay`]): recall and precision of its
//! guesses, the bytes it uploads early, and the hit rate it leaves on the
//! critical path next to the cache's without it.

use anyhow::Result;
use llama::moe_cache::cache::layout::GroupShape;
use llama::moe_cache::predict::history::HistoryParams;
use llama::moe_cache::predict::replay::{replay_predicted, PredictReplay};
use llama::moe_cache::{PolicyKind, Trace};
use serde::Serialize;

use super::sweep::{self, Size, SweepPolicy};

/// One size's replay with prediction: an object of `--json`'s `predict`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PredictRow {
    /// The predictor (`history`).
    pub predictor: &'static str,
    /// The cache's policy.
    pub policy: String,
    /// Slots per group (the first group's when there are several).
    pub slots: u32,
    /// Device MiB of the banks.
    pub mib: f64,
    /// Layer accesses that had a guess.
    pub predicted_layers: u64,
    /// Distinct experts those accesses used.
    pub experts_needed: u64,
    /// Distinct experts guessed.
    pub experts_predicted: u64,
    /// Experts both guessed and used.
    pub experts_correct: u64,
    /// `experts_correct / experts_needed`.
    pub recall: f64,
    /// `experts_correct / experts_predicted`.
    pub precision: f64,
    /// Bytes uploaded early (predicted misses) per decoded token (per
    /// token when the trace has no decode ubatch).
    pub early_bytes_per_token: f64,
    /// Of the early uploads, the fraction the layer then used.
    pub early_used: f64,
    /// The cache's hits with prediction (early uploads the layer used
    /// count: they were off the critical path).
    pub hits: u64,
    /// Its misses with prediction (uploads on the critical path).
    pub misses: u64,
    /// The cache's hit rate without prediction.
    pub hit_rate_without: f64,
    /// The hit rate with prediction (early uploads the layer used count as
    /// hits: they were off the critical path).
    pub hit_rate: f64,
    /// Bytes uploaded on the critical path per decoded token, with
    /// prediction.
    pub critical_bytes_per_token: f64,
}

/// Replay `trace` with the history predictor of `params` in front of a
/// cache of `size` evicting by `policy`, ubatches of at most `max_batch`
/// tokens cached (each group has its own predictor, as its own bank).
pub fn run(
    trace: &Trace,
    groups: &[GroupShape],
    size: &Size,
    policy: PolicyKind,
    max_batch: usize,
    params: HistoryParams,
) -> Result<PredictRow> {
    let mut total = PredictReplay::default();
    let (mut early_dec, mut early) = (0u64, 0u64);
    let (mut critical_dec, mut critical_all) = (0u64, 0u64);
    let (n_all, n_dec) = trace.token_counts();
    for (g, &n_slots) in groups.iter().zip(&size.slots) {
        let view = sweep::group_view(trace, g, n_slots, max_batch, sweep::Tier::Device);
        let r = replay_predicted(
            &g.layers,
            trace.header.n_expert,
            g.n_used,
            params,
            Some((n_slots, policy.build(n_slots as usize))),
            &view,
        )?;
        early += r.uploaded * g.slot_bytes();
        early_dec += r.uploaded_decode * g.slot_bytes();
        critical_dec += r.cache.misses_decode * g.slot_bytes();
        critical_all += r.cache.misses() * g.slot_bytes();
        total.add(&r);
    }
    let per_token = |dec: u64, all: u64| {
        if n_dec > 0 {
            dec as f64 / n_dec as f64
        } else {
            all as f64 / n_all.max(1) as f64
        }
    };
    let without = sweep::run(
        trace,
        groups,
        size,
        SweepPolicy::Live(policy),
        max_batch,
        sweep::Tier::Device,
    )?;
    Ok(PredictRow {
        predictor: "history",
        policy: policy.name().to_string(),
        slots: size.slots.first().copied().unwrap_or(0),
        mib: size.mib,
        predicted_layers: total.layers,
        experts_needed: total.needed,
        experts_predicted: total.predicted,
        experts_correct: total.correct,
        recall: total.recall(),
        precision: total.precision(),
        early_bytes_per_token: per_token(early_dec, early),
        early_used: total.used as f64 / total.uploaded.max(1) as f64,
        hits: total.cache.hits(),
        misses: total.cache.misses(),
        hit_rate_without: without.hit_rate,
        hit_rate: total.cache.hit_rate(),
        critical_bytes_per_token: per_token(critical_dec, critical_all),
    })
}

/// The table of `--predict`.
pub fn table(rows: &[PredictRow]) -> String {
    let mut t = format!(
        "{:>9} {:>8} {:>6} {:>10} {:>8} {:>10} {:>8} {:>14} {:>7} {:>10} {:>7} {:>14}\n",
        "predictor",
        "policy",
        "slots",
        "MiB",
        "recall%",
        "precision%",
        "guesses",
        "early_B/token",
        "used%",
        "hit%_off",
        "hit%",
        "crit_B/token"
    );
    for r in rows {
        t.push_str(&format!(
            "{:>9} {:>8} {:>6} {:>10.2} {:>8.2} {:>10.2} {:>8.2} {:>14.0} {:>7.1} {:>10.2} {:>7.2} {:>14.0}\n",
            r.predictor,
            r.policy,
            r.slots,
            r.mib,
            100.0 * r.recall,
            100.0 * r.precision,
            r.experts_predicted as f64 / r.predicted_layers.max(1) as f64,
            r.early_bytes_per_token,
            100.0 * r.early_used,
            100.0 * r.hit_rate_without,
            100.0 * r.hit_rate,
            r.critical_bytes_per_token
        ));
    }
    t
}
