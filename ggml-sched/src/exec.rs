//! Running a plan: split inputs copied on copy streams, splits queued on
//! their backends' compute streams, ordered by events instead of
//! synchronizing after every split.
//!
//! For split `i` on backend `B`:
//! 1. If `B` has a copy stream, that stream first waits for the last split
//!    on `B` before `i - 1` (the planner keeps a copy's memory apart from
//!    everything live in split `i - 1`, so only older readers can still be
//!    using the bytes the copies overwrite; this lets split `i`'s copies
//!    overlap split `i - 1`'s compute).
//! 2. Inputs that are not host weights are copied on it. Between two
//!    devices that can, device to device ([`BackendStream::copy_from_peer`]): the
//!    copy stream waits for the event of the split on the other device that
//!    produced the input (an event of another device), and that device's
//!    compute stream and its upload stream wait for the copies before
//!    either may overwrite the source. Otherwise through host memory: host
//!    sources are staged (as CUDA does with pageable memory, so the CPU may
//!    reuse the source right away); device sources are read on their
//!    backend's readback stream (its second copy stream, where it has one)
//!    after the
//!    event of the split that produced them (memory no split wrote, such as
//!    a cache bank the hook uploads into: after the uploads queued so far),
//!    so they do not wait for unrelated uploads; the host waits only for
//!    that read.
//! 3. Host weights are offered to the copy hook, whose writes go on the
//!    same stream; declined ones are copied whole. Inputs the look-ahead
//!    staged are not copied, except those staged partially, which are
//!    offered again with the staged memory as destination.
//! 4. `B`'s compute stream waits for the copies' event, computes the split,
//!    and records the split's event.
//!
//! A CPU split that reads nothing from a device never waits for it, and one
//! that does computes the nodes before the first reader of a device's output
//! before waiting. The
//! host synchronizes every backend once, at the end of the graph (the
//! caller reads outputs then), and on any error before staging memory is
//! dropped.
//!
//! Of a backend, this asks only its device and stream parts. The waits a
//! test double may single out say their kind ([`WaitKind`]); the caller's
//! [`ExecObserver`] hears which tensor the copies queued next are of.

use std::sync::Arc;
use std::time::Instant;

use ggml_core::backend::{
    check_range, Backend, BackendError, BackendStream, Buffer, Event, Stream, WaitKind,
};
use ggml_core::{Graph, TensorData, TensorId};

use crate::hook::{CopyHook, HookCtx, SplitInput};
use crate::observe::ExecObserver;
use crate::plan::{self, node_name, Plan};
use crate::prefetch::{buffer_key, Busy, PrefetchCtx};
use crate::stats::{ComputeStats, SplitStats};
use crate::{Applied, SchedError};

/// The event of the split that last wrote `id`'s memory (its view root's),
/// from the run's writer of each tensor and event of each queued split;
/// `None` when no split queued so far wrote it.
pub(crate) fn writer_event<'a>(
    g: &Graph,
    writer: &[Option<usize>],
    done: &'a [Option<Event>],
    id: TensorId,
) -> Option<&'a Event> {
    let root = g.view_root(id).index();
    writer
        .get(root)
        .copied()
        .flatten()
        .and_then(|j| done.get(j))
        .and_then(|e| e.as_ref())
}

/// The stream a backend copies its inputs on.
fn upload_stream(be: &dyn BackendStream) -> Stream {
    be.upload_stream()
}

/// The stream a backend's memory is read back on (a second copy engine
/// where there is one).
fn download_stream(be: &dyn BackendStream) -> Stream {
    be.readback_stream()
}

/// State of one graph run that outlives each split. The scheduler keeps it
/// between runs ([`crate::Scheduler`]) so that a re-run of the same plan
/// reuses its lists instead of allocating them again.
#[derive(Default)]
pub(crate) struct State {
    /// Per split, once queued: the event of its compute.
    done: Vec<Option<Event>>,
    /// Per tensor (view root): the last split that wrote it.
    writer: Vec<Option<usize>>,
    /// Bytes queued copies read from, alive until the final synchronize.
    staging: Vec<Vec<u8>>,
    /// Buffers queued copies read from, alive until the final synchronize.
    keep: Vec<Arc<dyn Buffer>>,
    /// Splits of look-ahead (0: none).
    lookahead: usize,
    /// Per split and input: memory the hook staged the input into, the
    /// event of the early copies, and whether the staging may be incomplete
    /// (offered to the hook again when the split comes).
    staged: Vec<Vec<Option<(TensorData, Event, bool)>>>,
    /// Staged memory not yet read by every split that reads it.
    busy: Vec<Busy>,
    /// Input copies pointed at staged memory, restored at the end.
    rebound: Vec<(TensorId, Option<TensorData>)>,
    /// Nanoseconds the host waited on backends (synchronizations).
    device_ns: u64,
}

