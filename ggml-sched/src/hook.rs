//! The copy hook: the one extension point for copying split inputs.
//!
//! The scheduler offers every host-weight input of a split (a tensor in a
//! host `Weights` buffer that the split's backend cannot use) to the hook,
//! after all other inputs of that split are on the backend. The hook may copy
//! only the parts its consumers read, using [`HookCtx`]; the scheduler knows
//! nothing about what those parts mean.

use ggml_core::backend::{check_range, Backend, BackendError, Stream, WaitKind};
use ggml_core::{Graph, TensorData, TensorId};

use crate::error::HookError;
use crate::prefetch::PrefetchCtx;

/// User code that copies host weights to a split's backend.
pub trait CopyHook: Send {
    /// Called once per host-weight input of a split, after all other inputs
    /// of that split were copied (and again for an input staged partially
    /// by the look-ahead, see [`HookCtx::completes_staging`]). Return
    /// `Ok(true)` if handled (fully or partly, as the consumers need),
    /// `Ok(false)` for a full copy by the scheduler. An error aborts the
    /// compute and reaches its caller.
    fn copy_input(&mut self, cx: &mut HookCtx<'_>) -> Result<bool, HookError>;

    /// Called at the start of each graph compute (so the hook can reset
    /// per-graph caches).
    fn begin_graph(&mut self) {}

    /// The look-ahead's offer of a later split's host-weight input (see
    /// [`crate::prefetch`]): stage it into memory of the hook's own with
    /// [`PrefetchCtx::stage`] and copy what the consumers read with
    /// [`PrefetchCtx::copy_range`], then return `Ok(true)`; `Ok(false)`
    /// leaves it to [`CopyHook::copy_input`] when its split comes (the
    /// default). An error aborts the compute.
    fn prefetch_input(&mut self, cx: &mut PrefetchCtx<'_>) -> Result<bool, HookError> {
        let _ = cx;
        Ok(false)
    }
}

/// One input of a split: a tensor the split's backend cannot use, and the
/// copy of it in that backend's compute memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitInput {
    /// The tensor read by the split's nodes (as built).
    pub src: TensorId,
    /// Its copy on the split's backend (the nodes read this during compute).
    pub copy: TensorId,
    /// Whether `src` lives in a host weights buffer (offered to the hook).
    pub host_weight: bool,
    /// `true` if copied for this split, `false` if a copy made for an
    /// earlier split is reused (its source has not changed since).
    pub copied: bool,
    /// Backend whose memory holds `src`.
    pub src_backend: String,
}

/// What a [`CopyHook`] sees and may do for one host-weight input.
pub struct HookCtx<'a> {
    pub(crate) backend: &'a dyn Backend,
    pub(crate) stream: Stream,
    pub(crate) g: &'a Graph,
    pub(crate) split: usize,
    pub(crate) nodes: &'a [TensorId],
    pub(crate) inputs: &'a [SplitInput],
    pub(crate) src: TensorId,
    pub(crate) dst: TensorId,
    pub(crate) src_data: TensorData,
    pub(crate) dst_data: TensorData,
    pub(crate) staging: &'a mut Vec<Vec<u8>>,
    pub(crate) completes: bool,
    pub(crate) bytes: u64,
}

impl<'a> HookCtx<'a> {
    /// Whether this offer completes an input the hook staged partially
    /// during the look-ahead ([`PrefetchCtx::stage_partial`]): the
    /// destination is that staged memory, holding what the hook copied
    /// then; only what is still missing needs copying.
    pub fn completes_staging(&self) -> bool {
        self.completes
    }

