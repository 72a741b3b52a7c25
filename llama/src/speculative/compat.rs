//! Whether a draft model can speak for a target: llama.cpp's
//! `common_speculative_are_compatible` (same vocabulary type, the same
//! BOS and EOS handling, sizes within 128 tokens, the same token texts
//! from id 5 on), refused with llama.cpp's error.

use crate::{LlamaError, Model, Result};

/// Vocabulary sizes may differ by at most this many tokens (llama.cpp's
/// `SPEC_VOCAB_MAX_SIZE_DIFFERENCE`).
pub const MAX_SIZE_DIFFERENCE: usize = 128;
/// Token texts are compared from this id on (`SPEC_VOCAB_CHECK_START_TOKEN_ID`).
pub const CHECK_START_TOKEN_ID: usize = 5;

/// llama.cpp's error for an incompatible draft.
pub const ERROR: &str = "draft model vocab type must match target model to use speculation";

/// Ok when `draft` can draft for `target`; else llama.cpp's error, with
/// what differs.
pub fn check(target: &Model, draft: &Model) -> Result<()> {
    let (t, d) = (&target.tokenizer, &draft.tokenizer);
    let why = if t.vocab_type() != d.vocab_type() {
        Some(format!(
            "vocab type {:?} (target) vs {:?} (draft)",
            t.vocab_type(),
            d.vocab_type()
        ))
    } else if t.add_bos() != d.add_bos() || (t.add_bos() && t.bos() != d.bos()) {
        Some(format!(
            "bos tokens: add {} - {}, id {:?} - {:?}",
            t.add_bos(),
            d.add_bos(),
            t.bos(),
            d.bos()
        ))
    } else if t.add_eos() != d.add_eos() || (t.add_eos() && t.eos() != d.eos()) {
        Some(format!(
            "eos tokens: add {} - {}, id {:?} - {:?}",
            t.add_eos(),
            d.add_eos(),
            t.eos(),
            d.eos()
        ))
    } else if t.n_vocab().abs_diff(d.n_vocab()) > MAX_SIZE_DIFFERENCE {
        Some(format!(
            "target vocab size {} does not match draft vocab size {} - difference {}, max allowed {MAX_SIZE_DIFFERENCE}",
            t.n_vocab(),
            d.n_vocab(),
            t.n_vocab().abs_diff(d.n_vocab())
        ))
    } else {
        (CHECK_START_TOKEN_ID..t.n_vocab().min(d.n_vocab())).find_map(|i| {
            let id = i as i32;
            let (a, b) = (t.token_text(id), d.token_text(id));
            (a != b).then(|| {
                format!(
                    "token {i} content differs - target '{}', draft '{}'",
                    a.unwrap_or(""),
                    b.unwrap_or("")
                )
            })
        })
    };
    match why {
        None => Ok(()),
        Some(w) => Err(LlamaError::Speculative(format!(
            "the target and draft vocabs are not compatible ({w}): {ERROR}"
        ))),
    }
}
