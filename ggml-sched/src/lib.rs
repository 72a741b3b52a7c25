#![doc = include_str!("../README.md")]
//!
//! ## How it works
//!
//! The backend scheduler (`ggml_backend_sched` in spirit): it runs one
//! [`Graph`] over several backends — devices first, the CPU last.
//!
//! How data flows through [`Scheduler::compute`]:
//!
//! 1. **Assignment.** Nodes writing caller memory (`cpy`/`set_rows` into a KV
//!    cache) go where that memory is; nodes reading a weight go to the backend
//!    holding it, or to a device whose `offload_op` asks for an op whose
//!    weight is in host memory; assignments then spread to neighbouring nodes
//!    (devices first); what is left goes to the highest-priority backend
//!    that supports it. Views compute nothing and live where their memory is.
//! 2. **Splits.** The node list is cut into maximal runs on one backend, and
//!    before any node that reads a weight its backend cannot use, so that such
//!    a node heads its split.
//! 3. **Inputs.** Each tensor a split reads but its backend cannot use gets a
//!    copy tensor (same type, shape and strides) added to the graph in the
//!    backend's compute memory; the split's nodes are pointed at the copy
//!    while the graph computes. A copy is reused by later splits while its
//!    source is unchanged. Inputs in host weights buffers are *host weights*.
//! 4. **Memory.** Everything the scheduler allocates (node results, leafs
//!    without data, copies) is laid out by liveness in one compute buffer per
//!    backend, kept across computes while large enough. Graph inputs and
//!    outputs keep their memory; views take none. With a
//!    [`ComputeLender`] installed, a device's compute memory of a graph is
//!    asked of it first and laid out in the range it lends ([`lender`]).
//! 5. **Run.** For each split: copy the inputs that are not host weights
//!    (from another device device to device where the pair can,
//!    [`ggml_core::BackendStream::copy_from_peer`], else through host memory),
//!    then offer each host weight to the [`CopyHook`] (a full copy when it
//!    declines), all on the backend's copy stream, then queue the split's
//!    compute behind the copies' event. Splits do not synchronize: a split
//!    waits (on events) only for the splits whose outputs it reads, and the
//!    copies for split `i` may overlap split `i - 1`'s compute. The host
//!    synchronizes once, at the end of the graph (see `exec.rs`).
//!
//! A graph of the same structure as the previous one (ops, shapes, types,
//! sources, placement of caller data) reuses its plan. The very graph of
//! the last compute, with only its inputs' bytes and its views' offsets
//! changed, is computed again by [`Scheduler::compute_again`] without even
//! that check: its plan, splits, input copies and compute memory as they
//! were, and the run's lists reused, so that a steady decode allocates
//! nothing here. [`ComputeStats`]
//! counts splits and bytes moved per backend pair, by the scheduler (of
//! them, the peer copies) and by the hook; [`Scheduler::plan_dump`] prints the plan.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use ggml_core::{Backend, CpuBackend, Graph, SimBackend};
//! # use ggml_sched::Scheduler;
//! # fn f(mut g: Graph, x: ggml_core::TensorId) -> Result<(), Box<dyn std::error::Error>> {
//! let backends: Vec<Arc<dyn Backend>> =
//!     vec![Arc::new(SimBackend::new(0, 1)), Arc::new(CpuBackend::new(2))];
//! let mut sched = Scheduler::new(backends)?;
//! sched.alloc_graph(&mut g)?; // inputs get memory: write them now
//! g.write_f32(x, &[1.0, 2.0])?;
//! let stats = sched.compute(&mut g)?;
//! println!("{} splits, {} bytes copied", stats.n_splits, stats.sched_bytes());
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod alloc;
mod error;
mod exec;
mod hook;
pub mod lender;
mod observe;
mod plan;
pub mod prefetch;
mod stats;

use std::fmt::Write as _;
use std::sync::{Arc, Weak};

use ggml_core::backend::{Backend, Buffer, BufferUsage};
use ggml_core::tensor::Tensor;
use ggml_core::{Graph, Op, TensorData, TensorId};

pub use error::{HookError, SchedError};
pub use hook::{CopyHook, HookCtx, SplitInput};
pub use lender::{ComputeLender, Loan};
pub use observe::ExecObserver;
pub use prefetch::PrefetchCtx;
pub use stats::{ComputeStats, PairStats, SplitStats};

