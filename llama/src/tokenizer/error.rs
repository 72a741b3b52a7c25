//! Errors from building a tokenizer out of vocabulary metadata and from using it.

use thiserror::Error;

/// Everything that can go wrong loading or using a [`super::Tokenizer`].
#[derive(Debug, Error)]
pub enum TokenizerError {
    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error("unsupported tokenizer model '{0}' (tokenizer.ggml.model): only 'llama' (SPM) and 'gpt2' (BPE) are supported")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer llama.cpp does not know.
    #[error("unknown pre-tokenizer type '{0}' (tokenizer.ggml.pre)")]
    UnknownPreTokenizer(String),
    /// A required metadata key is absent.
    #[error("missing vocabulary key {0}")]
    MissingKey(&'static str),
    /// A metadata key is present but its value is unusable.
    #[error("malformed vocabulary key {key}: {detail}")]
    Malformed {
        /// The GGUF key.
        key: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// A token id outside `0..n_vocab`.
    #[error("token id {id} is out of range (vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange {
        /// The offending id.
        id: i32,
        /// Vocabulary size.
        n_vocab: usize,
    },
    /// A pre-tokenizer regex failed to compile (a bug in the regex table).
    #[error("pre-tokenizer regex '{pattern}' failed to compile: {message}")]
    Regex {
        /// The regex source.
        pattern: String,
        /// The compiler's message.
        message: String,
    },
}
