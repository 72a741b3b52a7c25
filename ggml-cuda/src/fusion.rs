//! Which nodes of a split the CUDA backend runs as one fused kernel, found
//! by matching the graph (llama.cpp's `ggml_cuda_can_fuse`): the decode MoE
//! FFN that `llama`'s `moe_ffn` / `moe_experts` build.
//!
//! - [`Fused::ExpertGlu`]: `up = mul_mat_id(U, x, ids)` and `gate =
//!   mul_mat_id(G, x, ids)` (each optionally `add_id`'s per-expert bias)
//!   into `glu_split(gate, up)`: `k_mmvq_id_glu`.
//! - [`Fused::ExpertDown`]: `mul_mat_id(D, par, ids)` (optionally its
//!   bias) times the router weights, summed over the slots by the chain of
//!   `add`s of views: `k_mmvq_id_down`.
//!
//! A pattern fuses only when every intermediate node is in the split, is
//! read by nothing but the next node of the pattern, and is not a graph
//! output (the node dump marks named nodes as outputs, which turns fusion
//! off for them); and only for decode shapes with quantized weights whose
//! activations share one quantization. The fused step runs where the
//! pattern's last node stood; the other nodes of the pattern are skipped.
//! `GGML_CUDA_DISABLE_FUSION=1` turns every fusion off.
//!
//! Data flow: `CudaBackend::compute` asks [`plan`] for the split's steps,
//! then runs each node or fused step (`backend.rs`).

use std::collections::{HashMap, HashSet};

use ggml_core::op::GluOp;
use ggml_core::{GgmlType, Graph, Op, TensorId};

/// Tokens up to which the gate/up fusion applies (MMVQ's columns).
const GLU_MAX_TOKENS: i64 = 8;

/// A per-expert bias: `add_id(_, bias, sel)`'s `bias` [n, n_expert] F32
/// and its ids `sel` (the router's selection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bias {
    /// The bias rows.
    pub bias: TensorId,
    /// `add_id`'s ids.
    pub sel: TensorId,
}

/// One fused group of nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fused {
    /// Gate and up of the selected experts with the GLU.
    ExpertGlu {
        /// The `glu_split` node (written).
        glu: TensorId,
        /// Gate's and up's `mul_mat_id` nodes.
        gate: TensorId,
        /// See `gate`.
        up: TensorId,
        /// Gate's bias, if any.
        gate_bias: Option<Bias>,
        /// Up's bias, if any.
        up_bias: Option<Bias>,
        /// The GLU.
        op: GluOp,
    },
    /// Down of the selected experts, weighted and summed.
    ExpertDown {
        /// The last `add` of the sum (written).
        out: TensorId,
        /// Down's `mul_mat_id`.
        down: TensorId,
        /// Down's bias, if any.
        bias: Option<Bias>,
        /// The router weights [1, n_used, n_tokens].
        weights: TensorId,
    },
}

impl Fused {
    /// The fused kernel's name, for timelines.
    pub fn name(&self) -> &'static str {
        match self {
            Fused::ExpertGlu { .. } => "k_mmvq_id_glu",
            Fused::ExpertDown { .. } => "k_mmvq_id_down",
        }
    }

    /// The node the fused step writes.
    pub fn output(&self) -> TensorId {
        match *self {
            Fused::ExpertGlu { glu, .. } => glu,
            Fused::ExpertDown { out, .. } => out,
        }
    }
}

/// The names of a fused group's named nodes, joined by `+` (the timeline
/// names a fused kernel's span `k_... ffn_moe_gate-0+ffn_moe_up-0`, so a
/// reader finds each node it stands for and its layer).
pub fn label(g: &Graph, nodes: &[TensorId]) -> String {
    let names: Vec<&str> = nodes
        .iter()
        .map(|&n| g.tensor(n).name.as_str())
        .filter(|n| !n.is_empty())
        .collect();
    names.join("+")
}

/// One step of a split: a node, or a fused group standing for several.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A node on its own.
    Node(TensorId),
    /// A fused group; `nodes` are every node it stands for, in split order.
    Fused {
        /// What runs.
        fused: Fused,
        /// The nodes it replaces (the last one is where it runs).
        nodes: Vec<TensorId>,
    },
}

/// Whether fusion is off (`GGML_CUDA_DISABLE_FUSION` set to anything but
/// `0`), read once.
pub fn disabled() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| std::env::var("GGML_CUDA_DISABLE_FUSION").is_ok_and(|v| v != "0"))
}

/// Readers of each tensor among the graph's nodes.
struct Readers(HashMap<TensorId, Vec<TensorId>>);