impl State {
    /// Empty every list for a run of `plan` over a graph of `n_tensors`
    /// tensors, keeping their memory.
    fn reset(&mut self, plan: &Plan, n_tensors: usize, lookahead: usize) {
        let n = plan.splits.len();
        self.done.clear();
        self.done.resize(n, None);
        self.writer.clear();
        self.writer.resize(n_tensors, None);
        self.staging.clear();
        self.keep.clear();
        self.lookahead = lookahead;
        self.staged.truncate(n);
        for (v, sp) in self.staged.iter_mut().zip(&plan.splits) {
            v.clear();
            v.resize(sp.inputs.len(), None);
        }
        for sp in &plan.splits[self.staged.len()..] {
            self.staged.push(vec![None; sp.inputs.len()]);
        }
        self.busy.clear();
        self.rebound.clear();
        self.device_ns = 0;
    }
}

/// Run `f`, adding the nanoseconds it took to `acc` (time the host waits
/// rather than works).
fn timed<T>(acc: &mut u64, f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let r = f();
    *acc += t0.elapsed().as_nanos() as u64;
    r
}

/// One graph run: the graph (read-only while splits are queued) and the
/// run's state.
struct Exec<'a> {
    g: &'a Graph,
    backends: &'a [Arc<dyn Backend>],
    applied: &'a Applied,
    observer: Option<&'a dyn ExecObserver>,
    st: &'a mut State,
}

