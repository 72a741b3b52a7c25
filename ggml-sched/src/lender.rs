//! Compute memory lent to the scheduler: the [`ComputeLender`] trait and
//! the [`Loan`] it hands out.
//!
//! Without a lender the scheduler allocates one compute buffer per backend
//! and keeps it. With one, [`crate::Scheduler::alloc_graph`] first asks
//! the lender for each device's compute memory of the graph: a loan is a
//! range of a buffer someone else owns (memory its owner leaves idle while
//! this graph runs), and the graph's tensors and input copies are laid out
//! in it instead. The scheduler knows nothing
//! of what the memory holds otherwise: it sees a memory source.
//!
//! The protocol, per backend:
//! - at every `alloc_graph` the scheduler gives back the loans it holds
//!   ([`ComputeLender::give_back`]) before it plans, then asks again for
//!   the new graph ([`ComputeLender::lend`]); the lender decides from its
//!   own state whether the memory is free for this graph;
//! - a loan is used only by the graph it was made for (and
//!   [`crate::Scheduler::compute_again`] of that graph), until the next
//!   `alloc_graph`; the scheduler forgets that graph's lent tensors' memory
//!   when it gives the loan back;
//! - when the lender says no, the scheduler uses its own buffer, grown as
//!   before: the lender never has its memory taken behind its back, and
//!   the scheduler never holds both for one graph.

use std::sync::Arc;

use ggml_core::Buffer;

/// A range of a buffer lent for one graph's compute memory on a backend.
#[derive(Clone, Debug)]
pub struct Loan {
    /// The buffer (owned by the lender; the backend must be able to use it).
    pub buffer: Arc<dyn Buffer>,
    /// Where the lent range starts in it (a multiple of 256 bytes).
    pub offset: usize,
    /// Bytes lent (at least those asked for).
    pub size: usize,
}

/// A source of compute memory: see the module docs.
pub trait ComputeLender: Send {
    /// Lend `bytes` of memory for the compute memory of the graph being
    /// allocated on the scheduler's backend `backend` (its index in the
    /// scheduler's list), or `None` when the memory is not free for it
    /// (the scheduler then allocates its own).
    fn lend(&mut self, backend: usize, bytes: usize) -> Option<Loan>;
    /// The scheduler no longer uses the loan it held on `backend`.
    fn give_back(&mut self, backend: usize);
}
