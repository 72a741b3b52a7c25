//! A clock that backends advance as they issue work, and the event that
//! stamps a point of its time.
//!
//! The simulator's `sim::SimClock` is one: the sim device advances it per
//! op, copy and wait, and a CPU backend that joins it
//! ([`crate::cpu::CpuBackend::with_clock`]) reports each node it computes
//! through [`DeviceClock::host_compute`], so that one run has one timeline.
//! The trait holds exactly what a backend that joins a clock needs; callers
//! that want the simulator's own figures (its profile, totals, recorded
//! timeline) get the concrete clock back with `sim::SimClock::of`.

use std::any::Any;
use std::sync::Arc;

use crate::graph::Graph;
use crate::tensor::TensorId;

/// A clock shared by the backends of a run (see the module docs).
pub trait DeviceClock: Send + Sync {
    /// Host time now, in the clock's nanoseconds: work the host thread has
    /// issued so far is complete on the host.
    fn now_ns(&self) -> u64;

    /// The host thread computed `node` of `g` on `backend` (the CPU
    /// backend): advance host time by what the node costs, and record its
    /// span when the clock records a timeline.
    fn host_compute(&self, backend: &str, g: &Graph, node: TensorId);

    /// The host thread spent `dur_ns` of its wall clock on its own work
    /// (`what`: building a graph, planning, a copy hook's decisions): a
    /// simulated clock advances host time by it (an input to the
    /// simulation, measured rather than modelled); others ignore it.
    fn host_work(&self, what: &str, dur_ns: u64) {
        let _ = (what, dur_ns);
    }

    /// The clock as `Any`, for callers that need the concrete clock.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// An event of a backend on a [`DeviceClock`]: the clock time at which the
/// work queued before it completes. A backend on the same clock that waits
/// for it starts its later work no earlier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockEvent {
    /// Completion time, nanoseconds of the clock.
    pub at_ns: u64,
}
