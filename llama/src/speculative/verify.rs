//! The target's side of speculative decoding: each sampled token is fed
//! through [`SpecDecoder::feed`], which either finds it among the guesses
//! of the last verify batch (its logits row is already there) or rolls the
//! target's KV cache back past the rejected guesses and decodes the token
//! with the next proposal in one verify batch.

use std::collections::VecDeque;

use super::{DraftSource, SpecParams, SpecStats};
use crate::{Context, Result};

/// Speculative decoding of sequence 0 of a target context.
pub struct SpecDecoder {
    source: Box<dyn DraftSource + Send>,
    params: SpecParams,
    /// Every token the target has accepted, prompt first (in its cache,
    /// except the guesses still pending).
    history: Vec<i32>,
    /// The guesses of the last verify batch not yet checked, each with the
    /// target's logits after it.
    pending: VecDeque<(i32, Vec<f32>)>,
    /// The logits row [`SpecDecoder::feed`] returns.
    row: Vec<f32>,
    stats: SpecStats,
}

impl SpecDecoder {
    /// Speculate with `source` after `prompt` (already decoded by the
    /// target).
    pub fn new(source: Box<dyn DraftSource + Send>, params: SpecParams, prompt: &[i32]) -> Self {
        let stats = SpecStats {
            spec_type: source.name().to_string(),
            ..Default::default()
        };
        SpecDecoder {
            source,
            params,
            history: prompt.to_vec(),
            pending: VecDeque::new(),
            row: Vec::new(),
            stats,
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> &SpecStats {
        &self.stats
    }

    /// Decodes the draft source ran.
    pub fn draft_decodes(&self) -> u64 {
        self.source.n_decodes()
    }

    /// Tokens the target has accepted (prompt included): the positions
    /// the next token follows.
    pub fn n_tokens(&self) -> usize {
        self.history.len()
    }

    /// Feed the token just sampled, `id`, to the target; returns the
    /// target's logits after it (what the next token is sampled from) and
    /// whether the target ran a decode for it. A new verify batch carries
    /// at most `max_draft` guesses (the tokens still wanted after the next
    /// one, as llama.cpp's server caps them by `n_predict`).
    pub fn feed(&mut self, ctx: &mut Context, id: i32, max_draft: usize) -> Result<(&[f32], bool)> {
        if let Some((guess, _)) = self.pending.front() {
            if *guess == id {
                let (_, row) = self.pending.pop_front().unwrap_or_default();
                self.row = row;
                self.history.push(id);
                self.stats.n_accepted += 1;
                return Ok((&self.row, false));
            }
            // rejected: forget every pending guess from here on
            let p0 = self.history.len() as i32;
            ctx.seq_rm(0, p0, -1);
            self.pending.clear();
        }
        let room = ctx.n_ctx().saturating_sub(ctx.kv_cache().used_cells() + 1);
        let n_max = self.params.n_max.min(room).min(max_draft);
        let mut draft = if n_max > 0 {
            self.source.propose(&self.history, id, n_max)?
        } else {
            Vec::new()
        };
        draft.truncate(n_max);
        if draft.len() < self.params.n_min {
            draft.clear();
        }
        let mut batch = Vec::with_capacity(draft.len() + 1);
        batch.push(id);
        batch.extend_from_slice(&draft);
        let before = ctx.stats().h2d_bytes_experts;
        ctx.decode(&batch, !draft.is_empty())?;
        if draft.is_empty() {
            self.stats.n_plain_decodes += 1;
        } else {
            self.stats.n_verify_batches += 1;
            self.stats.verify_tokens += batch.len() as u64;
            self.stats.n_drafted += draft.len() as u64;
            self.stats.verify_expert_bytes += ctx.stats().h2d_bytes_experts.saturating_sub(before);
        }
        let row0 = ctx
            .logits(0)
            .ok_or_else(|| crate::LlamaError::Batch("no logits after the verify batch".into()))?;
        self.row.clear();
        self.row.extend_from_slice(row0);
        for (i, &g) in draft.iter().enumerate() {
            let r = ctx.logits(i + 1).ok_or_else(|| {
                crate::LlamaError::Batch("no logits after the verify batch".into())
            })?;
            self.pending.push_back((g, r.to_vec()));
        }
        self.history.push(id);
        Ok((&self.row, true))
    }

    /// Drop the pending guesses from the target's cache (before the
    /// context is used for anything else).
    pub fn finish(&mut self, ctx: &mut Context) {
        if !self.pending.is_empty() {
            ctx.seq_rm(0, self.history.len() as i32, -1);
            self.pending.clear();
        }
    }
}
