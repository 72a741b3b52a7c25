//! Planning: node assignment, splits, split inputs, and the structural key
//! that decides whether a plan can be reused for a new graph.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use ggml_core::backend::{Backend, Buffer, BufferUsage};
use ggml_core::tensor::MAX_DIMS;
use ggml_core::{GgmlType, Graph, Op, TensorId};

use crate::alloc::{plan_memory, Ent};
use crate::error::SchedError;

/// What planning needs to know about the backends and the scheduler's memory.
pub(crate) struct Env<'a> {
    /// Backends in priority order, the host backend last.
    pub backends: &'a [Arc<dyn Backend>],
    /// `own_use[b][m]`: backend `b` can use compute memory of backend `m`.
    pub own_use: &'a [Vec<bool>],
    /// Addresses of the compute buffers the scheduler allocated: tensors whose
    /// data points there are (re)allocated by the scheduler.
    pub ours: &'a [usize],
}

pub(crate) fn buf_addr(b: &Arc<dyn Buffer>) -> usize {
    Arc::as_ptr(b) as *const u8 as usize
}

/// The buffer of caller-set memory of `id` itself (not through views).
pub(crate) fn foreign<'g>(
    g: &'g Graph,
    id: TensorId,
    ours: &[usize],
) -> Option<&'g Arc<dyn Buffer>> {
    g.tensor(id)
        .data
        .as_ref()
        .map(|d| &d.buffer)
        .filter(|b| !ours.contains(&buf_addr(b)))
}

/// The tensor that owns `id`'s memory: the first tensor along the view chain
/// with caller-set memory, else the root of the chain (allocated by us).
pub(crate) fn holder(g: &Graph, mut id: TensorId, ours: &[usize]) -> TensorId {
    loop {
        if foreign(g, id, ours).is_some() {
            return id;
        }
        match g.tensor(id).view_src {
            Some(v) => id = v,
            None => return id,
        }
    }
}

/// Every tensor the node list reaches through sources and views.
pub(crate) fn relevant(g: &Graph) -> Vec<bool> {
    let mut seen = vec![false; g.len()];
    let mut stack: Vec<TensorId> = g.nodes().to_vec();
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut seen[id.index()], true) {
            continue;
        }
        let t = g.tensor(id);
        stack.extend(t.src.iter().copied());
        stack.extend(t.view_src);
    }
    seen
}

/// The structure a plan depends on: nodes, ops, types, shapes, strides,
/// sources, views (their sources, not their offsets), flags, and which
/// caller buffer holds each tensor's data.
pub(crate) fn graph_key(g: &Graph, ours: &[usize]) -> Vec<u64> {
    let rel = relevant(g);
    let mut k = Vec::with_capacity(g.nodes().len() * 24 + 8);
    k.push(g.nodes().len() as u64);
    k.extend(g.nodes().iter().map(|n| n.0 as u64));
    for id in g.ids().filter(|id| rel[id.index()]) {
        let t = g.tensor(id);
        let mut h = DefaultHasher::new();
        t.op.hash(&mut h);
        k.push(id.0 as u64);
        k.push(h.finish());
        k.push(t.ty.id() as u64);
        k.extend(t.ne.iter().map(|&n| n as u64));
        k.extend(t.nb.iter().map(|&n| n as u64));
        // not the view's offset: no part of a plan depends on it (a view's
        // memory is its source's plus the offset, resolved when it is
        // used), and a decode's KV store views move by one cell per token
        k.push(t.view_src.map_or(0, |v| v.0 as u64 + 1));
        k.push(
            t.flags.input as u64
                | (t.flags.output as u64) << 1
                | (t.flags.weight as u64) << 2
                | (t.flags.host as u64) << 3,
        );
        k.push(t.src.len() as u64);
        k.extend(t.src.iter().map(|s| s.0 as u64));
        match foreign(g, id, ours) {
            Some(b) => {
                k.push(1);
                k.push(buf_addr(b) as u64);
            }
            None => k.push(0),
        }
    }
    k
}

/// One input of a split: a tensor its backend cannot use, and its copy.
#[derive(Clone, Debug)]
pub(crate) struct InputPlan {
    pub src: TensorId,
    pub slot: usize,
    pub host_weight: bool,
    /// `false` when the copy made for an earlier split is still valid.
    pub copied: bool,
    pub src_backend: usize,
}

/// A maximal run of nodes on one backend.
#[derive(Clone, Debug)]
pub(crate) struct SplitPlan {
    pub backend: usize,
    pub nodes: Vec<TensorId>,
    pub inputs: Vec<InputPlan>,
    /// `(node, src index, copy slot)`: sources to point at copies.
    pub rewires: Vec<(TensorId, usize, usize)>,
}

