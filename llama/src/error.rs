//! The crate's error type: every failure names what went wrong and where.

use ggml_core::gguf::GgufError;
use ggml_core::BackendError;

/// An error from loading, tokenizing, decoding or sampling.
#[derive(Debug, thiserror::Error)]
pub enum LlamaError {
    /// The GGUF file could not be read or is malformed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// `general.architecture` names an architecture we do not implement.
    #[error("unsupported architecture '{0}' (supported: {supported})", supported = crate::arch::Arch::supported_names())]
    UnknownArch(String),
    /// A required hyper-parameter is missing or out of range.
    #[error("hyper-parameter '{key}': {why}")]
    HParam {
        /// The GGUF metadata key (or hyper-parameter name).
        key: String,
        /// What is wrong with it.
        why: String,
    },
    /// A tensor the architecture needs is missing from the file.
    #[error("missing tensor '{0}'")]
    MissingTensor(String),
    /// A tensor has the wrong shape or an unusable type.
    #[error("tensor '{name}' has {found}, expected {expected}")]
    BadTensor {
        /// The tensor name.
        name: String,
        /// Its shape and type.
        found: String,
        /// The shape and types the architecture needs.
        expected: String,
    },
    /// A placement rule is malformed.
    #[error("placement: {0}")]
    Placement(String),
    /// A batch is malformed (empty, too long, token out of range).
    #[error("batch: {0}")]
    Batch(String),
    /// The batch does not fit in the context.
    #[error("context full: {0}")]
    ContextFull(String),
    /// Speculative decoding cannot run (an incompatible draft model).
    #[error("speculative decoding: {0}")]
    Speculative(String),
    /// Tokenizer failure.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A backend failed (allocation, copy or compute).
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
    /// The scheduler failed.
    #[error("scheduler: {0}")]
    Sched(String),
    /// Anything else the caller passed in that we cannot use.
    #[error("{0}")]
    Invalid(String),
}

/// Shorthand.
pub type Result<T> = std::result::Result<T, LlamaError>;
