//! Speculative decoding's figures for `llama-run`'s summary and
//! `--stats-out` (`spec_*` keys): drafted and accepted tokens, the
//! acceptance rate, verify batches and their expert bytes. Present only
//! when a run speculates, so every other run's output is unchanged.

use llama::speculative::SpecStats;
use serde::Serialize;

use crate::cli::fmt_bytes;

/// The figures; field names are `--stats-out` keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SpecSummary {
    /// llama.cpp's `--spec-type` of the run (`draft-simple`, `ngram-simple`).
    pub spec_type: String,
    /// `--spec-draft-n-max`.
    pub spec_draft_n_max: usize,
    /// Tokens proposed and verified.
    pub spec_n_drafted: u64,
    /// Proposed tokens the target accepted.
    pub spec_n_accepted: u64,
    /// Accepted over drafted.
    pub spec_acceptance_rate: f64,
    /// Target decodes carrying proposals.
    pub spec_verify_batches: u64,
    /// Tokens in them (each sampled token and its proposals).
    pub spec_verify_tokens: u64,
    /// Expert bytes the selective copy moved for them.
    pub spec_verify_expert_bytes: u64,
    /// Those bytes per accepted token (0 when none was accepted).
    pub spec_expert_bytes_per_accepted: f64,
    /// Target decodes with no proposal.
    pub spec_plain_decodes: u64,
    /// Decodes the draft model ran (0 for n-gram lookup).
    pub spec_draft_decodes: u64,
}

impl SpecSummary {
    /// From a decoder's counters.
    pub fn of(s: &SpecStats, n_max: usize, draft_decodes: u64) -> SpecSummary {
        SpecSummary {
            spec_type: s.spec_type.clone(),
            spec_draft_n_max: n_max,
            spec_n_drafted: s.n_drafted,
            spec_n_accepted: s.n_accepted,
            spec_acceptance_rate: s.acceptance_rate(),
            spec_verify_batches: s.n_verify_batches,
            spec_verify_tokens: s.verify_tokens,
            spec_verify_expert_bytes: s.verify_expert_bytes,
            spec_expert_bytes_per_accepted: s.expert_bytes_per_accepted().unwrap_or(0.0),
            spec_plain_decodes: s.n_plain_decodes,
            spec_draft_decodes: draft_decodes,
        }
    }

    /// The summary lines (llama.cpp's `n_drafted`, `n_accept`, `accept`
    /// of `llama-speculative-simple`, and the verify batches' traffic).
    pub fn to_text(&self) -> String {
        format!(
            "speculative   = {} (--spec-draft-n-max {}): n_drafted = {}, n_accept = {}, accept = {:.3}%\n\
             spec verify   = {} batches of {} tokens, expert h2d {} ({} per accepted token), {} decodes without a draft\n",
            self.spec_type,
            self.spec_draft_n_max,
            self.spec_n_drafted,
            self.spec_n_accepted,
            100.0 * self.spec_acceptance_rate,
            self.spec_verify_batches,
            self.spec_verify_tokens,
            fmt_bytes(self.spec_verify_expert_bytes as f64),
            fmt_bytes(self.spec_expert_bytes_per_accepted),
            self.spec_plain_decodes
        )
    }
}
