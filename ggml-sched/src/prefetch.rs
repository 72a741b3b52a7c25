//! The scheduler's look-ahead: early copies of later splits' host weights.
//!
//! With a look-ahead of `L` splits ([`crate::Scheduler::set_lookahead`]),
//! before queuing split `i` the scheduler offers every host-weight input of
//! splits `i + 1 ..= i + L` that is not staged yet to the copy hook's
//! [`crate::CopyHook::prefetch_input`]. The hook may *stage* it: claim
//! memory of its own on the consuming split's backend
//! ([`PrefetchCtx::stage`]) and copy what the consumers read into it
//! ([`PrefetchCtx::copy_range`]), on the backend's copy stream. Then:
//!
//! - the scheduler records an event after those copies; the consuming split
//!   waits for it before computing (so nothing reads the staged bytes
//!   before they arrived);
//! - the consuming split (and any later one reusing the same input copy)
//!   reads the staged memory instead of its input copy, and the hook is not
//!   offered that input again in this graph;
//! - memory the hook stages into stays *busy* until the last split reading
//!   it has been queued; a later [`PrefetchCtx::stage`] of overlapping
//!   memory makes the copy stream wait for that split's event first (so no
//!   copy overwrites bytes a split still reads), or returns `false` while
//!   that split is not queued yet (the hook tries other memory or
//!   declines; a declined input is offered again before each later split
//!   is queued, up to its own split, just before that split's copies).
//!
//! - *partial staging* ([`PrefetchCtx::stage_partial`]): the hook may copy
//!   only part of the source now (what it expects the consumers to read).
//!   The input then counts as staged, possibly incomplete: when the
//!   consuming split is queued, the scheduler offers it to
//!   [`crate::CopyHook::copy_input`] again with the staged memory as the
//!   destination ([`crate::HookCtx::completes_staging`]); the hook copies
//!   what is still missing on the copy stream (the split's compute waits
//!   for those copies as for any input copy), or declines and the whole
//!   source is copied into the staged memory. The slot's reuse rules are
//!   those of whole staging.
//!
//! A hook may read a tensor an earlier, already queued split computed
//! ([`PrefetchCtx::read_computed`]: after that split's event, on the
//! readback stream), e.g. to decide what to stage.
//!
//! The look-ahead stops before the next split that has inputs other than
//! host weights to copy: those copies would otherwise queue behind early
//! copies on the link (copies take it in issue order).
//!
//! The scheduler knows nothing of what the inputs mean; everything a hook
//! stages is released when the graph's compute ends (the host synchronizes).

use ggml_core::backend::{check_range, Backend, Event, Stream, WaitKind};
use ggml_core::{Graph, TensorData, TensorId};

use crate::error::HookError;
use crate::hook::SplitInput;

/// Memory a staged input occupies, and the last split that reads it.
#[derive(Clone, Debug)]
pub(crate) struct Busy {
    /// Address of the buffer (as a key) and the byte range in it.
    pub buf: usize,
    pub start: usize,
    pub end: usize,
    /// The last split reading the staged bytes.
    pub last_reader: usize,
}

impl Busy {
    fn overlaps(&self, buf: usize, start: usize, end: usize) -> bool {
        self.buf == buf && self.start < end && start < self.end
    }
}

pub(crate) fn buffer_key(d: &TensorData) -> usize {
    std::sync::Arc::as_ptr(&d.buffer) as *const u8 as usize
}

/// What a [`crate::CopyHook`] sees and may do for one look-ahead offer: a
/// host-weight input of a later split, to be copied early into memory the
/// hook provides.
pub struct PrefetchCtx<'a> {
    pub(crate) backend: &'a dyn Backend,
    pub(crate) stream: Stream,
    pub(crate) g: &'a Graph,
    pub(crate) current: usize,
    pub(crate) split: usize,
    pub(crate) nodes: &'a [TensorId],
    pub(crate) inputs: &'a [SplitInput],
    pub(crate) src: TensorId,
    pub(crate) dst: TensorId,
    pub(crate) src_data: TensorData,
    pub(crate) busy: &'a mut Vec<Busy>,
    pub(crate) done: &'a [Option<Event>],
    pub(crate) staging: &'a mut Vec<Vec<u8>>,
    pub(crate) target: Option<TensorData>,
    pub(crate) partial: bool,
    pub(crate) writer: &'a [Option<usize>],
    pub(crate) bytes: u64,
}

