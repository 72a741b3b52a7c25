//! A draft model (`--spec-type draft-simple`, `-md`): a smaller model of
//! the target's vocabulary in its own context, drafting greedily. Its KV
//! cache keeps what it decoded: each proposal reuses the longest prefix it
//! shares with the target's tokens, removes the rest (the rejected
//! guesses) and decodes only what is new.

use super::{DraftSource, SpecParams};
use crate::{Context, Result};

/// The draft's probabilities are taken over its top candidates, as
/// llama.cpp's draft sampler keeps (`top_k = 10`).
const TOP_K: usize = 10;

/// A draft model's context and what its cache holds.
pub struct DraftModel {
    ctx: Context,
    /// The tokens in the draft's KV cache, position by position.
    cached: Vec<i32>,
    p_min: f32,
    /// Draft decodes run (batches, prompt catch-up included).
    pub n_decodes: u64,
}

impl DraftModel {
    /// Draft with `ctx` (a fresh context of the draft model, checked
    /// compatible with [`super::compat::check`]).
    pub fn new(ctx: Context, params: &SpecParams) -> DraftModel {
        DraftModel {
            ctx,
            cached: Vec::new(),
            p_min: params.p_min,
            n_decodes: 0,
        }
    }

    /// The draft's context (for its stats).
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Decode `tokens` at the next positions, in `-b`-sized chunks.
    fn feed(&mut self, tokens: &[i32]) -> Result<()> {
        let n_batch = self.ctx.params().n_batch.max(1);
        for chunk in tokens.chunks(n_batch) {
            self.ctx.decode(chunk, false)?;
            self.n_decodes += 1;
            self.cached.extend_from_slice(chunk);
        }
        Ok(())
    }
}

/// The most likely token of `logits` and its probability among the top
/// `TOP_K` candidates (softmax at temperature 1; ties to the lower id).
pub fn top_token(logits: &[f32]) -> (i32, f32) {
    let best = crate::sampling::argmax(logits);
    let max = logits.get(best as usize).copied().unwrap_or(0.0);
    let mut top: Vec<f32> = logits.to_vec();
    let k = TOP_K.min(top.len());
    if k == 0 {
        return (0, 0.0);
    }
    top.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    let sum: f32 = top[..k].iter().map(|&l| (l - max).exp()).sum();
    (best, 1.0 / sum)
}

impl DraftSource for DraftModel {
    fn name(&self) -> &'static str {
        "draft-simple"
    }

    fn n_decodes(&self) -> u64 {
        self.n_decodes
    }

    fn propose(&mut self, history: &[i32], last: i32, n_max: usize) -> Result<Vec<i32>> {
        if n_max == 0 {
            return Ok(Vec::new());
        }
        // the target's tokens, then `last`: reuse the cached prefix, and
        // decode at least `last` so that its logits are fresh
        let want_len = history.len() + 1;
        let token_at = |i: usize| if i < history.len() { history[i] } else { last };
        let mut keep = self
            .cached
            .iter()
            .enumerate()
            .take_while(|&(i, &t)| i < want_len && t == token_at(i))
            .count();
        keep = keep.min(want_len - 1);
        if keep < self.cached.len() {
            self.ctx.seq_rm(0, keep as i32, -1);
            self.cached.truncate(keep);
        }
        let rest: Vec<i32> = (keep..want_len).map(token_at).collect();
        if want_len > self.ctx.n_ctx() {
            return Ok(Vec::new()); // the draft's context is full: no guesses
        }
        self.feed(&rest)?;
        let mut out = Vec::with_capacity(n_max);
        while let Some(row) = self.ctx.logits(0) {
            let (id, p) = top_token(row);
            if p < self.p_min {
                break;
            }
            out.push(id);
            if out.len() >= n_max || self.cached.len() + 1 > self.ctx.n_ctx() {
                break;
            }
            self.feed(&[id])?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_token_probability_over_the_top_ten() {
        let (id, p) = top_token(&[0.0, 2.0, 1.0]);
        assert_eq!(id, 1);
        let e = |x: f32| x.exp();
        assert!((p - e(0.0) / (e(0.0) + e(-1.0) + e(-2.0))).abs() < 1e-6);
        // candidates beyond the top ten do not count
        let mut l = vec![0.0f32; 20];
        l[3] = 5.0;
        let (id, p) = top_token(&l);
        assert_eq!(id, 3);
        assert!((p - 1.0 / (1.0 + 9.0 * e(-5.0))).abs() < 1e-6);
    }
}