use alloc::{Ent, ALIGN};
use plan::{graph_key, make_plan, node_name, Env, Plan};

/// A split of the current plan, as applied to the last graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitInfo {
    /// Index of the split's backend in the scheduler's list.
    pub backend: usize,
    /// Its name.
    pub backend_name: String,
    /// The nodes it computes, in order (views, which compute nothing, are
    /// not listed).
    pub nodes: Vec<TensorId>,
    /// Its inputs, in copy order of the plan (host weights are copied after
    /// the others at run time).
    pub inputs: Vec<SplitInput>,
}

struct Applied {
    copy_ids: Vec<TensorId>,
    splits: Vec<SplitInfo>,
    dump: String,
}

/// Runs graphs over several backends. See the crate docs.
pub struct Scheduler {
    backends: Vec<Arc<dyn Backend>>,
    own_use: Vec<Vec<bool>>,
    bufs: Vec<Option<Arc<dyn Buffer>>>,
    owned: Vec<Weak<dyn Buffer>>,
    plan: Option<Plan>,
    applied: Option<Applied>,
    node_backend: Vec<Option<usize>>,
    hook: Option<Box<dyn CopyHook>>,
    observer: Option<Box<dyn ExecObserver>>,
    n_plans: usize,
    planned_since_compute: bool,
    last_stats: ComputeStats,
    lookahead: usize,
    /// The run's lists, kept between computes.
    state: exec::State,
    /// Sources pointed at copies during a compute, restored after it.
    undo: Vec<(TensorId, usize, TensorId)>,
    /// `(uid, tensors, nodes)` of the graph the last compute ran, while
    /// nothing was planned or allocated since ([`Scheduler::compute_again`]).
    kept: Option<(u64, usize, usize)>,
    /// The source of compute memory asked first, when installed.
    lender: Option<Box<dyn ComputeLender>>,
    /// Per backend: the loan the last allocated graph's memory is in.
    loans: Vec<Option<Loan>>,
    /// The uid of the graph allocated in the loans held.
    loan_uid: Option<u64>,
}

impl Scheduler {
    /// A scheduler over `backends` in priority order; the last one must be a
    /// host backend (the CPU), which runs whatever no device takes.
    pub fn new(backends: Vec<Arc<dyn Backend>>) -> Result<Scheduler, SchedError> {
        if !backends.last().is_some_and(|b| b.is_host()) || backends.len() > 64 {
            let names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
            return Err(SchedError::NoHostBackend(names.join(", ")));
        }
        // which backend can use which backend's compute memory: probe once
        let mut probes = Vec::with_capacity(backends.len());
        for b in &backends {
            probes.push(
                b.alloc_buffer(ALIGN, BufferUsage::Compute)
                    .map_err(|source| SchedError::Alloc {
                        backend: b.name().to_string(),
                        size: ALIGN,
                        source,
                    })?,
            );
        }
        let own_use = backends
            .iter()
            .map(|b| {
                probes
                    .iter()
                    .map(|p| b.can_use_buffer(p.as_ref()))
                    .collect()
            })
            .collect();
        let n = backends.len();
        Ok(Scheduler {
            backends,
            own_use,
            bufs: vec![None; n],
            owned: Vec::new(),
            plan: None,
            applied: None,
            node_backend: Vec::new(),
            hook: None,
            observer: None,
            n_plans: 0,
            planned_since_compute: false,
            last_stats: ComputeStats::default(),
            lookahead: 0,
            state: exec::State::default(),
            undo: Vec::new(),
            kept: None,
            lender: None,
            loans: vec![None; n],
            loan_uid: None,
        })
    }

    /// Install the copy hook (replacing any earlier one). Without a hook,
    /// host weights are copied in full.
    pub fn set_copy_hook(&mut self, hook: Box<dyn CopyHook>) {
        self.hook = Some(hook);
    }

    /// Install a source of compute memory (replacing any earlier one, whose
    /// loans are given back first): from the next
    /// [`Scheduler::alloc_graph`] on, each device's compute memory of a
    /// graph is asked of it before the scheduler uses its own (see
    /// [`lender`]).
    pub fn set_lender(&mut self, lender: Box<dyn ComputeLender>) {
        self.give_back_loans(None);
        self.lender = Some(lender);
    }