impl<'a> PrefetchCtx<'a> {
    /// The consuming split's backend.
    pub fn backend(&self) -> &'a dyn Backend {
        self.backend
    }

    /// The stream the early copies go on (the backend's copy stream).
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// The graph (its nodes read the split input copies).
    pub fn graph(&self) -> &'a Graph {
        self.g
    }

    /// Index of the split about to be queued (the offer is made before it).
    pub fn current_split(&self) -> usize {
        self.current
    }

    /// Index of the split that reads the input.
    pub fn split_index(&self) -> usize {
        self.split
    }

    /// The consuming split's nodes, in compute order.
    pub fn nodes(&self) -> &'a [TensorId] {
        self.nodes
    }

    /// Every input of the consuming split.
    pub fn inputs(&self) -> &'a [SplitInput] {
        self.inputs
    }

    /// The host weight offered.
    pub fn src(&self) -> TensorId {
        self.src
    }

    /// The input copy the consuming split's nodes read (same type, shape
    /// and strides as the source).
    pub fn dst(&self) -> TensorId {
        self.dst
    }

    /// Bytes spanned by the source (`nbytes`).
    pub fn nbytes(&self) -> usize {
        self.g.tensor(self.src).nbytes()
    }

    /// The consuming split's nodes that read the input.
    pub fn consumers(&self) -> Vec<TensorId> {
        self.nodes
            .iter()
            .copied()
            .filter(|&n| self.g.tensor(n).src.contains(&self.dst))
            .collect()
    }

    /// Bytes the backend's kernels may read past a weight.
    pub fn read_overhang(&self) -> usize {
        self.backend.read_overhang()
    }

    /// Whether `mem` could be staged into now: no split that reads bytes
    /// staged there earlier in this graph is still to be queued.
    pub fn is_free(&self, mem: &TensorData, len: usize) -> bool {
        let (b, s) = (buffer_key(mem), mem.offset);
        self.busy
            .iter()
            .filter(|x| x.overlaps(b, s, s + len))
            .all(|x| x.last_reader < self.current)
    }

    /// Claim `mem` (on the consuming split's backend, at least
    /// [`PrefetchCtx::nbytes`] long) as the memory the consuming split
    /// reads instead of its input copy. Returns `Ok(false)` when a split
    /// reading bytes staged there earlier is not queued yet (see
    /// [`PrefetchCtx::is_free`]); otherwise the copy stream first waits for
    /// the last such split, and later [`PrefetchCtx::copy_range`] calls
    /// write into `mem`. Errors when `mem` is too small or not usable by the
    /// backend, or when memory was already claimed for this offer.
    pub fn stage(&mut self, mem: TensorData) -> Result<bool, HookError> {
        self.claim(mem, false)
    }

    /// Like [`PrefetchCtx::stage`], but the staged memory may stay
    /// incomplete: the hook copies only part of the source into it now,
    /// and when the consuming split is queued the scheduler offers the
    /// input to [`crate::CopyHook::copy_input`] again, with the staged
    /// memory as the destination ([`crate::HookCtx::completes_staging`]),
    /// so the hook can copy what is still missing (on the copy stream,
    /// before the split computes). A declined completion is a whole copy
    /// into the staged memory.
    pub fn stage_partial(&mut self, mem: TensorData) -> Result<bool, HookError> {
        self.claim(mem, true)
    }

    fn claim(&mut self, mem: TensorData, partial: bool) -> Result<bool, HookError> {
        if self.target.is_some() {
            return Err(HookError::msg(
                "prefetch: memory was already staged for this input",
            ));
        }
        let len = self.nbytes();
        if !self.backend.can_use_buffer(mem.buffer.as_ref()) {
            return Err(HookError::msg(format!(
                "prefetch: {} cannot compute with buffer '{}'",
                self.backend.name(),
                mem.buffer.name()
            )));
        }
        check_range(mem.buffer.name(), mem.buffer.size(), mem.offset, len)?;
        if !self.is_free(&mem, len) {
            return Ok(false);
        }
        let (b, s) = (buffer_key(&mem), mem.offset);
        let last = self
            .busy
            .iter()
            .filter(|x| x.overlaps(b, s, s + len))
            .map(|x| x.last_reader)
            .max();
        if let Some(ev) = last.and_then(|k| self.done.get(k)).and_then(|e| e.as_ref()) {
            self.backend
                .wait_event_for(self.stream, ev, WaitKind::Staging)?;
        }
        self.busy.retain(|x| !x.overlaps(b, s, s + len));
        self.target = Some(mem);
        self.partial = partial;
        Ok(true)
    }

    /// Whether the memory staged for this offer was claimed with
    /// [`PrefetchCtx::stage_partial`].
    pub fn is_partial(&self) -> bool {
        self.target.is_some() && self.partial
    }

    /// Read `id`, a tensor computed on this offer's backend by a split
    /// already queued, into host memory: on the backend's readback stream
    /// after that split's event (not after later compute or the uploads),
    /// the host waiting for that read only. `Ok(None)` when no split queued
    /// so far wrote it (it is not computed yet in this graph), or when its
    /// memory is not this backend's. (A caller that counts id reads counts
    /// this one.)
    pub fn read_computed(&self, id: TensorId) -> Result<Option<Vec<u8>>, HookError> {
        let Some(ev) = crate::exec::writer_event(self.g, self.writer, self.done, id) else {
            return Ok(None);
        };
        let Some(d) = self.g.data_of(id) else {
            return Ok(None);
        };
        let be = self.backend;
        if d.buffer.is_host() || !be.can_use_buffer(d.buffer.as_ref()) {
            return Ok(None);
        }
        let rs = be.readback_stream();
        be.wait_event_for(rs, ev, WaitKind::Readback)?;
        let mut out = vec![0u8; self.g.tensor(id).nbytes()];
        be.read_on(rs, &d, 0, &mut out)?;
        let done = be.record_event_on(rs)?;
        be.event_synchronize(&done)?;
        Ok(Some(out))
    }

    /// The memory staged for this offer, if any.
    pub fn staged(&self) -> Option<&TensorData> {
        self.target.as_ref()
    }

    /// Copy bytes `[offset, offset + len)` of the source to the same offset
    /// of the staged memory, on the copy stream. Errors before
    /// [`PrefetchCtx::stage`] or out of the source's range.
    pub fn copy_range(&mut self, offset: usize, len: usize) -> Result<(), HookError> {
        let Some(dst) = self.target.clone() else {
            return Err(HookError::msg(
                "prefetch: copy before any memory was staged",
            ));
        };
        let name = self.g.tensor(self.src).name.clone();
        check_range(&name, self.nbytes(), offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let sd = &self.src_data;
        match sd.buffer.base_ptr() {
            Some(p) => {
                check_range(sd.buffer.name(), sd.buffer.size(), sd.offset + offset, len)?;
                // SAFETY: the range lies inside the source buffer (checked
                // above), which the scheduler keeps alive until the graph's
                // final synchronize; host weights are never written.
                let s = unsafe { std::slice::from_raw_parts(p.add(sd.offset + offset), len) };
                self.backend.write_on(self.stream, &dst, offset, s)?;
            }
            None => {
                let mut tmp = vec![0u8; len];
                sd.buffer.read(sd.offset + offset, &mut tmp)?;
                self.backend.write_on(self.stream, &dst, offset, &tmp)?;
                self.staging.push(tmp);
            }
        }
        self.bytes += len as u64;
        Ok(())
    }

    /// Bytes copied so far for this offer.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }
}