impl Readers {
    fn of(g: &Graph) -> Readers {
        let mut m: HashMap<TensorId, Vec<TensorId>> = HashMap::new();
        for &n in g.nodes() {
            for &s in &g.tensor(n).src {
                let r = m.entry(s).or_default();
                if !r.contains(&n) {
                    r.push(n);
                }
            }
        }
        Readers(m)
    }

    fn get(&self, t: TensorId) -> &[TensorId] {
        self.0.get(&t).map(|v| v.as_slice()).unwrap_or(&[])
    }

    /// The only reader of `t`, when there is exactly one.
    fn only(&self, t: TensorId) -> Option<TensorId> {
        match self.get(t) {
            [r] => Some(*r),
            _ => None,
        }
    }
}

/// The activation quantization group of a weight type (as `backend.rs`).
fn q8_group(ty: GgmlType) -> Option<i32> {
    use GgmlType as T;
    match ty {
        T::Q2K | T::Q3K | T::Q4K | T::Q5K | T::Q6K | T::IQ4XS => Some(256),
        T::Q4_0 | T::Q5_0 | T::Q8_0 | T::IQ4NL | T::MXFP4 => Some(32),
        // Q4_1 / Q5_1 (Q8_1 sums), floats: not fused
        _ => None,
    }
}

/// The split's steps: every node in order, with the fusable groups
/// replaced by one step each.
pub fn plan(g: &Graph, nodes: &[TensorId]) -> Vec<Step> {
    if disabled() || !nodes.iter().any(|&n| g.tensor(n).op == Op::MulMatId) {
        return nodes.iter().map(|&n| Step::Node(n)).collect();
    }
    let readers = Readers::of(g);
    let in_split: HashSet<TensorId> = nodes.iter().copied().collect();
    let mut groups: Vec<(Fused, Vec<TensorId>)> = Vec::new();
    let mut taken: HashSet<TensorId> = HashSet::new();
    for &n in nodes {
        let found = match g.tensor(n).op {
            Op::Glu { .. } => match_glu(g, n, &readers),
            Op::MulMatId => match_down(g, n, &readers),
            _ => None,
        };
        let Some((fused, members)) = found else {
            continue;
        };
        let ok = members
            .iter()
            .all(|m| in_split.contains(m) && !taken.contains(m))
            && members
                .iter()
                .all(|&m| m == fused.output() || !g.tensor(m).flags.output);
        if ok {
            taken.extend(members.iter().copied());
            groups.push((fused, members));
        }
    }
    let mut steps = Vec::with_capacity(nodes.len());
    for &n in nodes {
        if let Some((fused, members)) = groups.iter().find(|(f, _)| f.output() == n) {
            let order: Vec<TensorId> = nodes
                .iter()
                .copied()
                .filter(|x| members.contains(x))
                .collect();
            steps.push(Step::Fused {
                fused: fused.clone(),
                nodes: order,
            });
        } else if !taken.contains(&n) {
            steps.push(Step::Node(n));
        }
    }
    steps
}

/// A decode `mul_mat_id` with quantized weights MMVQ serves: its weight
/// type's activation group.
fn decode_mmid(g: &Graph, m: TensorId, max_tokens: i64) -> Option<i32> {
    let t = g.tensor(m);
    if t.op != Op::MulMatId || t.ty != GgmlType::F32 || t.ne[2] > max_tokens {
        return None;
    }
    let (w, b, ids) = (g.tensor(t.src[0]), g.tensor(t.src[1]), g.tensor(t.src[2]));
    if !w.rows_contiguous() || !matches!(b.ty, GgmlType::F32) || ids.ty != GgmlType::I32 {
        return None;
    }
    q8_group(w.ty)
}

/// `add_id(m, bias, sel)` over `m` (its only reader) with an F32 bias of
/// dense rows, or `m` itself.
fn through_bias(g: &Graph, m: TensorId, readers: &Readers) -> (TensorId, Option<Bias>) {
    if let Some(r) = readers.only(m) {
        let t = g.tensor(r);
        if t.op == Op::AddId && t.src[0] == m && t.ty == GgmlType::F32 {
            let (b, s) = (g.tensor(t.src[1]), g.tensor(t.src[2]));
            if b.ty == GgmlType::F32 && b.nb[0] == 4 && s.ty == GgmlType::I32 {
                return (
                    r,
                    Some(Bias {
                        bias: t.src[1],
                        sel: t.src[2],
                    }),
                );
            }
        }
    }
    (m, None)
}