/// A copy tensor to add to the graph: same type, shape and strides as `src`.
#[derive(Clone, Debug)]
pub(crate) struct CopyPlan {
    pub src: TensorId,
    pub backend: usize,
    pub name: String,
    pub ty: GgmlType,
    pub ne: [i64; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
}

/// Everything decided for a graph structure.
pub(crate) struct Plan {
    pub key: Vec<u64>,
    /// Backend of every node (views included), in node order.
    pub assign: Vec<(TensorId, usize)>,
    pub splits: Vec<SplitPlan>,
    pub copies: Vec<CopyPlan>,
    /// `(entity, backend, offset)` for everything the scheduler allocates.
    pub allocs: Vec<(Ent, usize, usize)>,
    /// Compute memory needed per backend.
    pub buf_sizes: Vec<usize>,
}

pub(crate) fn node_name(g: &Graph, id: TensorId) -> String {
    let n = &g.tensor(id).name;
    if n.is_empty() {
        format!("#{}", id.0)
    } else {
        n.clone()
    }
}

fn unsupported(g: &Graph, n: TensorId, detail: String) -> SchedError {
    SchedError::Unsupported {
        op: g.tensor(n).op.name(),
        node: n,
        name: node_name(g, n),
        detail,
    }
}

struct Planner<'a> {
    g: &'a Graph,
    env: &'a Env<'a>,
    nb: usize,
    cpu: usize,
    /// Bit `b` set: backend `b` supports the node.
    sup: Vec<u64>,
    assign: Vec<Option<usize>>,
    /// Backend whose compute memory holds a tensor we allocate.
    own_backend: Vec<Option<usize>>,
}

impl<'a> Planner<'a> {
    fn foreign(&self, id: TensorId) -> Option<&'a Arc<dyn Buffer>> {
        foreign(self.g, id, self.env.ours)
    }
    fn holder(&self, id: TensorId) -> TensorId {
        holder(self.g, id, self.env.ours)
    }
    fn sup(&self, b: usize, n: TensorId) -> bool {
        self.sup[n.index()] >> b & 1 == 1
    }
    fn be(&self, b: usize) -> &dyn Backend {
        self.env.backends[b].as_ref()
    }
    fn first_user(&self, buf: &dyn Buffer) -> Option<usize> {
        (0..self.nb).find(|&b| self.be(b).can_use_buffer(buf))
    }
    /// Sources a node reads (the destination of an in-place op excluded).
    fn reads(&self, n: TensorId) -> impl Iterator<Item = (usize, TensorId)> + 'a {
        let t = self.g.tensor(n);
        let skip = if t.op.writes_in_place() {
            t.view_src
        } else {
            None
        };
        t.src
            .iter()
            .copied()
            .enumerate()
            .filter(move |&(_, s)| Some(s) != skip)
    }
    fn own_home(&self, h: TensorId) -> usize {
        self.own_backend[h.index()].unwrap_or(self.cpu)
    }
    /// Whether backend `b` can use the memory of `id` without a copy.
    fn can_use(&self, b: usize, id: TensorId) -> bool {
        let h = self.holder(id);
        match self.foreign(h) {
            Some(buf) => self.be(b).can_use_buffer(buf.as_ref()),
            None => self.env.own_use[b][self.own_home(h)],
        }
    }
    /// Whether `id` is a weight: in a weights buffer, or flagged as one.
    fn is_weight(&self, id: TensorId) -> bool {
        let h = self.holder(id);
        self.foreign(h)
            .is_some_and(|b| b.usage() == BufferUsage::Weights)
            || self.g.tensor(id).flags.weight
            || self.g.tensor(h).flags.weight
    }
    fn is_host_weight(&self, id: TensorId) -> bool {
        self.foreign(self.holder(id))
            .is_some_and(|b| b.is_host() && b.usage() == BufferUsage::Weights)
    }
    fn mem_backend(&self, id: TensorId) -> Result<usize, SchedError> {
        let h = self.holder(id);
        match self.foreign(h) {
            // host memory the CPU reads only through a copy
            // (`copied_for_cpu`) is the CPU's
            Some(buf) => self
                .first_user(buf.as_ref())
                .or_else(|| buf.copied_for_cpu().then_some(self.cpu))
                .ok_or_else(|| {
                    SchedError::Graph(format!(
                        "no backend can use buffer {} holding '{}'",
                        buf.name(),
                        node_name(self.g, id)
                    ))
                }),
            None => Ok(self.own_home(h)),
        }
    }

    /// Pass 1: nodes flagged `host` go to the CPU; nodes writing caller
    /// memory go where it is; nodes reading a weight go where the weight is
    /// (or to a device that asks to offload).
    fn pass_weights(&mut self, nodes: &[TensorId]) -> Result<(), SchedError> {
        for &n in nodes {
            let t = self.g.tensor(n);
            if t.op.is_view() {
                continue;
            }
            // asked to run on the host (ggml's set_tensor_backend(cpu))
            if t.flags.host && self.foreign(self.holder(n)).is_none() && self.sup(self.cpu, n) {
                self.assign[n.index()] = Some(self.cpu);
                continue;
            }
            if let Some(buf) = self.foreign(self.holder(n)) {
                let b = (0..self.nb)
                    .find(|&b| self.be(b).can_use_buffer(buf.as_ref()) && self.sup(b, n))
                    .ok_or_else(|| {
                        unsupported(
                            self.g,
                            n,
                            format!(": none that can write its memory in {}", buf.name()),
                        )
                    })?;
                self.assign[n.index()] = Some(b);
                continue;
            }
            for (j, s) in self.reads(n) {
                let h = self.holder(s);
                let Some(buf) = self.foreign(h) else { continue };
                let weights = buf.usage() == BufferUsage::Weights;
                let flagged = self.g.tensor(s).flags.weight || self.g.tensor(h).flags.weight;
                let first_of_matmul =
                    j == 0 && matches!(t.op, Op::MulMat | Op::MulMatId | Op::GetRows);
                if !(weights || flagged || first_of_matmul) {
                    continue;
                }
                let owner = self.first_user(buf.as_ref());
                let mut pick = None;
                if weights && buf.is_host() && owner.is_none_or(|o| self.be(o).is_host()) {
                    pick = (0..self.nb).find(|&b| {
                        !self.be(b).is_host()
                            && !self.be(b).can_use_buffer(buf.as_ref())
                            && self.sup(b, n)
                            && self.be(b).offload_op(self.g, n)
                    });
                }
                if pick.is_none() {
                    pick = (0..self.nb)
                        .find(|&b| self.be(b).can_use_buffer(buf.as_ref()) && self.sup(b, n));
                }
                self.assign[n.index()] = pick;
                break;
            }
        }
        Ok(())
    }

    /// Pass 2: spread assignments to unassigned neighbours that the same
    /// backend supports (ggml's expand passes), devices first.
    fn expand(&mut self, order: &[TensorId], skip_host: bool) {
        let mut cur: Option<usize> = None;
        for &n in order {
            if self.g.tensor(n).op.is_view() {
                continue;
            }
            match self.assign[n.index()] {
                Some(b) => {
                    cur = if skip_host && b == self.cpu {
                        None
                    } else {
                        Some(b)
                    }
                }
                None => {
                    if let Some(c) = cur {
                        if self.sup(c, n) {
                            self.assign[n.index()] = Some(c);
                        }
                    }
                }
            }
        }
    }
}