    /// Remove the source of compute memory (its loans given back) and
    /// return it.
    pub fn take_lender(&mut self) -> Option<Box<dyn ComputeLender>> {
        self.give_back_loans(None);
        self.lender.take()
    }

    /// Bytes of lent compute memory the last allocated graph uses, per
    /// backend, as `(name, bytes)` (0 where it uses the scheduler's own).
    pub fn lent_sizes(&self) -> Vec<(String, usize)> {
        self.backends
            .iter()
            .zip(&self.loans)
            .map(|(b, l)| (b.name().to_string(), l.as_ref().map_or(0, |l| l.size)))
            .collect()
    }

    /// Release the compute buffers the scheduler allocated (a later graph
    /// allocates what it needs again) and give back the loans it holds;
    /// the plan is forgotten. Memory a graph's tensors still point at is
    /// freed when that graph is dropped.
    pub fn release_compute_memory(&mut self) {
        self.give_back_loans(None);
        for b in &mut self.bufs {
            *b = None;
        }
        self.plan = None;
        self.applied = None;
        self.kept = None;
    }

    /// The compute memory per backend a graph needs, planned (as
    /// [`Scheduler::alloc_graph`] would) without allocating or keeping
    /// anything: the graph is not changed.
    pub fn plan_memory(&mut self, g: &Graph) -> Result<Vec<usize>, SchedError> {
        let ours = self.our_addrs();
        let key = graph_key(g, &ours);
        let env = Env {
            backends: &self.backends,
            own_use: &self.own_use,
            ours: &ours,
        };
        Ok(make_plan(g, &env, key)?.buf_sizes)
    }

    /// Give the loans held back to the lender; when `g` is the graph laid
    /// out in them, its tensors there forget their memory first (so that
    /// they are planned as the scheduler's again, not as caller memory).
    fn give_back_loans(&mut self, g: Option<&mut Graph>) {
        if self.loans.iter().all(|l| l.is_none()) {
            return;
        }
        if let (Some(g), Some(plan), Some(applied)) = (g, self.plan.as_ref(), self.applied.as_ref())
        {
            if self.loan_uid == Some(g.uid()) {
                for &(e, b, _) in &plan.allocs {
                    if self.loans[b].is_none() {
                        continue;
                    }
                    let id = match e {
                        Ent::T(id) => id,
                        Ent::C(slot) => match applied.copy_ids.get(slot) {
                            Some(&id) => id,
                            None => continue,
                        },
                    };
                    if id.index() < g.len() {
                        g.tensor_mut(id).data = None;
                    }
                }
            }
        }
        for (b, l) in self.loans.iter_mut().enumerate() {
            if l.take().is_some() {
                if let Some(lender) = self.lender.as_mut() {
                    lender.give_back(b);
                }
            }
        }
        self.loan_uid = None;
    }

    /// Ask the lender for `need` bytes on backend `b` (devices only), and
    /// check what it lends.
    fn borrow(&mut self, b: usize, need: usize) -> Result<Option<Loan>, SchedError> {
        let be = &self.backends[b];
        let Some(lender) = self.lender.as_mut().filter(|_| !be.is_host()) else {
            return Ok(None);
        };
        let Some(loan) = lender.lend(b, need) else {
            return Ok(None);
        };
        let bad = |detail: String| SchedError::BadLoan {
            backend: be.name().to_string(),
            detail,
        };
        let detail = if loan.size < need {
            Some(format!("{} bytes lent, {need} needed", loan.size))
        } else if loan.offset % ALIGN != 0 {
            Some(format!(
                "offset {} is not a multiple of {ALIGN}",
                loan.offset
            ))
        } else if loan
            .offset
            .checked_add(loan.size)
            .is_none_or(|e| e > loan.buffer.size())
        {
            Some(format!(
                "{} bytes at offset {} pass the end of a buffer of {} bytes",
                loan.size,
                loan.offset,
                loan.buffer.size()
            ))
        } else if !be.can_use_buffer(loan.buffer.as_ref()) {
            Some(format!(
                "{} cannot use a buffer of {}",
                be.name(),
                loan.buffer.name()
            ))
        } else {
            None
        };
        if let Some(d) = detail {
            lender.give_back(b);
            return Err(bad(d));
        }
        Ok(Some(loan))
    }

