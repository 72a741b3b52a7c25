//! Errors of the scheduler and of copy hooks.

use ggml_core::backend::BackendError;
use ggml_core::TensorId;

/// What went wrong while planning or running a graph.
#[derive(Debug, thiserror::Error)]
pub enum SchedError {
    /// The backend list is empty or its last backend is not a host backend.
    #[error("the last backend must be a host backend (the CPU); got [{0}]")]
    NoHostBackend(String),
    /// No backend implements a node's op (or none that can reach its memory).
    #[error("no backend supports op {op} (node '{name}'){detail}")]
    Unsupported {
        /// ggml's op name (`MUL_MAT_ID`).
        op: &'static str,
        /// The node.
        node: TensorId,
        /// The node's name (or `#<id>` when it has none).
        name: String,
        /// Extra context, empty or starting with `: `.
        detail: String,
    },
    /// A backend could not allocate the compute memory of a plan.
    #[error("allocating {size} bytes of compute memory on {backend}: {source}")]
    Alloc {
        /// The backend.
        backend: String,
        /// Requested size in bytes.
        size: usize,
        /// The backend's error.
        source: BackendError,
    },
    /// A compute lender's loan does not hold what was asked for on the
    /// backend (too small, misaligned, past its buffer's end, or memory the
    /// backend cannot use).
    #[error("the compute lender's loan on {backend} is unusable: {detail}")]
    BadLoan {
        /// The backend.
        backend: String,
        /// What is wrong with it.
        detail: String,
    },
    /// Copying a split input failed.
    #[error("copying '{tensor}' from {src} to {dst} (split {split}): {source}")]
    Copy {
        /// Source tensor name.
        tensor: String,
        /// Source backend.
        src: String,
        /// Destination backend.
        dst: String,
        /// Split index.
        split: usize,
        /// The backend's error.
        source: BackendError,
    },
    /// A backend failed computing a split.
    #[error("backend {backend} failed computing split {split}: {source}")]
    Compute {
        /// The backend.
        backend: String,
        /// Split index.
        split: usize,
        /// The backend's error.
        source: BackendError,
    },
    /// The copy hook returned an error.
    #[error("copy hook failed on '{tensor}' for {backend} (split {split}): {source}")]
    Hook {
        /// The host weight offered to the hook.
        tensor: String,
        /// The split's backend.
        backend: String,
        /// Split index.
        split: usize,
        /// The hook's error.
        source: HookError,
    },
    /// The graph cannot be scheduled as built (e.g. memory no backend can use).
    #[error("invalid graph: {0}")]
    Graph(String),
}

/// An error returned by a [`crate::CopyHook`].
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// A backend operation the hook asked for failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// Anything else (e.g. an index out of range in the data the hook read).
    #[error("{0}")]
    Msg(String),
}

impl HookError {
    /// An error with a message.
    pub fn msg(m: impl std::fmt::Display) -> HookError {
        HookError::Msg(m.to_string())
    }
}
