//! A batch of tokens of one or several sequences (llama.cpp's
//! `llama_batch`): per token its id, position, sequence and whether its
//! logits are wanted.

use crate::kv_cache::SeqId;

/// Tokens to decode together; sequences may be mixed freely.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Token ids.
    pub tokens: Vec<i32>,
    /// Each token's position in its sequence.
    pub pos: Vec<i32>,
    /// Each token's sequence.
    pub seq_id: Vec<SeqId>,
    /// Whether each token's logits are kept (an output row).
    pub logits: Vec<bool>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Append a token (llama.cpp's `common_batch_add`).
    pub fn add(&mut self, token: i32, pos: i32, seq: SeqId, logits: bool) {
        self.tokens.push(token);
        self.pos.push(pos);
        self.seq_id.push(seq);
        self.logits.push(logits);
    }

    /// Tokens in the batch.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the batch holds no token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Remove every token.
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.pos.clear();
        self.seq_id.clear();
        self.logits.clear();
    }

    /// Output rows the batch asks for.
    pub fn n_outputs(&self) -> usize {
        self.logits.iter().filter(|&&l| l).count()
    }
}
