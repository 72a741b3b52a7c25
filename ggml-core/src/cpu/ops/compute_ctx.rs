//! What a kernel computes with: the worker pool, the graph, and which
//! buffers the running backend may touch ([`ComputeCtx`]), and the checked
//! raw views of a node and its sources that every kernel reads and writes.
//!
//! Data flows: a backend builds one `ComputeCtx` per `compute` call; the
//! dispatch (`ops::compute_node`) hands it to the node's kernel, which takes
//! its views from it.

use smallvec::SmallVec;

use crate::buffer::{check_range, Buffer};
use crate::cpu::pool::ThreadPool;
use crate::cpu::view::TView;
use crate::error::BackendError;
use crate::graph::Graph;
use crate::tensor::TensorId;

/// The views of a node's sources, in source order.
pub type SrcViews = SmallVec<[TView; 6]>;

/// What a kernel needs: the pool, the graph, and which buffers the running
/// backend may touch.
pub struct ComputeCtx<'a> {
    /// Worker threads.
    pub pool: &'a ThreadPool,
    /// The graph holding the node and its sources.
    pub g: &'a Graph,
    /// The running backend's name, for errors.
    pub backend: &'a str,
    /// Whether the running backend may use a buffer's memory directly.
    pub accept: &'a (dyn Fn(&dyn Buffer) -> bool + Sync),
}

impl ComputeCtx<'_> {
    /// Resolve a tensor to a checked raw view. `write` requires a writable
    /// buffer.
    pub fn view(&self, id: TensorId, write: bool) -> Result<TView, BackendError> {
        let t = self.g.tensor(id);
        let (buffer, offset) = self
            .g
            .data_ref(id)
            .ok_or_else(|| BackendError::NotAllocated(t.name.clone()))?;
        if !(self.accept)(buffer.as_ref()) {
            return Err(BackendError::Unsupported(format!(
                "backend {} cannot access tensor '{}' in buffer {}",
                self.backend,
                t.name,
                buffer.name()
            )));
        }
        if write && !buffer.is_writable() {
            return Err(BackendError::ReadOnly(format!(
                "{} (tensor '{}')",
                buffer.name(),
                t.name
            )));
        }
        let base = buffer.base_ptr().ok_or_else(|| {
            BackendError::Unsupported(format!("buffer {} is not addressable", buffer.name()))
        })?;
        check_range(buffer.name(), buffer.size(), offset, t.nbytes())?;
        let mut ne = [0usize; 4];
        for (o, &n) in ne.iter_mut().zip(t.ne.iter()) {
            *o = n.max(0) as usize;
        }
        Ok(TView {
            // SAFETY: offset + nbytes was checked to lie inside the buffer.
            ptr: unsafe { base.add(offset) },
            ty: t.ty,
            ne,
            nb: t.nb,
        })
    }

    /// Views of the node (writable) and of its sources (inline: no
    /// allocation per op for up to six sources).
    pub fn views(&self, node: TensorId) -> Result<(TView, SrcViews), BackendError> {
        let dst = self.view(node, true)?;
        let mut src = SrcViews::new();
        for &s in &self.g.tensor(node).src {
            src.push(self.view(s, false)?);
        }
        Ok((dst, src))
    }
}
