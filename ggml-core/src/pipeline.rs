//! Pipeline counters: how often the host stops the device or talks to it.
//!
//! Every device backend that keeps them (its diagnostics'
//! [`crate::BackendDiagnostics::pipeline_counters`]) counts the same four
//! things, so the simulated device (`SIM0`) and CUDA (driver or emulator)
//! report comparable figures:
//! - `device_syncs`: device-wide synchronizations (every stream of the
//!   device drained, the host blocked until then);
//! - `id_reads`: reads of router ids into host memory (the expert cache's
//!   and the selective copy's reads through `ggml_sched::HookCtx::read_ids`,
//!   the look-ahead's and the predictors', which `llama` counts: the
//!   scheduler keeps no diagnostics);
//! - `launches`: kernel launches the host issued, a graph replay counting as
//!   one (a capture counts the launches it records and the graph's first
//!   launch);
//! - `graph_replays`: captured kernel sequences replayed.
//!
//! A host wait on one event (a read on the readback stream) is not a device
//! synchronization and is not counted here.

use std::sync::atomic::{AtomicU64, Ordering};

/// The live counters of one backend (shared, updated from any thread).
#[derive(Debug, Default)]
pub struct PipelineCounters {
    device_syncs: AtomicU64,
    id_reads: AtomicU64,
    launches: AtomicU64,
    graph_replays: AtomicU64,
}

impl PipelineCounters {
    /// One device-wide synchronization.
    pub fn add_device_sync(&self) {
        self.device_syncs.fetch_add(1, Ordering::Relaxed);
    }

    /// One read of router ids into host memory.
    pub fn add_id_read(&self) {
        self.id_reads.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` kernel launches issued by the host.
    pub fn add_launches(&self, n: u64) {
        self.launches.fetch_add(n, Ordering::Relaxed);
    }

    /// One graph replay (also one launch).
    pub fn add_graph_replay(&self) {
        self.graph_replays.fetch_add(1, Ordering::Relaxed);
        self.launches.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> PipelineCounts {
        PipelineCounts {
            device_syncs: self.device_syncs.load(Ordering::Relaxed),
            id_reads: self.id_reads.load(Ordering::Relaxed),
            launches: self.launches.load(Ordering::Relaxed),
            graph_replays: self.graph_replays.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of [`PipelineCounters`] (or a sum or difference of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PipelineCounts {
    /// Device-wide synchronizations.
    pub device_syncs: u64,
    /// Router id reads into host memory.
    pub id_reads: u64,
    /// Kernel launches issued by the host (a graph replay is one).
    pub launches: u64,
    /// Graph replays.
    pub graph_replays: u64,
}

impl PipelineCounts {
    /// Field-wise sum.
    pub fn add(&mut self, o: &PipelineCounts) {
        self.device_syncs += o.device_syncs;
        self.id_reads += o.id_reads;
        self.launches += o.launches;
        self.graph_replays += o.graph_replays;
    }

    /// `self - base`, field by field (saturating).
    pub fn since(&self, base: &PipelineCounts) -> PipelineCounts {
        PipelineCounts {
            device_syncs: self.device_syncs.saturating_sub(base.device_syncs),
            id_reads: self.id_reads.saturating_sub(base.id_reads),
            launches: self.launches.saturating_sub(base.launches),
            graph_replays: self.graph_replays.saturating_sub(base.graph_replays),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_is_one_launch_and_deltas_subtract() {
        let c = PipelineCounters::default();
        c.add_launches(3);
        c.add_device_sync();
        let a = c.snapshot();
        c.add_graph_replay();
        c.add_id_read();
        let d = c.snapshot().since(&a);
        assert_eq!(
            d,
            PipelineCounts {
                device_syncs: 0,
                id_reads: 1,
                launches: 1,
                graph_replays: 1
            }
        );
        let mut s = a;
        s.add(&d);
        assert_eq!(s, c.snapshot());
    }
}
