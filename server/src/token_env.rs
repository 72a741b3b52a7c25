//! The model's vocabulary as `llguidance` sees it: the bytes each token
//! writes, in a token trie ([`LlamaTokEnv`]).
//!
//! A token's bytes are those `llama_token_to_piece` writes (the text the
//! server sends). Control, unknown and end-of-generation tokens, and
//! tokens that write nothing, are marked special (toktrie's `0xff` prefix
//! before their text): a grammar never matches them as text, and the
//! end-of-generation tokens are the trie's EOS set, allowed where the
//! grammar may end.

use std::sync::Arc;

use llama::tokenizer::TokenAttr;
use llama::Model;
use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};

/// A [`TokenizerEnv`] over a model's tokenizer.
pub struct LlamaTokEnv {
    model: Arc<Model>,
    trie: TokTrie,
}

/// The bytes of every token, special ones behind toktrie's marker.
pub fn token_bytes(model: &Model) -> Vec<Vec<u8>> {
    let tok = &model.tokenizer;
    (0..tok.n_vocab() as i32)
        .map(|id| {
            let special = tok.is_eog(id)
                || tok
                    .token_attr(id)
                    .is_some_and(|a| a.has(TokenAttr::CONTROL | TokenAttr::UNKNOWN));
            let piece = tok.token_to_piece(id, false);
            if special || piece.is_empty() {
                let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                match tok.token_text(id) {
                    Some(t) if !t.is_empty() => b.extend_from_slice(t.as_bytes()),
                    _ => b.extend_from_slice(format!("[{id}]").as_bytes()),
                }
                b
            } else {
                piece
            }
        })
        .collect()
}

impl LlamaTokEnv {
    /// The trie of `model`'s vocabulary; its EOS tokens are the model's
    /// end-of-generation tokens (`None` when it has none: no grammar can
    /// then end but by length).
    pub fn new(model: Arc<Model>) -> LlamaTokEnv {
        let tok = &model.tokenizer;
        let words = token_bytes(&model);
        let eog: Vec<TokenId> = tok.eog_tokens().map(|t| t as TokenId).collect();
        let eos = tok
            .eos()
            .map(|t| t as TokenId)
            .or_else(|| eog.first().copied())
            .unwrap_or(llguidance::toktrie::INVALID_TOKEN);
        let mut info = TokRxInfo::new(words.len() as u32, eos);
        info.tok_bos = tok.bos().map(|t| t as TokenId);
        info.tok_unk = tok.unk().map(|t| t as TokenId);
        info.tok_pad = tok.pad().map(|t| t as TokenId);
        info.tok_end_of_turn = tok.eot().map(|t| t as TokenId);
        let mut trie = TokTrie::from(&info, &words);
        if !eog.is_empty() {
            trie = trie.with_eos_tokens(&eog);
        }
        LlamaTokEnv { model, trie }
    }
}

impl TokenizerEnv for LlamaTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // the model's own tokenization of text; bytes that are not UTF-8
        // fall back to the trie's greedy split
        match std::str::from_utf8(s) {
            Ok(text) => match self.model.tokenizer.tokenize(text, false, false) {
                Ok(t) => t.into_iter().map(|t| t as TokenId).collect(),
                Err(_) => self.trie.greedy_tokenize(s),
            },
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}
