//! The one place the tools touch the tokenizer (`llama::tokenizer`).

use std::path::Path;

use anyhow::{Context as _, Result};
use ggml_core::gguf::GgufFile;
use llama::tokenizer::Tokenizer;

/// Load only the vocabulary of a GGUF file (works on vocabulary-only files:
/// no tensors are read).
pub fn load_vocab(path: &Path) -> Result<Tokenizer> {
    crate::cli::check_model_path(path)?;
    let file = GgufFile::open(path).with_context(|| format!("cannot open '{}'", path.display()))?;
    Tokenizer::from_gguf(&file).map_err(|e| anyhow::anyhow!("'{}': tokenizer: {e}", path.display()))
}

/// Text to ids, as `llama_tokenize`.
pub fn tokenize(
    t: &Tokenizer,
    text: &str,
    add_special: bool,
    parse_special: bool,
) -> Result<Vec<i32>> {
    t.tokenize(text, add_special, parse_special)
        .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))
}

/// The bytes of one token, as `llama_token_to_piece`.
pub fn piece(t: &Tokenizer, id: i32, special: bool) -> Vec<u8> {
    t.token_to_piece(id, special)
}

/// Whether `id` ends generation.
pub fn is_eog(t: &Tokenizer, id: i32) -> bool {
    t.is_eog(id)
}