    /// Install the run's observer (replacing any earlier one): it hears
    /// which tensor the copies queued next are of, so that a caller that
    /// keeps a timeline can label them (see [`ExecObserver`]). Without one,
    /// nothing is labelled.
    pub fn set_observer(&mut self, observer: Box<dyn ExecObserver>) {
        self.observer = Some(observer);
    }

    /// Offer the host-weight inputs of up to `n` later splits to the copy
    /// hook's [`CopyHook::prefetch_input`] before queuing each split, for
    /// early copies on the copy stream into memory the hook provides (see
    /// [`prefetch`]). `0` (the default) turns the look-ahead off.
    pub fn set_lookahead(&mut self, n: usize) {
        self.lookahead = n;
    }

    /// The look-ahead, in splits (0: off).
    pub fn lookahead(&self) -> usize {
        self.lookahead
    }

    /// Remove the copy hook and return it.
    pub fn take_copy_hook(&mut self) -> Option<Box<dyn CopyHook>> {
        self.hook.take()
    }

    /// The backends, in priority order.
    pub fn backends(&self) -> &[Arc<dyn Backend>] {
        &self.backends
    }

    /// How many times a graph was planned (not counting reused plans).
    pub fn n_plans(&self) -> usize {
        self.n_plans
    }

    /// The counters of the last compute (of the splits it ran, when it
    /// failed).
    pub fn last_stats(&self) -> &ComputeStats {
        &self.last_stats
    }

    /// The splits of the plan as applied to the last graph.
    pub fn splits(&self) -> &[SplitInfo] {
        self.applied.as_ref().map_or(&[], |a| &a.splits)
    }

    /// The backend assigned to a node of the last graph (views included).
    pub fn node_backend(&self, node: TensorId) -> Option<&str> {
        let b = (*self.node_backend.get(node.index())?)?;
        Some(self.backends[b].name())
    }

    /// Bytes of compute memory held per backend, as `(name, bytes)`.
    pub fn compute_buffer_sizes(&self) -> Vec<(String, usize)> {
        self.backends
            .iter()
            .zip(&self.bufs)
            .map(|(b, m)| (b.name().to_string(), m.as_ref().map_or(0, |m| m.size())))
            .collect()
    }

    /// The plan of the last graph, for debugging: node → backend, split
    /// boundaries, and each split's inputs. (Tensor names are those of the
    /// graph the plan was applied to first: later graphs of the same
    /// structure whose copies got the same ids reuse the text.)
    pub fn plan_dump(&self) -> String {
        self.applied
            .as_ref()
            .map_or_else(|| "(no plan)\n".to_string(), |a| a.dump.clone())
    }

    fn our_addrs(&mut self) -> Vec<usize> {
        self.owned.retain(|w| w.strong_count() > 0);
        self.owned
            .iter()
            .map(|w| Weak::as_ptr(w) as *const u8 as usize)
            .collect()
    }