impl Exec<'_> {
    /// Tell the observer what the copies queued next on `be` are of.
    fn label(&self, be: &dyn Backend, label: impl FnOnce() -> String) {
        if let Some(o) = self.observer {
            o.before_copies(be, &label());
        }
    }

    /// [`Exec::label`] with a tensor's name.
    fn label_tensor(&self, be: &dyn Backend, id: TensorId) {
        if let Some(o) = self.observer {
            o.before_copies(be, &self.g.tensor(id).name);
        }
    }

    fn data(&self, id: TensorId) -> Result<TensorData, SchedError> {
        self.g.data_of(id).ok_or_else(|| {
            SchedError::Graph(format!("tensor '{}' has no memory", node_name(self.g, id)))
        })
    }

    /// The event of the last split on backend `b` with index `< before`.
    fn last_done_on(&self, plan: &Plan, b: usize, before: usize) -> Option<&Event> {
        (0..before)
            .rev()
            .find(|&j| plan.splits[j].backend == b)
            .and_then(|j| self.st.done[j].as_ref())
    }

    /// A copy source's length and memory (`None` when it is empty).
    fn source(&self, src: TensorId) -> Result<Option<(usize, TensorData)>, BackendError> {
        let len = self.g.tensor(src).nbytes();
        if len == 0 {
            return Ok(None);
        }
        let sd = self
            .g
            .data_of(src)
            .ok_or_else(|| BackendError::NotAllocated(self.g.tensor(src).name.clone()))?;
        Ok(Some((len, sd)))
    }

    /// The event of the split that last wrote `src`'s memory in this
    /// graph, if one did.
    fn writer_event(&self, src: TensorId) -> Option<&Event> {
        writer_event(self.g, &self.st.writer, &self.st.done, src)
    }

    /// Copy a non-host-weight input `src` (on `src_be`) into `dst` on `be`:
    /// device to device where both can ([`BackendStream::copy_from_peer`]),
    /// through host memory otherwise. Returns the bytes and whether they
    /// went device to device.
    fn copy_input(
        &mut self,
        src_be: &dyn Backend,
        src: TensorId,
        be: &dyn Backend,
        dst: &TensorData,
        stream: Stream,
    ) -> Result<(u64, bool), BackendError> {
        let Some((len, sd)) = self.source(src)? else {
            return Ok((0, false));
        };
        if !sd.buffer.is_host() && !be.is_host() && !src_be.is_host() {
            // the destination's copy stream waits for the split that wrote
            // the source (an event of the other device), or, for memory no
            // split of this graph wrote (a cache bank the copy hook uploads
            // into), for the source's uploads queued so far
            let after = match self.writer_event(src) {
                Some(ev) => ev.clone(),
                None => src_be.record_event_on(upload_stream(src_be))?,
            };
            self.label_tensor(be, src);
            if be.copy_from_peer(src_be, &sd, dst, len, stream, Some(&after))? {
                return Ok((len as u64, true));
            }
        }
        let mut tmp = vec![0u8; len];
        if sd.buffer.is_host() {
            sd.buffer.read(sd.offset, &mut tmp)?;
        } else {
            // read back after the split that wrote it; the host waits for
            // this read only
            let rs = download_stream(src_be);
            match self.writer_event(src) {
                Some(ev) => src_be.wait_event_for(rs, ev, WaitKind::Readback)?,
                None => {
                    // memory no split of this graph wrote (a cache bank the
                    // copy hook uploads into): after the uploads queued so
                    // far
                    let us = upload_stream(src_be);
                    if us != rs {
                        let ev = src_be.record_event_on(us)?;
                        src_be.wait_event_for(rs, &ev, WaitKind::Readback)?;
                    }
                }
            }
            self.label_tensor(src_be, src);
            src_be.read_on(rs, &sd, 0, &mut tmp)?;
            let ev = src_be.record_event_on(rs)?;
            timed(&mut self.st.device_ns, || src_be.event_synchronize(&ev))?;
        }
        if be.is_host() {
            dst.buffer.write(dst.offset, &tmp)?;
        } else {
            self.label_tensor(be, src);
            be.write_on(stream, dst, 0, &tmp)?;
            self.st.staging.push(tmp);
        }
        Ok((len as u64, false))
    }

    /// Copy a host weight whole (the hook declined it).
    fn copy_weight(
        &mut self,
        src: TensorId,
        be: &dyn Backend,
        dst: &TensorData,
        stream: Stream,
    ) -> Result<u64, BackendError> {
        let Some((len, sd)) = self.source(src)? else {
            return Ok(0);
        };
        self.label_tensor(be, src);
        if let Some(p) = sd.buffer.base_ptr() {
            check_range(sd.buffer.name(), sd.buffer.size(), sd.offset, len)?;
            // SAFETY: the range was checked; `keep` holds the buffer until
            // the final synchronize, and host weights are never written.
            let s = unsafe { std::slice::from_raw_parts(p.add(sd.offset), len) };
            be.write_on(stream, dst, 0, s)?;
            self.st.keep.push(Arc::clone(&sd.buffer));
        } else {
            let mut tmp = vec![0u8; len];
            sd.buffer.read(sd.offset, &mut tmp)?;
            be.write_on(stream, dst, 0, &tmp)?;
            self.st.staging.push(tmp);
        }
        Ok(len as u64)
    }

    #[allow(clippy::too_many_arguments)]
    fn run_split(
        &mut self,
        plan: &Plan,
        si: usize,
        sp: &plan::SplitPlan,
        info: &crate::SplitInfo,
        hook: Option<&mut (dyn CopyHook + '_)>,
        stats: &mut ComputeStats,
        ss: &mut SplitStats,
    ) -> Result<(), SchedError> {
        let backends = self.backends;
        let be = backends[sp.backend].as_ref();
        let stream = upload_stream(be);
        let g = self.g;
        let copy_err = |inp: &SplitInput, source| SchedError::Copy {
            tensor: node_name(g, inp.src),
            src: inp.src_backend.clone(),
            dst: be.name().to_string(),
            split: si,
            source,
        };
        let compute_err = |source| SchedError::Compute {
            backend: be.name().to_string(),
            split: si,
            source,
        };
        // inputs staged by the look-ahead are not copied again (those
        // staged partially are offered to the hook again, to complete)
        let staged: Vec<Option<(Event, bool)>> = (0..sp.inputs.len())
            .map(|k| {
                self.st
                    .staged
                    .get(si)
                    .and_then(|v| v.get(k))
                    .and_then(|x| x.as_ref())
                    .map(|(_, ev, partial)| (ev.clone(), *partial))
            })
            .collect();
        // copies into the split's own input memory
        let any_copy = sp
            .inputs
            .iter()
            .zip(&staged)
            .any(|(p, st)| p.copied && st.is_none());
        // completions of partial stagings (into memory the staging claimed:
        // its reuse is ordered by the staging's own wait)
        let any_complete = sp
            .inputs
            .iter()
            .zip(&staged)
            .any(|(p, st)| p.copied && p.host_weight && st.as_ref().is_some_and(|s| s.1));
        if any_copy && !be.is_host() && stream != Stream::Compute {
            if let Some(ev) = si
                .checked_sub(1)
                .and_then(|prev| self.last_done_on(plan, sp.backend, prev))
            {
                be.wait_event_on(stream, ev).map_err(compute_err)?;
            }
        }

        // A CPU split computes the nodes before the first one that reads an
        // input copy without waiting for the devices that input comes from.
        let mut nodes: &[TensorId] = &sp.nodes;
        if be.is_host() && any_copy {
            let copies: Vec<TensorId> = info
                .inputs
                .iter()
                .zip(&sp.inputs)
                .filter(|(_, p)| p.copied)
                .map(|(i, _)| i.copy)
                .collect();
            let k = nodes
                .iter()
                .position(|&n| {
                    g.tensor(n)
                        .src
                        .iter()
                        .any(|&s| copies.contains(&g.view_root(s)))
                })
                .unwrap_or(nodes.len());
            if k > 0 {
                be.compute(g, &nodes[..k]).map_err(compute_err)?;
                nodes = &nodes[k..];
            }
        }

        // 1. every input that is not a host weight
        let mut peer_srcs: Vec<usize> = Vec::new();
        for (inp, pi) in info.inputs.iter().zip(&sp.inputs) {
            if !pi.copied || pi.host_weight {
                continue;
            }
            let dst = self.data(inp.copy)?;
            let src_be = backends[pi.src_backend].as_ref();
            let (n, peer) = self
                .copy_input(src_be, inp.src, be, &dst, stream)
                .map_err(|e| copy_err(inp, e))?;
            stats.add(&inp.src_backend, be.name(), n, 0);
            if peer {
                stats.add_peer(&inp.src_backend, be.name(), n);
                if !peer_srcs.contains(&pi.src_backend) {
                    peer_srcs.push(pi.src_backend);
                }
            }
            ss.sched_bytes += n;
            ss.n_copies += 1;
        }
        // a device whose memory a peer copy reads does not overwrite it
        // before the copy is done: its later compute, and the input copies
        // of its later splits (its upload stream, which waits only for its
        // own splits), wait for the copies
        if !peer_srcs.is_empty() {
            let ev = be.record_event_on(stream).map_err(compute_err)?;
            for &b in &peer_srcs {
                let src_be = backends[b].as_ref();
                src_be
                    .wait_event_for(Stream::Compute, &ev, WaitKind::PeerSource)
                    .map_err(compute_err)?;
                let up = upload_stream(src_be);
                if up != Stream::Compute {
                    src_be
                        .wait_event_for(up, &ev, WaitKind::PeerSource)
                        .map_err(compute_err)?;
                }
            }
        }
        // 2. host weights, offered to the hook first
        let mut hook = hook;
        for ((inp, pi), st) in info.inputs.iter().zip(&sp.inputs).zip(&staged) {
            let completes = st.as_ref().is_some_and(|s| s.1);
            if !pi.copied || !pi.host_weight || (st.is_some() && !completes) {
                continue;
            }
            ss.n_copies += 1;
            let mut handled = false;
            let dst_data = self.data(inp.copy)?;
            if let Some(h) = hook.as_deref_mut() {
                self.label_tensor(be, inp.src);
                let mut cx = HookCtx {
                    backend: be,
                    stream,
                    g,
                    split: si,
                    nodes: &info.nodes,
                    inputs: &info.inputs,
                    src: inp.src,
                    dst: inp.copy,
                    src_data: self.data(inp.src)?,
                    dst_data: dst_data.clone(),
                    staging: &mut self.st.staging,
                    completes,
                    bytes: 0,
                };
                let r = h.copy_input(&mut cx);
                let bytes = cx.bytes;
                self.st.keep.push(Arc::clone(&cx.src_data.buffer));
                stats.add(&inp.src_backend, be.name(), 0, bytes);
                ss.hook_bytes += bytes;
                handled = r.map_err(|source| SchedError::Hook {
                    tensor: node_name(g, inp.src),
                    backend: be.name().to_string(),
                    split: si,
                    source,
                })?;
                if handled {
                    stats.hook_handled += 1;
                } else {
                    stats.hook_declined += 1;
                }
            }
            if !handled {
                let n = self
                    .copy_weight(inp.src, be, &dst_data, stream)
                    .map_err(|e| copy_err(inp, e))?;
                stats.add(&inp.src_backend, be.name(), n, 0);
                ss.sched_bytes += n;
            }
        }
        // 3. compute after the copies (and after the early copies of the
        // inputs the look-ahead staged), queued after the look-ahead's
        // offers for the next splits
        if (any_copy || any_complete) && !be.is_host() && stream != Stream::Compute {
            let ev = be.record_event_on(stream).map_err(compute_err)?;
            be.wait_event_on(Stream::Compute, &ev)
                .map_err(compute_err)?;
        }
        for (ev, _) in staged.iter().flatten() {
            be.wait_event_on(Stream::Compute, ev).map_err(compute_err)?;
        }
        if let Some(h) = hook {
            let last = si.saturating_add(self.st.lookahead);
            self.lookahead(plan, si, si + 1..=last, h, stats)?;
        }
        be.compute(g, nodes).map_err(compute_err)?;
        self.st.done[si] = Some(be.record_event_on(Stream::Compute).map_err(compute_err)?);
        for &n in &sp.nodes {
            let root = g.view_root(n).index();
            if let Some(w) = self.st.writer.get_mut(root) {
                *w = Some(si);
            }
        }
        Ok(())
    }
}