/// `glu_split(gate, up)` at `glu` over two decode `mul_mat_id`s of the
/// same activations and ids (each optionally through its bias).
fn match_glu(g: &Graph, glu: TensorId, readers: &Readers) -> Option<(Fused, Vec<TensorId>)> {
    let t = g.tensor(glu);
    let Op::Glu { op, swapped } = t.op else {
        return None;
    };
    if swapped || t.src.len() != 2 || t.ty != GgmlType::F32 {
        return None;
    }
    // each side: mul_mat_id, or add_id of it
    let side = |v: TensorId| -> Option<(TensorId, Option<Bias>, Vec<TensorId>)> {
        let vt = g.tensor(v);
        let (m, bias) = if vt.op == Op::AddId {
            let m = vt.src[0];
            let (top, bias) = through_bias(g, m, readers);
            (top == v && bias.is_some()).then_some(())?;
            (m, bias)
        } else {
            (v, None)
        };
        let mut members = vec![m];
        if m != v {
            members.push(v);
        }
        let chain = m == v || readers.only(m) == Some(v);
        (chain && readers.only(v) == Some(glu)).then_some((m, bias, members))
    };
    let (gate, gate_bias, mut members) = side(t.src[0])?;
    let (up, up_bias, up_members) = side(t.src[1])?;
    let (gt, ut) = (g.tensor(gate), g.tensor(up));
    let ga = decode_mmid(g, gate, GLU_MAX_TOKENS)?;
    let ua = decode_mmid(g, up, GLU_MAX_TOKENS)?;
    let same_acts = ga == ua && gt.src[1] == ut.src[1] && gt.src[2] == ut.src[2];
    let same_shape = gt.ne == ut.ne && gt.ne == t.ne;
    let one_sel = match (gate_bias, up_bias) {
        (Some(a), Some(b)) => a.sel == b.sel,
        _ => true,
    };
    if !same_acts || !same_shape || gate == up || !one_sel {
        return None;
    }
    members.extend(up_members);
    members.push(glu);
    Some((
        Fused::ExpertGlu {
            glu,
            gate,
            up,
            gate_bias,
            up_bias,
            op,
        },
        members,
    ))
}

/// Down's `mul_mat_id` at `m` for one token, (its bias,) times the router
/// weights, summed over the slots by `add`s of views.
fn match_down(g: &Graph, m: TensorId, readers: &Readers) -> Option<(Fused, Vec<TensorId>)> {
    decode_mmid(g, m, 1)?;
    let mt = g.tensor(m);
    let (n_embd, n_used, n_tok) = (mt.ne[0], mt.ne[1], mt.ne[2]);
    if n_used < 2 {
        return None;
    }
    let mut members = vec![m];
    let (c, bias) = through_bias(g, m, readers);
    if c != m {
        members.push(c);
    }
    // mul(c, weights [1, n_used, n_tok])
    let w = readers.only(c)?;
    let wt = g.tensor(w);
    if wt.op != Op::Mul || wt.src[0] != c || wt.ne != mt.ne || wt.ty != GgmlType::F32 {
        return None;
    }
    let weights = wt.src[1];
    let rt = g.tensor(weights);
    if rt.ty != GgmlType::F32 || rt.ne != [1, n_used, n_tok, 1] {
        return None;
    }
    members.push(w);
    // the views of each slot, then add(v0, v1), add(s, v2), ...
    let views = readers.get(w);
    if views.len() as i64 != n_used {
        return None;
    }
    let mut slot_view = vec![None; n_used as usize];
    for &v in views {
        let vt = g.tensor(v);
        let ok = vt.op == Op::View
            && vt.view_src == Some(w)
            && vt.ne == [n_embd, n_tok, 1, 1]
            && vt.nb[1] == wt.nb[2]
            && vt.view_offs.is_multiple_of(wt.nb[1]);
        if !ok {
            return None;
        }
        let i = vt.view_offs / wt.nb[1];
        if i >= n_used as usize || slot_view[i].is_some() {
            return None;
        }
        slot_view[i] = Some(v);
    }
    let slot_view: Vec<TensorId> = slot_view.into_iter().collect::<Option<Vec<_>>>()?;
    members.extend(slot_view.iter().copied());
    let mut acc = slot_view[0];
    for (i, &v) in slot_view.iter().enumerate().skip(1) {
        let s = readers.only(acc)?;
        let st = g.tensor(s);
        let ok = st.op == Op::Add
            && st.src[0] == acc
            && st.src[1] == v
            && readers.only(v) == Some(s)
            && st.ty == GgmlType::F32
            && st.ne == [n_embd, n_tok, 1, 1];
        if !ok || (i == 1 && readers.only(slot_view[0]) != Some(s)) {
            return None;
        }
        members.push(s);
        acc = s;
    }
    Some((
        Fused::ExpertDown {
            out: acc,
            down: m,
            bias,
            weights,
        },
        members,
    ))
}
