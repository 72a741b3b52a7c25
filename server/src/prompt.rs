//! A prompt's tokens as a slot can hold them: the text tokenized (refused
//! early when it cannot fit), a prompt of text and token ids made tokens,
//! and llama.cpp's truncation of a prompt longer than the context.

use crate::error::ApiError;
use crate::request::Piece;
use crate::state::AppState;

pub(crate) fn too_long(n: String, slot: usize) -> ApiError {
    let mut e = ApiError::bad_request(format!(
        "the prompt is {n} tokens, more than a slot's context of {slot} tokens (-c / -np)"
    ));
    e.kind = "exceed_context_size_error";
    e
}

/// The tokens of `text` (with BOS where `add_special`); 400 when even its
/// fewest tokens cannot fit a slot.
pub fn tokenize_prompt(st: &AppState, text: &str, add_special: bool) -> Result<Vec<i32>, ApiError> {
    // a prompt of more bytes than a slot's worth of the longest tokens
    // cannot fit (even truncated, it would be mostly thrown away): refuse
    // it before tokenizing
    let cap = if st.ctx_shift { 64 } else { 1 };
    if text.len()
        > st.n_slot_ctx
            .saturating_mul(st.max_token_bytes.max(1))
            .saturating_mul(cap)
    {
        return Err(too_long(
            format!(
                "{} bytes, so at least {}",
                text.len(),
                text.len() / st.max_token_bytes.max(1)
            ),
            st.n_slot_ctx,
        ));
    }
    st.model
        .tokenizer
        .tokenize(text, add_special, true)
        .map_err(|e| ApiError::bad_request(format!("cannot tokenize the prompt: {e}")))
}

/// The tokens of a prompt's pieces: text pieces tokenized (with BOS when
/// the text opens the prompt), token ids as given.
pub fn prompt_tokens(st: &AppState, pieces: &[Piece]) -> Result<Vec<i32>, ApiError> {
    let mut out = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Text(t) => out.extend(tokenize_prompt(st, t, i == 0)?),
            Piece::Token(t) => out.push(*t),
        }
    }
    Ok(out)
}

/// llama.cpp's prompt truncation: keep `n_keep` tokens and drop whole
/// blocks of half the rest of the context from after them until the
/// prompt fits.
pub fn truncate_prompt(prompt: &[i32], n_ctx: usize, n_keep: i64) -> Vec<i32> {
    let n_keep = if n_keep < 0 {
        prompt.len()
    } else {
        n_keep as usize
    }
    .min(n_ctx.saturating_sub(4));
    let n_left = n_ctx - n_keep;
    let n_block = (n_left / 2).max(1);
    let erased = (prompt.len() - n_keep - n_block) / n_block;
    let mut out = prompt[..n_keep].to_vec();
    out.extend_from_slice(&prompt[(n_keep + erased * n_block).min(prompt.len())..]);
    out
}