/// Plan a graph: assignment, splits, inputs and memory.
pub(crate) fn make_plan(g: &Graph, env: &Env<'_>, key: Vec<u64>) -> Result<Plan, SchedError> {
    let nb = env.backends.len();
    let nodes: Vec<TensorId> = g.nodes().to_vec();
    let mut p = Planner {
        g,
        env,
        nb,
        cpu: nb - 1,
        sup: vec![0; g.len()],
        assign: vec![None; g.len()],
        own_backend: vec![None; g.len()],
    };
    for &n in &nodes {
        if g.tensor(n).op.is_view() {
            continue;
        }
        for b in 0..nb {
            if env.backends[b].supports_op(g, n) {
                p.sup[n.index()] |= 1 << b;
            }
        }
    }

    // 1. weights and caller memory
    p.pass_weights(&nodes)?;
    // 2. neighbours: devices down and up, then all down and up
    let rev: Vec<TensorId> = nodes.iter().rev().copied().collect();
    p.expand(&nodes, true);
    p.expand(&rev, true);
    p.expand(&nodes, false);
    p.expand(&rev, false);
    // 3. the rest: the highest-priority backend that supports the node
    for &n in &nodes {
        if g.tensor(n).op.is_view() || p.assign[n.index()].is_some() {
            continue;
        }
        let b = (0..nb)
            .find(|&b| p.sup(b, n))
            .ok_or_else(|| unsupported(g, n, String::new()))?;
        p.assign[n.index()] = Some(b);
    }

    // 4. memory homes: nodes compute into their backend's memory, inputs
    // live in host memory, other leafs where they are first used; in-place
    // writes into our memory run where that memory is
    for &n in &nodes {
        let t = g.tensor(n);
        if !t.op.is_view() && t.view_src.is_none() && p.foreign(n).is_none() {
            p.own_backend[n.index()] = p.assign[n.index()];
        }
    }
    for &n in &nodes {
        let t = g.tensor(n);
        if t.op.is_view() {
            continue;
        }
        let mut b = p.assign[n.index()].unwrap_or(p.cpu);
        if t.view_src.is_some() {
            let h = p.holder(n);
            if p.foreign(h).is_none() {
                let home = match p.own_backend[h.index()] {
                    Some(hb) => hb,
                    None => {
                        let hb = if g.tensor(h).flags.input { p.cpu } else { b };
                        p.own_backend[h.index()] = Some(hb);
                        hb
                    }
                };
                if home != b {
                    if !p.sup(home, n) {
                        return Err(unsupported(
                            g,
                            n,
                            format!(": it writes into memory on {}", env.backends[home].name()),
                        ));
                    }
                    p.assign[n.index()] = Some(home);
                    b = home;
                }
            }
        }
        let srcs: Vec<TensorId> = p.reads(n).map(|(_, s)| s).collect();
        for s in srcs {
            let h = p.holder(s);
            if p.foreign(h).is_none() && p.own_backend[h.index()].is_none() {
                let hb = if g.tensor(h).flags.input { p.cpu } else { b };
                p.own_backend[h.index()] = Some(hb);
            }
        }
    }
    // views: where their memory is
    let mut assign = Vec::with_capacity(nodes.len());
    for &n in &nodes {
        let b = if g.tensor(n).op.is_view() {
            let b = p.mem_backend(n)?;
            p.assign[n.index()] = Some(b);
            b
        } else {
            p.assign[n.index()].unwrap_or(p.cpu)
        };
        assign.push((n, b));
    }

    // 5. splits: where the backend changes, and before a node that reads a
    // weight its backend cannot use
    let mut splits: Vec<SplitPlan> = Vec::new();
    for &n in &nodes {
        if g.tensor(n).op.is_view() {
            continue;
        }
        let b = p.assign[n.index()].unwrap_or(p.cpu);
        let foreign_weight = p.reads(n).any(|(_, s)| p.is_weight(s) && !p.can_use(b, s));
        let start = match splits.last() {
            None => true,
            Some(sp) => sp.backend != b || (foreign_weight && !sp.nodes.is_empty()),
        };
        if start {
            splits.push(SplitPlan {
                backend: b,
                nodes: Vec::new(),
                inputs: Vec::new(),
                rewires: Vec::new(),
            });
        }
        if let Some(sp) = splits.last_mut() {
            sp.nodes.push(n);
        }
    }

    // 6. inputs: a copy for each source a split's backend cannot use; copies
    // reused by later splits while their source is unchanged (host weights
    // are offered to the hook again in every split that reads them)
    let mut copies: Vec<CopyPlan> = Vec::new();
    let mut version: HashMap<TensorId, usize> = HashMap::new();
    let mut valid: HashMap<(TensorId, usize), (usize, Option<usize>)> = HashMap::new();
    for (si, sp) in splits.iter_mut().enumerate() {
        let b = sp.backend;
        let mut local: HashMap<TensorId, usize> = HashMap::new();
        for &n in &sp.nodes {
            let srcs: Vec<(usize, TensorId)> = p.reads(n).collect();
            for (j, s) in srcs {
                if p.can_use(b, s) {
                    continue;
                }
                let slot = match local.get(&s) {
                    Some(&slot) => slot,
                    None => {
                        let h = p.holder(s);
                        let hw = p.is_host_weight(s);
                        let ver = version.get(&h).copied();
                        let reuse = if hw {
                            None
                        } else {
                            valid
                                .get(&(s, b))
                                .filter(|(_, v)| *v == ver)
                                .map(|&(slot, _)| slot)
                        };
                        let (slot, copied) = match reuse {
                            Some(slot) => (slot, false),
                            None => {
                                let t = g.tensor(s);
                                copies.push(CopyPlan {
                                    src: s,
                                    backend: b,
                                    name: format!(
                                        "{}#{}#{}",
                                        env.backends[b].name(),
                                        node_name(g, s),
                                        si
                                    ),
                                    ty: t.ty,
                                    ne: t.ne,
                                    nb: t.nb,
                                });
                                let slot = copies.len() - 1;
                                if !hw {
                                    valid.insert((s, b), (slot, ver));
                                }
                                (slot, true)
                            }
                        };
                        sp.inputs.push(InputPlan {
                            src: s,
                            slot,
                            host_weight: hw,
                            copied,
                            src_backend: p.mem_backend(s)?,
                        });
                        local.insert(s, slot);
                        slot
                    }
                };
                sp.rewires.push((n, j, slot));
            }
            version.insert(p.holder(n), si);
        }
    }

    // 7. memory
    let overhang: Vec<usize> = env.backends.iter().map(|b| b.read_overhang()).collect();
    let (allocs, buf_sizes) = plan_memory(g, env, &p.own_backend, &splits, &copies, &overhang);

    Ok(Plan {
        key,
        assign,
        splits,
        copies,
        allocs,
        buf_sizes,
    })
}