    /// Plan the graph (or reuse the plan of a graph of the same structure)
    /// and give memory to every tensor the scheduler allocates, inputs
    /// included, so the caller can write them before [`Scheduler::compute`].
    /// Adds the split input copies to the graph.
    pub fn alloc_graph(&mut self, g: &mut Graph) -> Result<(), SchedError> {
        self.kept = None;
        self.give_back_loans(Some(g));
        let ours = self.our_addrs();
        let key = graph_key(g, &ours);
        let reuse = self.plan.as_ref().is_some_and(|p| p.key == key);
        if !reuse {
            self.plan = None;
            self.applied = None;
            let env = Env {
                backends: &self.backends,
                own_use: &self.own_use,
                ours: &ours,
            };
            self.plan = Some(make_plan(g, &env, key)?);
            self.n_plans += 1;
            self.planned_since_compute = true;
        }
        let Some(sizes) = self.plan.as_ref().map(|p| p.buf_sizes.clone()) else {
            return Err(SchedError::Graph("no plan".into()));
        };

        // compute memory: lent, else the scheduler's own buffer, grown
        // when too small
        let mut mem: Vec<Option<(Arc<dyn Buffer>, usize)>> = vec![None; sizes.len()];
        for (b, &need) in sizes.iter().enumerate() {
            if need == 0 {
                continue;
            }
            if let Some(loan) = self.borrow(b, need)? {
                mem[b] = Some((Arc::clone(&loan.buffer), loan.offset));
                self.loans[b] = Some(loan);
                self.loan_uid = Some(g.uid());
                continue;
            }
            if let Some(m) = self.bufs[b].as_ref().filter(|m| m.size() >= need) {
                mem[b] = Some((Arc::clone(m), 0));
                continue;
            }
            let be = &self.backends[b];
            // release the smaller buffer first: its contents are not carried
            // over, and holding both would double the device's peak
            self.bufs[b] = None;
            let m = be
                .alloc_buffer(need, BufferUsage::Compute)
                .map_err(|source| SchedError::Alloc {
                    backend: be.name().to_string(),
                    size: need,
                    source,
                })?;
            self.owned.push(Arc::downgrade(&m));
            mem[b] = Some((Arc::clone(&m), 0));
            self.bufs[b] = Some(m);
        }
        let Some(plan) = self.plan.as_ref() else {
            return Err(SchedError::Graph("no plan".into()));
        };

        // copy tensors: those added by an earlier run on this very graph,
        // else new ones at the end of the arena
        let prev = self.applied.as_ref().map(|a| a.copy_ids.clone());
        let matches = |ids: &[TensorId]| {
            ids.len() == plan.copies.len()
                && ids.iter().zip(&plan.copies).all(|(&id, c)| {
                    id.index() < g.len() && {
                        let t = g.tensor(id);
                        t.name == c.name
                            && t.ty == c.ty
                            && t.ne == c.ne
                            && t.nb == c.nb
                            && t.op == Op::None
                            && t.view_src.is_none()
                    }
                })
        };
        let copy_ids = match prev {
            Some(ids) if matches(&ids) => ids,
            _ => plan
                .copies
                .iter()
                .map(|c| {
                    let mut t = Tensor::new(c.ty, c.ne);
                    t.nb = c.nb;
                    t.name = c.name.clone();
                    g.push(t)
                })
                .collect(),
        };

        for &(e, b, off) in &plan.allocs {
            let id = match e {
                Ent::T(id) => id,
                Ent::C(slot) => copy_ids[slot],
            };
            let Some((buffer, base)) = mem[b].clone() else {
                return Err(SchedError::Graph(format!(
                    "no compute buffer on {}",
                    self.backends[b].name()
                )));
            };
            g.tensor_mut(id).data = Some(TensorData {
                buffer,
                offset: base + off,
            });
        }

        self.node_backend.clear();
        self.node_backend.resize(g.len(), None);
        for &(n, b) in &plan.assign {
            self.node_backend[n.index()] = Some(b);
        }
        // a reused plan whose copies got the ids of the last graph's (a
        // decode's new graph of the same structure) keeps its splits and
        // dump: formatting the dump for every token cost more than planning
        if reuse
            && self
                .applied
                .as_ref()
                .is_some_and(|a| a.copy_ids == copy_ids)
        {
            return Ok(());
        }
        let splits: Vec<SplitInfo> = plan
            .splits
            .iter()
            .map(|sp| SplitInfo {
                backend: sp.backend,
                backend_name: self.backends[sp.backend].name().to_string(),
                nodes: sp.nodes.clone(),
                inputs: sp
                    .inputs
                    .iter()
                    .map(|i| SplitInput {
                        src: i.src,
                        copy: copy_ids[i.slot],
                        host_weight: i.host_weight,
                        copied: i.copied,
                        src_backend: self.backends[i.src_backend].name().to_string(),
                    })
                    .collect(),
            })
            .collect();
        let dump = dump(g, &self.backends, plan, &splits);
        self.applied = Some(Applied {
            copy_ids,
            splits,
            dump,
        });
        Ok(())
    }

    /// Compute the graph: plan and allocate it if [`Scheduler::alloc_graph`]
    /// was not called for it, copy split inputs (host weights through the
    /// copy hook), run the splits in order. The graph's sources are restored
    /// afterwards (the copies stay in the arena and are reused by the next
    /// compute of the same graph). Errors of backends and of the hook reach
    /// the caller; the scheduler stays usable.
    pub fn compute(&mut self, g: &mut Graph) -> Result<ComputeStats, SchedError> {
        self.alloc_graph(g)?;
        self.run_planned(g)?;
        Ok(self.last_stats.clone())
    }