impl Exec<'_> {
    /// Offer the not yet staged host-weight inputs of the splits `range`
    /// on devices with a copy stream to the hook's
    /// [`CopyHook::prefetch_input`], before split `si` is queued (see
    /// [`crate::prefetch`]).
    fn lookahead(
        &mut self,
        plan: &Plan,
        si: usize,
        range: std::ops::RangeInclusive<usize>,
        hook: &mut (dyn CopyHook + '_),
        stats: &mut ComputeStats,
    ) -> Result<(), SchedError> {
        if self.st.lookahead == 0 {
            return Ok(());
        }
        let g = self.g;
        let n = plan.splits.len();
        let last = (*range.end()).min(n.saturating_sub(1));
        for j in *range.start()..=last {
            let sp = &plan.splits[j];
            // a later split's own input copies would queue behind early
            // copies on the link: look no further than the next split that
            // has any
            if j > si && sp.inputs.iter().any(|p| p.copied && !p.host_weight) {
                break;
            }
            let be = self.backends[sp.backend].as_ref();
            if be.is_host() || be.n_copy_streams() == 0 {
                continue;
            }
            let stream = upload_stream(be);
            let applied = self.applied;
            let Some(info) = applied.splits.get(j) else {
                continue;
            };
            for (k, (inp, pi)) in info.inputs.iter().zip(&sp.inputs).enumerate() {
                if !pi.copied || !pi.host_weight || self.st.staged[j][k].is_some() {
                    continue;
                }
                let Some(src_data) = g.data_of(inp.src) else {
                    continue;
                };
                let hook_err = |source| SchedError::Hook {
                    tensor: node_name(g, inp.src),
                    backend: be.name().to_string(),
                    split: j,
                    source,
                };
                self.label(be, || format!("prefetch {}", g.tensor(inp.src).name));
                let mut cx = PrefetchCtx {
                    backend: be,
                    stream,
                    g,
                    current: si,
                    split: j,
                    nodes: &info.nodes,
                    inputs: &info.inputs,
                    src: inp.src,
                    dst: inp.copy,
                    src_data,
                    busy: &mut self.st.busy,
                    done: &self.st.done,
                    staging: &mut self.st.staging,
                    target: None,
                    partial: false,
                    writer: &self.st.writer,
                    bytes: 0,
                };
                let r = hook.prefetch_input(&mut cx);
                let (bytes, target, partial) = (cx.bytes, cx.target.take(), cx.partial);
                self.st.keep.push(Arc::clone(&cx.src_data.buffer));
                stats.add(&inp.src_backend, be.name(), 0, bytes);
                stats.prefetch_bytes += bytes;
                let took = r.map_err(hook_err)?;
                let Some(mem) = target.filter(|_| took) else {
                    continue;
                };
                let ev = be.record_event_on(stream).map_err(|e| hook_err(e.into()))?;
                // busy until the last split reading this input copy
                let last_reader = (j..n)
                    .rev()
                    .find(|&x| {
                        applied
                            .splits
                            .get(x)
                            .is_some_and(|s| s.inputs.iter().any(|i| i.copy == inp.copy))
                    })
                    .unwrap_or(j);
                self.st.busy.push(Busy {
                    buf: buffer_key(&mem),
                    start: mem.offset,
                    end: mem.offset + g.tensor(inp.src).nbytes(),
                    last_reader,
                });
                self.st.keep.push(Arc::clone(&mem.buffer));
                self.st.staged[j][k] = Some((mem, ev, partial));
                stats.prefetched += 1;
            }
        }
        Ok(())
    }
}

