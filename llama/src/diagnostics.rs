//! What the model code records through the backends' optional diagnostics
//! ([`ggml_core::BackendDiagnostics`]): the labels of the copies it and the
//! scheduler queue (timelines name each copy after its tensor), the router
//! id reads in a device's pipeline counters, and the busy time of the
//! summary's host time. The scheduler asks its backends for none of this;
//! the context installs [`CopyLabels`] as its observer, and the copy hooks
//! call the functions here. A backend without diagnostics records nothing.

use ggml_core::Backend;
use ggml_sched::ExecObserver;

/// Name the copies queued next on `be` (for its timeline), where it keeps
/// one.
pub(crate) fn label(be: &dyn Backend, label: &str) {
    if let Some(d) = be.diagnostics() {
        d.set_label(label);
    }
}

/// Count one read of router ids into host memory in `be`'s pipeline
/// counters, where it keeps them (`id_reads`: the cache's, the selective
/// copy's and the predictors' reads).
pub(crate) fn count_id_read(be: &dyn Backend) {
    if let Some(c) = be.diagnostics().and_then(|d| d.pipeline_counters()) {
        c.add_id_read();
    }
}

/// Wall-clock nanoseconds `be`'s calls have spent in its own work so far
/// ([`ggml_core::BackendDiagnostics::busy_wall_ns`]; 0 without diagnostics).
pub(crate) fn busy_wall_ns(be: &dyn Backend) -> u64 {
    be.diagnostics().map_or(0, |d| d.busy_wall_ns())
}

/// The scheduler's observer: labels each copy it queues with the tensor
/// it copies.
pub(crate) struct CopyLabels;

impl ExecObserver for CopyLabels {
    fn before_copies(&self, backend: &dyn Backend, l: &str) {
        label(backend, l);
    }
}