    /// Compute the graph the last [`Scheduler::compute`] (or
    /// `compute_again`) ran once more, with its plan, memory and input
    /// copies as they are: nothing is planned, hashed or allocated. The
    /// caller may have changed the bytes of the graph's inputs and the
    /// offsets of its views (no plan depends on them), nothing else. When another graph
    /// was planned or allocated since, or `g` is not the graph of the last
    /// compute (its [`Graph::uid`], tensor and node counts), this is
    /// [`Scheduler::compute`]. Returns the compute's counters.
    pub fn compute_again(&mut self, g: &mut Graph) -> Result<&ComputeStats, SchedError> {
        let same = self.kept == Some((g.uid(), g.len(), g.nodes().len()))
            && self.plan.is_some()
            && self.applied.is_some();
        if !same {
            self.alloc_graph(g)?;
        }
        self.run_planned(g)?;
        Ok(&self.last_stats)
    }

    /// Run the planned and allocated graph: point the nodes at their input
    /// copies, run the splits, restore the sources.
    fn run_planned(&mut self, g: &mut Graph) -> Result<(), SchedError> {
        self.kept = None;
        let (Some(plan), Some(applied)) = (self.plan.as_ref(), self.applied.as_ref()) else {
            return Err(SchedError::Graph("no plan".into()));
        };
        self.undo.clear();
        for sp in &plan.splits {
            for &(n, j, slot) in &sp.rewires {
                let t = g.tensor_mut(n);
                self.undo.push((n, j, t.src[j]));
                t.src[j] = applied.copy_ids[slot];
            }
        }
        let r = exec::run(
            g,
            &self.backends,
            plan,
            applied,
            self.hook.as_deref_mut(),
            self.observer.as_deref(),
            !std::mem::take(&mut self.planned_since_compute),
            self.lookahead,
            &mut self.state,
            &mut self.last_stats,
        );
        for &(n, j, orig) in self.undo.iter().rev() {
            g.tensor_mut(n).src[j] = orig;
        }
        r?;
        self.kept = Some((g.uid(), g.len(), g.nodes().len()));
        Ok(())
    }
}

fn dump(g: &Graph, backends: &[Arc<dyn Backend>], plan: &Plan, splits: &[SplitInfo]) -> String {
    let mut s = String::new();
    let name = |b: usize| backends[b].name();
    let _ = writeln!(
        s,
        "plan: {} nodes, {} splits, {} copies; compute memory: {}",
        plan.assign.len(),
        plan.splits.len(),
        plan.copies.len(),
        plan.buf_sizes
            .iter()
            .enumerate()
            .map(|(b, n)| format!("{} {} B", name(b), n))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut in_split = vec![usize::MAX; g.len()];
    for (si, sp) in plan.splits.iter().enumerate() {
        for &n in &sp.nodes {
            in_split[n.index()] = si;
        }
    }
    let mut cur = usize::MAX;
    for &(n, b) in &plan.assign {
        let t = g.tensor(n);
        let si = in_split[n.index()];
        if si != usize::MAX && si != cur {
            cur = si;
            let sp = &splits[si];
            let _ = writeln!(
                s,
                "## split {si}: {} ({} nodes)",
                sp.backend_name,
                sp.nodes.len()
            );
            for inp in &sp.inputs {
                let _ = writeln!(
                    s,
                    "   input {:?} '{}' {} -> {:?} '{}' [{}]{}",
                    inp.src,
                    node_name(g, inp.src),
                    inp.src_backend,
                    inp.copy,
                    g.tensor(inp.copy).name,
                    if inp.copied { "copied" } else { "reused" },
                    if inp.host_weight {
                        ", host weight: offered to the copy hook"
                    } else {
                        ""
                    }
                );
            }
        }
        let srcs: Vec<String> = t.src.iter().map(|x| format!("{x:?}")).collect();
        let _ = writeln!(
            s,
            "  {:?} {:<12} {:<6} {:?} ({}){}",
            n,
            t.op.name(),
            name(b),
            node_name(g, n),
            srcs.join(", "),
            if si == usize::MAX { "  [view]" } else { "" }
        );
    }
    s
}
