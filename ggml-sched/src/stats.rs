//! Counters of one compute: splits, bytes copied, hook decisions.

/// Bytes moved between one pair of backends during a compute.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PairStats {
    /// Backend whose memory held the source.
    pub src: String,
    /// Backend that received the copy.
    pub dst: String,
    /// Bytes copied by the scheduler (full copies).
    pub sched_bytes: u64,
    /// Of `sched_bytes`, those copied device to device by a peer copy
    /// (`Backend::copy_from_peer`), not through host memory.
    pub peer_bytes: u64,
    /// Bytes written by the copy hook.
    pub hook_bytes: u64,
}

/// Counters of one split during a compute.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SplitStats {
    /// The split's backend.
    pub backend: String,
    /// Nodes computed.
    pub n_nodes: usize,
    /// Inputs copied for this split (reused copies not counted).
    pub n_copies: usize,
    /// Bytes copied by the scheduler.
    pub sched_bytes: u64,
    /// Bytes written by the copy hook.
    pub hook_bytes: u64,
}

/// What one [`crate::Scheduler::compute`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComputeStats {
    /// Number of splits run.
    pub n_splits: usize,
    /// Whether the plan of an earlier graph of the same structure was reused.
    pub plan_reused: bool,
    /// Bytes per (source backend, destination backend) pair.
    pub pairs: Vec<PairStats>,
    /// Per split.
    pub splits: Vec<SplitStats>,
    /// Host-weight inputs the copy hook handled.
    pub hook_handled: usize,
    /// Host-weight inputs the copy hook declined (copied in full).
    pub hook_declined: usize,
    /// Host-weight inputs the hook staged early through the look-ahead
    /// (see [`crate::Scheduler::set_lookahead`]).
    pub prefetched: usize,
    /// Bytes the hook copied early through the look-ahead (also counted
    /// in the pairs' `hook_bytes`).
    pub prefetch_bytes: u64,
    /// Wall-clock nanoseconds the host waited on backends during the
    /// compute (reads back, the final synchronization). With the backends'
    /// busy time (`BackendDiagnostics::busy_wall_ns`, which the caller
    /// reads: the scheduler keeps no diagnostics) it is the time the host
    /// spent in backend work rather than its own.
    pub wait_ns: u64,
}

impl ComputeStats {
    /// Total bytes copied by the scheduler.
    pub fn sched_bytes(&self) -> u64 {
        self.pairs.iter().map(|p| p.sched_bytes).sum()
    }

    /// Total bytes the scheduler copied device to device by peer copies
    /// (part of [`ComputeStats::sched_bytes`]).
    pub fn peer_bytes(&self) -> u64 {
        self.pairs.iter().map(|p| p.peer_bytes).sum()
    }

    /// Total bytes written by the copy hook.
    pub fn hook_bytes(&self) -> u64 {
        self.pairs.iter().map(|p| p.hook_bytes).sum()
    }

    /// The counters of one backend pair, if anything moved between them.
    pub fn pair(&self, src: &str, dst: &str) -> Option<&PairStats> {
        self.pairs.iter().find(|p| p.src == src && p.dst == dst)
    }

    /// Zero the counters for a run of `n_splits` splits, keeping the lists'
    /// memory (a re-run of the same plan allocates nothing here).
    pub(crate) fn reset(&mut self, n_splits: usize, plan_reused: bool) {
        self.n_splits = n_splits;
        self.plan_reused = plan_reused;
        self.pairs.clear();
        self.hook_handled = 0;
        self.hook_declined = 0;
        self.prefetched = 0;
        self.prefetch_bytes = 0;
        self.wait_ns = 0;
    }

    /// The counters of split `i`, zeroed and taken out of the list (put
    /// them back at `splits[i]`); the backend's name reuses the memory of
    /// the last run's.
    pub(crate) fn split_slot(&mut self, i: usize, backend: &str, n_nodes: usize) -> SplitStats {
        if i >= self.splits.len() {
            self.splits.resize_with(i + 1, SplitStats::default);
        }
        let mut ss = std::mem::take(&mut self.splits[i]);
        if ss.backend != backend {
            ss.backend.clear();
            ss.backend.push_str(backend);
        }
        ss.n_nodes = n_nodes;
        ss.n_copies = 0;
        ss.sched_bytes = 0;
        ss.hook_bytes = 0;
        ss
    }

    /// Count `bytes` (already in `sched_bytes`) as a peer copy.
    pub(crate) fn add_peer(&mut self, src: &str, dst: &str, bytes: u64) {
        if let Some(p) = self.pairs.iter_mut().find(|p| p.src == src && p.dst == dst) {
            p.peer_bytes += bytes;
        }
    }

    pub(crate) fn add(&mut self, src: &str, dst: &str, sched: u64, hook: u64) {
        let i = match self.pairs.iter().position(|p| p.src == src && p.dst == dst) {
            Some(i) => i,
            None => {
                self.pairs.push(PairStats {
                    src: src.to_string(),
                    dst: dst.to_string(),
                    ..PairStats::default()
                });
                self.pairs.len() - 1
            }
        };
        self.pairs[i].sched_bytes += sched;
        self.pairs[i].hook_bytes += hook;
    }
}
