//! Speculative decoding (llama.cpp's `common/speculative.cpp` and
//! `examples/speculative-simple`): a cheap source guesses the next tokens,
//! the target decodes the last sampled token and the guesses in one verify
//! batch, and every guess the target's own sampler agrees with is kept
//! without a decode of its own.
//!
//! Data flows: a [`DraftSource`] ([`draft::DraftModel`], a smaller model
//! of the same vocabulary in its own [`crate::Context`]; or
//! [`ngram::NgramSimple`], llama.cpp's draft-free `ngram-simple` lookup in
//! the token history) proposes tokens; [`verify::SpecDecoder`] feeds each
//! sampled token to the target: a token that equals the next pending
//! guess costs nothing (its logits row came with the verify batch), one
//! that differs rolls the target's KV cache back past the rejected guesses
//! and starts the next verify batch. The verify batch is an ordinary
//! target batch, so it goes through the scheduler's selective expert copy
//! and the expert cache like any other; its expert bytes are counted
//! apart ([`stats::SpecStats`]). [`compat`] refuses a draft whose
//! vocabulary differs from the target's, with llama.cpp's error.
//!
//! The tokens the target emits are the tokens it would emit without
//! speculation: each one is sampled from the target's logits at its
//! position, in order, by the caller's own sampler.

pub mod compat;
pub mod draft;
pub mod ngram;
pub mod stats;
pub mod verify;

pub use stats::SpecStats;
pub use verify::SpecDecoder;

use crate::Result;

/// llama.cpp's draft parameters (`common_params_speculative_draft`), with
/// its defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpecParams {
    /// Most tokens drafted per verify batch (`--spec-draft-n-max`,
    /// `--draft-max`; llama.cpp's default 3).
    pub n_max: usize,
    /// A draft shorter than this is dropped (`--spec-draft-n-min`,
    /// `--draft-min`; default 0).
    pub n_min: usize,
    /// The draft model stops drafting at a token whose probability is
    /// below this (`--spec-draft-p-min`, `--draft-p-min`; default 0.0).
    pub p_min: f32,
}

impl Default for SpecParams {
    fn default() -> SpecParams {
        SpecParams {
            n_max: 3,
            n_min: 0,
            p_min: 0.0,
        }
    }
}

/// What proposes the tokens a verify batch checks.
pub trait DraftSource {
    /// llama.cpp's `--spec-type` name of the source (`draft-simple`,
    /// `ngram-simple`).
    fn name(&self) -> &'static str;

    /// Up to `n_max` tokens guessed to follow `history` (every token the
    /// target holds, prompt first) and then `last` (the token just
    /// sampled, not yet decoded). May return fewer, or none.
    fn propose(&mut self, history: &[i32], last: i32, n_max: usize) -> Result<Vec<i32>>;

    /// Decodes the source has run (a draft model's; 0 for a lookup).
    fn n_decodes(&self) -> u64 {
        0
    }
}