    /// The split's backend.
    pub fn backend(&self) -> &'a dyn Backend {
        self.backend
    }

    /// The split's backend name (`"SIM0"`, `"CUDA0"`).
    pub fn backend_name(&self) -> &'a str {
        self.backend.name()
    }

    /// Index of the split in the plan.
    pub fn split_index(&self) -> usize {
        self.split
    }

    /// The graph, with the split's nodes reading the copies of its inputs.
    pub fn graph(&self) -> &'a Graph {
        self.g
    }

    /// The split's nodes, in compute order.
    pub fn nodes(&self) -> &'a [TensorId] {
        self.nodes
    }

    /// Every input of the split (copies of host weights included).
    pub fn inputs(&self) -> &'a [SplitInput] {
        self.inputs
    }

    /// The host weight being copied.
    pub fn src(&self) -> TensorId {
        self.src
    }

    /// Its destination copy on the split's backend (same type, shape and
    /// strides as the source).
    pub fn dst(&self) -> TensorId {
        self.dst
    }

    /// Bytes spanned by the source and the destination (`nbytes`).
    pub fn nbytes(&self) -> usize {
        self.g.tensor(self.dst).nbytes()
    }

    /// The split's nodes that read the destination copy.
    pub fn consumers(&self) -> Vec<TensorId> {
        self.nodes
            .iter()
            .copied()
            .filter(|&n| self.g.tensor(n).src.contains(&self.dst))
            .collect()
    }

    /// Bytes the backend's kernels may read past a weight (see
    /// [`ggml_core::BackendDevice::read_overhang`]).
    pub fn read_overhang(&self) -> usize {
        self.backend.read_overhang()
    }

    /// The stream the hook's writes go on (the backend's copy stream, which
    /// the split's compute waits for).
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// Read `id` into host memory: in the split's backend's memory on its
    /// readback stream after the compute queued so far (and after the
    /// split's input copies when `after_copies`), the host waiting for that
    /// read only ([`ggml_core::BackendStream::read_after_compute`]);
    /// elsewhere a plain read.
    fn read_after(&self, id: TensorId, after_copies: bool) -> Result<Vec<u8>, HookError> {
        let len = self.g.tensor(id).nbytes();
        let d = self
            .g
            .data_of(id)
            .ok_or_else(|| BackendError::NotAllocated(self.g.tensor(id).name.clone()))?;
        let be = self.backend;
        let rs = be.readback_stream();
        if after_copies && self.stream != rs {
            let ev = be.record_event_on(self.stream)?;
            be.wait_event_for(rs, &ev, WaitKind::Readback)?;
        }
        let mut out = vec![0u8; len];
        be.read_after_compute(&d, 0, &mut out)?;
        Ok(out)
    }

    /// Read any allocated tensor into host memory, after the work that
    /// produces it: the compute queued so far and the split's input copies
    /// (without a device-wide synchronize).
    pub fn read_tensor(&self, id: TensorId) -> Result<Vec<u8>, HookError> {
        self.read_after(id, true)
    }

    /// Read a router's ids (a consumer's ids, on the split's backend): after
    /// the compute queued so far (and the split's copies when the ids are
    /// one of its input copies), not after unrelated uploads. (A caller
    /// that counts id reads, in the backend's pipeline counters, counts
    /// this one: the scheduler keeps no diagnostics.)
    pub fn read_ids(&self, id: TensorId) -> Result<Vec<u8>, HookError> {
        let copied = self.inputs.iter().any(|i| i.copy == id);
        self.read_after(id, copied)
    }

    /// The source's bytes, when they are host-addressable.
    pub fn src_bytes(&self) -> Option<&[u8]> {
        let len = self.nbytes();
        let buf = &self.src_data.buffer;
        let p = buf.base_ptr()?;
        check_range(buf.name(), buf.size(), self.src_data.offset, len).ok()?;
        // SAFETY: the range lies inside the buffer (checked above), which
        // `src_data` keeps alive; host weights are never written by compute.
        Some(unsafe { std::slice::from_raw_parts(p.add(self.src_data.offset), len) })
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), BackendError> {
        check_range(&self.g.tensor(self.dst).name, self.nbytes(), offset, len)
    }

    /// Copy bytes `[offset, offset + len)` of the source to the same offset
    /// of the destination (asynchronously where the backend can).
    pub fn copy_range(&mut self, offset: usize, len: usize) -> Result<(), HookError> {
        self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        match self.src_bytes() {
            Some(s) => {
                let s: &[u8] = &s[offset..offset + len];
                // SAFETY of the borrow: the bytes live in the source buffer,
                // kept alive by the scheduler until the split synchronizes.
                self.backend
                    .write_on(self.stream, &self.dst_data, offset, s)?;
            }
            None => {
                let mut tmp = vec![0u8; len];
                self.src_data
                    .buffer
                    .read(self.src_data.offset + offset, &mut tmp)?;
                self.backend
                    .write_on(self.stream, &self.dst_data, offset, &tmp)?;
                self.staging.push(tmp);
            }
        }
        self.bytes += len as u64;
        Ok(())
    }

    /// Write `bytes` into the destination at `offset` (bounds-checked; the
    /// bytes are staged until the split's backend synchronizes).
    pub fn write_async(&mut self, offset: usize, bytes: &[u8]) -> Result<(), HookError> {
        self.check(offset, bytes.len())?;
        let tmp = bytes.to_vec();
        self.backend
            .write_on(self.stream, &self.dst_data, offset, &tmp)?;
        self.staging.push(tmp);
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    /// Bytes the hook has written so far for this input.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }
}