/// Run every split of `plan` over `backends` (see the module docs), with
/// the lists of `st` (reused between runs) and the counters in `stats`
/// (overwritten; its lists keep their memory).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    g: &mut Graph,
    backends: &[Arc<dyn Backend>],
    plan: &Plan,
    applied: &Applied,
    mut hook: Option<&mut (dyn CopyHook + '_)>,
    observer: Option<&dyn ExecObserver>,
    reused: bool,
    lookahead: usize,
    st: &mut State,
    stats: &mut ComputeStats,
) -> Result<(), SchedError> {
    if let Some(h) = hook.as_deref_mut() {
        h.begin_graph();
    }
    stats.reset(plan.splits.len(), reused);
    st.reset(plan, g.len(), lookahead);
    let mut result = Ok(());
    let mut n_run = 0;
    for (si, (sp, info)) in plan.splits.iter().zip(&applied.splits).enumerate() {
        // a declined offer is made once more just before its own split
        if let (Some(h), true) = (hook.as_deref_mut(), lookahead > 0) {
            let mut ex = Exec {
                g: &*g,
                backends,
                applied,
                observer,
                st: &mut *st,
            };
            if let Err(e) = ex.lookahead(plan, si, si..=si, h, stats) {
                result = Err(e);
                break;
            }
        }
        for (k, inp) in info.inputs.iter().enumerate() {
            if let Some((mem, _, _)) = &st.staged[si][k] {
                let old = g.tensor_mut(inp.copy).data.replace(mem.clone());
                st.rebound.push((inp.copy, old));
            }
        }
        let mut ss = stats.split_slot(n_run, backends[sp.backend].name(), sp.nodes.len());
        let mut ex = Exec {
            g: &*g,
            backends,
            applied,
            observer,
            st: &mut *st,
        };
        let r = ex.run_split(plan, si, sp, info, hook.as_deref_mut(), stats, &mut ss);
        stats.splits[n_run] = ss;
        if let Err(e) = r {
            result = Err(e);
            break;
        }
        n_run += 1;
    }
    stats.splits.truncate(n_run);
    // queued copies read staging memory: let everything finish first
    for be in backends {
        let r =
            timed(&mut st.device_ns, || be.synchronize()).map_err(|source| SchedError::Compute {
                backend: be.name().to_string(),
                split: plan.splits.len().saturating_sub(1),
                source,
            });
        if result.is_ok() {
            result = r;
        }
    }
    stats.wait_ns = st.device_ns;
    st.staging.clear();
    st.keep.clear();
    st.busy.clear();
    for sd in &mut st.staged {
        sd.iter_mut().for_each(|x| *x = None);
    }
    for (id, old) in st.rebound.drain(..).rev() {
        g.tensor_mut(id).data = old;
    }
    result
}
