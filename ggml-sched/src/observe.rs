//! The run's observer: what the scheduler tells its caller while it
//! queues a graph, for the caller's own diagnostics.
//!
//! The scheduler asks its backends only for their device and stream parts
//! (`ggml_core::BackendDevice`, `ggml_core::BackendStream`); what a backend
//! records about its work (`ggml_core::BackendDiagnostics`: labels,
//! counters, timelines) is the caller's business. A caller that keeps a
//! timeline installs an [`ExecObserver`]
//! ([`crate::Scheduler::set_observer`]) and labels the copies there (as
//! `llama`'s context does, naming each copy after its tensor).

use ggml_core::Backend;

/// Told what the copies the scheduler queues next are of.
pub trait ExecObserver: Send + Sync {
    /// The copies queued next into or out of `backend`'s memory (until the
    /// next call) are of `label`: the source tensor's name, or
    /// `prefetch NAME` for the look-ahead's offer of `NAME` to the copy
    /// hook (what the hook writes then). Called before each input copy,
    /// each offer to the hook and each look-ahead offer.
    fn before_copies(&self, backend: &dyn Backend, label: &str);
}
