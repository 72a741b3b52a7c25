//! The optional diagnostics of a backend: what it records about its own
//! work for timelines, counters and the run summary (ggml's two backend
//! interfaces have no counterpart: this is ggml-rs's own). A backend that
//! records nothing has
//! none: [`crate::backend::Backend::diagnostics`] returns `None`, and none
//! of this is needed to compute.
//!
//! The scheduler (`ggml-sched`) never asks for it; the model code and the
//! tools do, to label copies, read the pipeline counters and timelines,
//! and share the sim device's clock with the CPU.

use std::sync::Arc;

use crate::clock::DeviceClock;
use crate::error::BackendError;
use crate::link::LinkCounters;
use crate::pipeline::PipelineCounters;
use crate::timeline::Timeline;

/// What a backend records about its own work. Every method has the
/// default of a backend that records nothing.
pub trait BackendDiagnostics: Send + Sync {
    /// Name the work queued next (copies), for timelines (`nvtxRangePush` in
    /// spirit); a no-op where nothing records.
    fn set_label(&self, _label: &str) {}

    /// This backend's pipeline counters ([`crate::pipeline`]), where it keeps
    /// them (device backends); `None` for the CPU.
    fn pipeline_counters(&self) -> Option<&PipelineCounters> {
        None
    }

    /// The counters of the network link to this backend's device, where it
    /// has one (an RPC worker: bytes and messages each way, round trips;
    /// [`crate::link`]); `None` for devices of this host.
    fn link_counters(&self) -> Option<&LinkCounters> {
        None
    }

    /// Start (`true`) or stop recording a timeline of this backend's own
    /// work from its device's events (CUDA events). Returns whether the
    /// backend records one; the sim device's timeline is its clock's
    /// ([`BackendDiagnostics::device_clock`]), not this.
    fn set_event_timeline(&self, _on: bool) -> bool {
        false
    }

    /// The spans recorded since
    /// [`BackendDiagnostics::set_event_timeline`]`(true)`, leaving none
    /// behind (waits for the recorded work to finish).
    fn take_event_timeline(&self) -> Result<Option<Timeline>, BackendError> {
        Ok(None)
    }

    /// Wall-clock nanoseconds host threads have spent so far inside this
    /// backend's calls doing its work there and then: kernels it runs on
    /// the calling thread (the CPU, a sim device) and copies it makes
    /// synchronously (a sim device's memory). Cumulative; what a run spends
    /// outside it (and outside waits) is the host's own time. A backend
    /// that only queues work (a GPU) has nothing to count: 0, the default.
    fn busy_wall_ns(&self) -> u64 {
        0
    }

    /// The clock this backend advances, if any: the sim device's simulated
    /// clock, which the CPU backend joins to share its timeline. The
    /// simulator's own figures (profile, totals, recorded timeline) come
    /// from the concrete clock, `sim::SimClock::of(backend)`.
    fn device_clock(&self) -> Option<Arc<dyn DeviceClock>> {
        None
    }
}
