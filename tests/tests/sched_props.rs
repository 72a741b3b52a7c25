//! Property tests of the backend scheduler (`ggml-sched`) over the CPU and
//! one or two simulated devices.
//!
//! Random graphs (chains and DAGs of the ops the CPU kernels implement at the
//! time: the generator asks `supports_op` and skips the rest), weights placed
//! at random in host memory or on the devices, random op support per device
//! and random offload thresholds. Each scheduled result must equal the same
//! graph computed on one CPU backend bit for bit, and every plan must satisfy
//! the scheduler's invariants. `PROPTEST_CASES=N` runs more cases.

mod peer_race;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ggml_core::backend::{BackendDevice, BackendError, BackendStream, Buffer, BufferUsage, Event};
use ggml_core::cpu::MappedBuffer;
use ggml_core::{
    Backend, CpuBackend, GgmlType, Graph, Op, SimBackend, SimClock, SimProfile, TensorData,
    TensorId,
};
use ggml_sched::{CopyHook, HookCtx, HookError, SchedError, Scheduler};
use proptest::prelude::*;

// ----- the generated case ----------------------------------------------------

/// What one generated step does; operands are picked modulo what exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Add,
    Sub,
    Mul,
    Div,
    Scale,
    MulMat,
    MulMatId,
    GetRows,
    Transpose,
    Reshape,
    Cpy,
    SetRows,
}

const KINDS: [Kind; 12] = [
    Kind::Add,
    Kind::Sub,
    Kind::Mul,
    Kind::Div,
    Kind::Scale,
    Kind::MulMat,
    Kind::MulMatId,
    Kind::GetRows,
    Kind::Transpose,
    Kind::Reshape,
    Kind::Cpy,
    Kind::SetRows,
];

#[derive(Clone, Copy, Debug)]
struct Step {
    kind: Kind,
    a: u8,
    b: u8,
    place: u8,
    p: u8,
}

/// A simulated device of the case.
#[derive(Clone, Debug)]
struct Dev {
    /// Ops this device refuses (on top of what the kernels lack).
    refuse: Vec<&'static str>,
    /// `with_offload_min_batch`.
    min_batch: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HookKind {
    None,
    Decline,
    Full,
    Ranges,
}

#[derive(Clone)]
struct Case {
    k: i64,
    t: i64,
    n_exp: i64,
    n_used: i64,
    devs: Vec<Dev>,
    cache_place: [u8; 2],
    n_inputs: u8,
    steps: Vec<Step>,
    n_out: u8,
    hook: HookKind,
    seed: u64,
    /// The shared simulated clock's profile: copy engines and random costs.
    sim: SimCase,
}

/// Random timing of a case's simulated clock (shared by every backend).
#[derive(Clone, Debug)]
struct SimCase {
    copy_engines: usize,
    /// Exponents/multipliers picking device, CPU and link speeds.
    costs: [u8; 6],
}

impl SimCase {
    fn profile(&self) -> SimProfile {
        let c = self.costs;
        let mut p = SimProfile::default_profile();
        let rate = |b: u8, base: f64| base * (1.0 + (b % 16) as f64) / 4.0;
        p.device.flops = rate(c[0], 1e9);
        p.device.mem_bw = rate(c[1], 1e8);
        p.device.launch_s = (c[2] % 4) as f64 * 1e-7;
        p.link.h2d_bw = rate(c[3], 1e8);
        p.link.d2h_bw = rate(c[3] / 16, 1e8);
        p.link.latency_s = (c[4] % 4) as f64 * 1e-7;
        p.cpu.flops = rate(c[5], 1e9);
        p.cpu.mem_bw = rate(c[5] / 16, 1e8);
        p.copy_engines = self.copy_engines;
        p
    }
}

/// Where a leaf's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Loc {
    /// Host weights (a read-only mapped buffer).
    HostW,
    /// Host compute memory (caches; weights flagged `weight` there).
    HostC,
    /// Device weights.
    DevW(usize),
    /// Device compute memory (caches).
    DevC(usize),
}

impl Case {
    fn weight_loc(&self, place: u8) -> Loc {
        match place as usize % (3 + self.devs.len()) {
            0 | 1 => Loc::HostW,
            2 => Loc::HostC,
            d => Loc::DevW(d - 3),
        }
    }
    fn cache_loc(&self, c: usize) -> Loc {
        match self.cache_place[c] as usize % (1 + self.devs.len()) {
            0 => Loc::HostC,
            d => Loc::DevC(d - 1),
        }
    }
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpu = CpuBackend::new(1);
        let b = build(self, &cpu, true);
        writeln!(
            f,
            "Case {{ k: {}, t: {}, n_exp: {}, n_used: {}, hook: {:?}, seed: {} }}",
            self.k, self.t, self.n_exp, self.n_used, self.hook, self.seed
        )?;
        for (i, d) in self.devs.iter().enumerate() {
            writeln!(
                f,
                "  SIM{i}: offload_min_batch {}, refuses {:?}",
                d.min_batch, d.refuse
            )?;
        }
        for l in &b.listing {
            writeln!(f, "  {l}")?;
        }
        // everything else, so that a failure can be rebuilt as a fixed case
        writeln!(
            f,
            "  cache_place {:?}, n_inputs {}, n_out {}, sim {:?}\n  steps {:?}",
            self.cache_place, self.n_inputs, self.n_out, self.sim, self.steps
        )?;
        Ok(())
    }
}

// ----- building graphs from a case -------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn val(&mut self) -> f32 {
        [-2.0, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0][self.below(8) as usize]
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn values(rng: &mut Rng, ty: GgmlType, n: usize) -> Vec<u8> {
    let v: Vec<f32> = (0..n).map(|_| rng.val()).collect();
    match ty {
        GgmlType::F16 => v
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect(),
        _ => f32_bytes(&v),
    }
}

/// A graph built from a case, with what the test must write and read.
struct Built {
    g: Graph,
    /// Leafs with caller-set memory: (tensor, where, bytes).
    leaves: Vec<(TensorId, Loc, Vec<u8>)>,
    /// Graph inputs (no memory until the scheduler gives them some).
    inputs: Vec<(TensorId, Vec<u8>)>,
    /// Caches, reset to these bytes before every compute.
    caches: Vec<(TensorId, Vec<u8>)>,
    outputs: Vec<TensorId>,
    listing: Vec<String>,
}

/// Build the case's graph. `reference`: every leaf in host memory.
fn build(case: &Case, cpu: &CpuBackend, reference: bool) -> Built {
    let (k, t) = (case.k, case.t);
    let mut rng = Rng(case.seed);
    let mut g = Graph::new();
    let mut b = Built {
        g: Graph::new(),
        leaves: Vec::new(),
        inputs: Vec::new(),
        caches: Vec::new(),
        outputs: Vec::new(),
        listing: Vec::new(),
    };
    let mut acts: Vec<TensorId> = Vec::new();
    let mut caches: [Option<TensorId>; 2] = [None, None];

    let mut n_leaf = 0;
    let mut leaf = |g: &mut Graph,
                    b: &mut Built,
                    rng: &mut Rng,
                    ty: GgmlType,
                    ne: &[i64],
                    loc: Option<Loc>,
                    ints: Option<Vec<i32>>|
     -> TensorId {
        let id = g.new_tensor(ty, ne);
        n_leaf += 1;
        let n = g.tensor(id).nelements() as usize;
        let bytes = match &ints {
            Some(v) => i32_bytes(v),
            None => values(rng, ty, n),
        };
        match loc {
            None => {
                g.set_name(id, format!("in{n_leaf}"));
                g.set_input(id);
                if reference {
                    b.leaves.push((id, Loc::HostC, bytes.clone()));
                }
                b.inputs.push((id, bytes));
            }
            Some(l) => {
                g.set_name(id, format!("w{n_leaf}"));
                g.tensor_mut(id).flags.weight = true;
                let l = match (reference, l) {
                    (true, Loc::DevW(_)) => Loc::HostW,
                    (true, Loc::DevC(_)) => Loc::HostC,
                    (_, l) => l,
                };
                b.leaves.push((id, l, bytes));
            }
        }
        id
    };

    for _ in 0..case.n_inputs.max(1) {
        let x = leaf(&mut g, &mut b, &mut rng, GgmlType::F32, &[k, t], None, None);
        b.listing.push(format!("{x:?} = input [{k}, {t}]"));
        acts.push(x);
    }

    for (si, st) in case.steps.iter().enumerate() {
        let pick = |i: u8| acts[i as usize % acts.len()];
        let contiguous: Vec<TensorId> = acts
            .iter()
            .copied()
            .filter(|&a| g.tensor(a).is_contiguous() && g.tensor(a).ty == GgmlType::F32)
            .collect();
        let first_new = g.len();
        let x = pick(st.a);
        let wloc = case.weight_loc(st.place);
        let wty = if st.p & 4 != 0 {
            GgmlType::F16
        } else {
            GgmlType::F32
        };
        let mut expand = None;
        let (out, desc): (Option<TensorId>, String) = match st.kind {
            Kind::Add | Kind::Sub | Kind::Mul | Kind::Div => {
                let (y, yd) = match st.p % 4 {
                    0 => (pick(st.b), format!("{:?}", pick(st.b))),
                    1 => {
                        let w = leaf(
                            &mut g,
                            &mut b,
                            &mut rng,
                            GgmlType::F32,
                            &[k],
                            Some(wloc),
                            None,
                        );
                        (w, format!("{w:?}=weight[{k}]@{wloc:?}"))
                    }
                    2 => {
                        let w = leaf(
                            &mut g,
                            &mut b,
                            &mut rng,
                            GgmlType::F32,
                            &[k, t],
                            Some(wloc),
                            None,
                        );
                        (w, format!("{w:?}=weight[{k},{t}]@{wloc:?}"))
                    }
                    _ => {
                        let src = pick(st.b);
                        let nb1 = g.tensor(src).nb[1];
                        let v = g.view_2d(src, k / 2, t, nb1, 0);
                        (v, format!("{v:?}=view_2d({src:?}, {}, {t})", k / 2))
                    }
                };
                let r = match st.kind {
                    Kind::Add => g.add(x, y),
                    Kind::Sub => g.sub(x, y),
                    Kind::Mul => g.mul(x, y),
                    _ => g.div(x, y),
                };
                (Some(r), format!("{:?}({x:?}, {yd})", st.kind))
            }
            Kind::Scale => {
                let s = [0.5, 2.0, -1.0, 1.5][st.p as usize % 4];
                (Some(g.scale(x, s)), format!("scale({x:?}, {s})"))
            }
            Kind::MulMat => {
                let w = leaf(&mut g, &mut b, &mut rng, wty, &[k, k], Some(wloc), None);
                (
                    Some(g.mul_mat(w, x)),
                    format!("mul_mat({w:?}=weight {wty}[{k},{k}]@{wloc:?}, {x:?})"),
                )
            }
            Kind::MulMatId => {
                if contiguous.is_empty() {
                    (None, "mul_mat_id: no contiguous operand".into())
                } else {
                    let x = contiguous[st.a as usize % contiguous.len()];
                    let (e, u) = (case.n_exp, case.n_used);
                    let w = leaf(&mut g, &mut b, &mut rng, wty, &[k, k, e], Some(wloc), None);
                    let ids: Vec<i32> = (0..u * t).map(|_| rng.below(e as u64) as i32).collect();
                    let idt = leaf(
                        &mut g,
                        &mut b,
                        &mut rng,
                        GgmlType::I32,
                        &[u, t],
                        None,
                        Some(ids.clone()),
                    );
                    let xr = g.reshape_3d(x, k, 1, t);
                    let r = g.mul_mat_id(w, xr, idt);
                    let j = st.p as i64 % u;
                    let (nb1, nb2) = (g.tensor(r).nb[1], g.tensor(r).nb[2]);
                    let v = g.view_2d(r, k, t, nb2, j as usize * nb1);
                    (
                        Some(v),
                        format!(
                            "view slot {j} of mul_mat_id({w:?}=weight {wty}[{k},{k},{e}]@{wloc:?}, reshape({x:?}), {idt:?}=ids{ids:?})"
                        ),
                    )
                }
            }
            Kind::GetRows => {
                let rows = t + 3;
                let w = leaf(&mut g, &mut b, &mut rng, wty, &[k, rows], Some(wloc), None);
                let ids: Vec<i32> = (0..t).map(|_| rng.below(rows as u64) as i32).collect();
                let idt = leaf(
                    &mut g,
                    &mut b,
                    &mut rng,
                    GgmlType::I32,
                    &[t],
                    None,
                    Some(ids.clone()),
                );
                (
                    Some(g.get_rows(w, idt)),
                    format!(
                        "get_rows({w:?}=weight {wty}[{k},{rows}]@{wloc:?}, {idt:?}=ids{ids:?})"
                    ),
                )
            }
            Kind::Transpose => {
                let tr = |g: &mut Graph, a| {
                    if st.p % 2 == 0 {
                        g.transpose(a)
                    } else {
                        g.permute(a, [1, 0, 2, 3])
                    }
                };
                let a = tr(&mut g, x);
                let c = g.cont(a);
                let a2 = tr(&mut g, c);
                (
                    Some(g.cont(a2)),
                    format!("cont(transpose(cont(transpose({x:?}))))"),
                )
            }
            Kind::Reshape => {
                if contiguous.is_empty() {
                    (None, "reshape: no contiguous operand".into())
                } else {
                    let x = contiguous[st.a as usize % contiguous.len()];
                    let r = g.reshape_3d(x, k, 1, t);
                    (
                        Some(g.reshape_2d(r, k, t)),
                        format!("reshape(reshape({x:?}))"),
                    )
                }
            }
            Kind::Cpy | Kind::SetRows => {
                let c = st.p as usize % 2;
                let cty = if c == 0 { GgmlType::F32 } else { GgmlType::F16 };
                let cache = match caches[c] {
                    Some(id) => id,
                    None => {
                        let loc = case.cache_loc(c);
                        let id = leaf(&mut g, &mut b, &mut rng, cty, &[k, 2 * t], Some(loc), None);
                        g.tensor_mut(id).flags.weight = false;
                        g.set_name(id, format!("cache{c}"));
                        let init = b.leaves.last().map(|l| l.2.clone()).unwrap_or_default();
                        b.caches.push((id, init));
                        b.listing
                            .push(format!("{id:?} = cache{c} {cty}[{k},{}]@{loc:?}", 2 * t));
                        caches[c] = Some(id);
                        id
                    }
                };
                let nb1 = g.tensor(cache).nb[1];
                if st.kind == Kind::Cpy {
                    let off = (st.p as usize / 2 % 2) * t as usize * nb1;
                    let dst = g.view_2d(cache, k, t, nb1, off);
                    let n = g.cpy(x, dst);
                    expand = Some(n);
                    (Some(n), format!("cpy({x:?}, view of {cache:?} at {off})"))
                } else if g.tensor(x).ty != GgmlType::F32 {
                    (None, "set_rows: operand not F32".into())
                } else {
                    let mut rows: Vec<i32> = (0..2 * t as i32).collect();
                    for i in (1..rows.len()).rev() {
                        rows.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                    rows.truncate(t as usize);
                    let idx = leaf(
                        &mut g,
                        &mut b,
                        &mut rng,
                        GgmlType::I32,
                        &[t],
                        None,
                        Some(rows.clone()),
                    );
                    let n = g.set_rows(cache, x, idx);
                    expand = Some(n);
                    let ids: Vec<i32> = (0..t).map(|_| rng.below(2 * t as u64) as i32).collect();
                    let idt = leaf(
                        &mut g,
                        &mut b,
                        &mut rng,
                        GgmlType::I32,
                        &[t],
                        None,
                        Some(ids.clone()),
                    );
                    let r = g.get_rows(n, idt);
                    let r = if cpu.supports_op(&g, r) {
                        r
                    } else {
                        g.view_2d(n, k, t, nb1, 0)
                    };
                    (
                        Some(r),
                        format!(
                            "rows of set_rows({cache:?}, {x:?}, {idx:?}=rows{rows:?}) by {idt:?}=ids{ids:?}"
                        ),
                    )
                }
            }
        };
        let Some(out) = out else {
            b.listing.push(format!("step {si}: skipped ({desc})"));
            continue;
        };
        let ok = (first_new..g.len())
            .map(|i| TensorId(i as u32))
            .filter(|&id| g.tensor(id).op != Op::None)
            .all(|id| cpu.supports_op(&g, id));
        if !ok {
            b.listing
                .push(format!("step {si}: skipped, CPU lacks a kernel: {desc}"));
            continue;
        }
        if let Some(e) = expand {
            g.build_forward_expand(e);
        }
        g.set_name(out, format!("v{si}"));
        b.listing.push(format!("{out:?} = {desc}"));
        acts.push(out);
    }
    if acts.iter().all(|&a| g.tensor(a).op == Op::None) {
        let x = acts[0];
        let r = g.add(x, x);
        g.set_name(r, "v_last");
        b.listing.push(format!("{r:?} = Add({x:?}, {x:?})"));
        acts.push(r);
    }
    let acts: Vec<TensorId> = acts
        .into_iter()
        .filter(|&a| g.tensor(a).op != Op::None)
        .collect();
    let n_out = (case.n_out as usize).clamp(1, acts.len());
    for &o in acts.iter().rev().take(n_out) {
        g.set_output(o);
        g.build_forward_expand(o);
        b.outputs.push(o);
    }
    b.listing.push(format!("outputs {:?}", b.outputs));
    b.g = g;
    b
}

/// Buffers holding the leafs of one placement, by location.
struct Store {
    bufs: Vec<(Loc, Arc<dyn Buffer>)>,
}

fn place(b: &mut Built, backends: &[Arc<dyn Backend>], store: Option<&Store>) -> Store {
    let cpu = backends.last().expect("cpu").clone();
    let mut locs: Vec<Loc> = b.leaves.iter().map(|l| l.1).collect();
    locs.sort();
    locs.dedup();
    let mut bufs = Vec::new();
    for loc in locs {
        let mut off = 0;
        let mut offs = Vec::new();
        for (id, l, bytes) in &b.leaves {
            if *l == loc {
                offs.push((*id, off, bytes));
                off += bytes.len().next_multiple_of(64);
            }
        }
        let buf: Arc<dyn Buffer> = match store.and_then(|s| s.bufs.iter().find(|x| x.0 == loc)) {
            Some((_, buf)) => buf.clone(),
            None => match loc {
                Loc::HostW => {
                    let mut all = vec![0u8; off.max(1)];
                    for (_, o, bytes) in &offs {
                        all[*o..*o + bytes.len()].copy_from_slice(bytes);
                    }
                    Arc::new(MappedBuffer::new(Arc::new(all)))
                }
                Loc::HostC => cpu.alloc_buffer(off.max(1), BufferUsage::Compute).unwrap(),
                Loc::DevW(d) => backends[d]
                    .alloc_buffer(off.max(1), BufferUsage::Weights)
                    .unwrap(),
                Loc::DevC(d) => backends[d]
                    .alloc_buffer(off.max(1), BufferUsage::Compute)
                    .unwrap(),
            },
        };
        for (id, o, bytes) in offs {
            b.g.tensor_mut(id).data = Some(TensorData {
                buffer: buf.clone(),
                offset: o,
            });
            if loc != Loc::HostW {
                buf.write(o, bytes).unwrap();
            }
        }
        bufs.push((loc, buf));
    }
    Store { bufs }
}

type Results = Vec<Vec<u32>>;

fn read_results(b: &Built) -> Results {
    let mut r: Results = b
        .outputs
        .iter()
        .map(|&o| {
            b.g.read_f32(o)
                .unwrap()
                .iter()
                .map(|v| if v.is_nan() { u32::MAX } else { v.to_bits() })
                .collect()
        })
        .collect();
    for (c, _) in &b.caches {
        let raw = b.g.read_bytes(*c).unwrap();
        r.push(raw.iter().map(|&x| x as u32).collect());
    }
    r
}

fn reset(b: &Built) {
    for (c, init) in &b.caches {
        b.g.write_bytes(*c, init).unwrap();
    }
}

/// The same graph on one CPU backend, every tensor in one host buffer.
fn reference(case: &Case) -> Results {
    let cpu = CpuBackend::new(1);
    let mut b = build(case, &cpu, true);
    let cpu: Arc<dyn Backend> = Arc::new(cpu);
    place(&mut b, std::slice::from_ref(&cpu), None);
    let ids: Vec<TensorId> = b.g.ids().collect();
    let total: usize = ids
        .iter()
        .map(|&t| b.g.tensor(t).nbytes().next_multiple_of(64))
        .sum();
    let buf = cpu
        .alloc_buffer(total.max(1), BufferUsage::Compute)
        .unwrap();
    let mut off = 0;
    for id in ids {
        let t = b.g.tensor(id);
        if t.data.is_some() || t.view_src.is_some() {
            continue;
        }
        let n = t.nbytes().next_multiple_of(64);
        b.g.tensor_mut(id).data = Some(TensorData {
            buffer: buf.clone(),
            offset: off,
        });
        off += n;
    }
    for (id, bytes) in &b.inputs {
        b.g.write_bytes(*id, bytes).unwrap();
    }
    reset(&b);
    let nodes = b.g.nodes().to_vec();
    cpu.compute(&b.g, &nodes).unwrap();
    read_results(&b)
}

// ----- hooks ------------------------------------------------------------------

#[derive(Default)]
struct HookLog {
    /// (split, src, dst) per call.
    calls: Vec<(usize, TensorId, TensorId)>,
    graphs: usize,
    errors: Vec<String>,
}

struct TestHook {
    kind: HookKind,
    log: Arc<Mutex<HookLog>>,
}

fn read_i32(cx: &HookCtx<'_>, id: TensorId) -> Result<Vec<i32>, HookError> {
    let t = cx.graph().tensor(id);
    if t.ty != GgmlType::I32 || !t.is_contiguous() {
        return Err(HookError::msg("ids not contiguous I32"));
    }
    let raw = cx.read_tensor(id)?;
    Ok(raw
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The byte ranges of the destination the split's consumers read: the
/// experts named by a `mul_mat_id`'s ids, the rows named by a `get_rows`'s
/// ids; everything for any other consumer.
fn needed_ranges(cx: &HookCtx<'_>) -> Result<Vec<(usize, usize)>, HookError> {
    let g = cx.graph();
    let d = g.tensor(cx.dst());
    let total = cx.nbytes();
    let mut r = Vec::new();
    for c in cx.consumers() {
        let ct = g.tensor(c);
        match ct.op {
            Op::MulMatId if ct.src[0] == cx.dst() => {
                for e in read_i32(cx, ct.src[2])? {
                    if e < 0 || e as i64 >= d.ne[2] {
                        return Err(HookError::msg(format!("expert id {e} out of range")));
                    }
                    let s = e as usize * d.nb[2];
                    r.push((s, (s + d.nb[2]).min(total)));
                }
            }
            Op::GetRows if ct.src[0] == cx.dst() && d.ne[2] == 1 => {
                for row in read_i32(cx, ct.src[1])? {
                    if row < 0 || row as i64 >= d.ne[1] {
                        return Err(HookError::msg(format!("row {row} out of range")));
                    }
                    let s = row as usize * d.nb[1];
                    r.push((s, (s + d.row_size()).min(total)));
                }
            }
            _ => r.push((0, total)),
        }
    }
    r.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (s, e) in r {
        match merged.last_mut() {
            Some(l) if s <= l.1 => l.1 = l.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    Ok(merged)
}

impl CopyHook for TestHook {
    fn copy_input(&mut self, cx: &mut HookCtx<'_>) -> Result<bool, HookError> {
        let mut errors = Vec::new();
        // every other input of the split is already on the backend
        for inp in cx.inputs() {
            if !inp.host_weight && inp.copied {
                let (a, b) = (cx.read_tensor(inp.copy)?, cx.read_tensor(inp.src)?);
                if a != b {
                    errors.push(format!(
                        "split {}: input {:?} not copied before the hook ran",
                        cx.split_index(),
                        inp.src
                    ));
                }
            }
        }
        if cx.consumers().is_empty() {
            errors.push(format!(
                "split {}: no consumer of {:?}",
                cx.split_index(),
                cx.dst()
            ));
        }
        {
            let mut log = self.log.lock().unwrap();
            log.calls.push((cx.split_index(), cx.src(), cx.dst()));
            log.errors.extend(errors);
        }
        match self.kind {
            HookKind::None | HookKind::Decline => Ok(false),
            HookKind::Full => {
                let n = cx.nbytes();
                cx.copy_range(0, n)?;
                Ok(true)
            }
            HookKind::Ranges => {
                for (s, e) in needed_ranges(cx)? {
                    cx.copy_range(s, e - s)?;
                }
                Ok(true)
            }
        }
    }

    fn begin_graph(&mut self) {
        self.log.lock().unwrap().graphs += 1;
    }
}

// ----- invariants -------------------------------------------------------------

fn check_plan(
    s: &Scheduler,
    g: &Graph,
    backends: &[Arc<dyn Backend>],
    log: Option<&HookLog>,
) -> Result<(), String> {
    let splits = s.splits();
    let mut seen = BTreeSet::new();
    let mut expected_calls = Vec::new();
    for (si, sp) in splits.iter().enumerate() {
        let be = &backends[sp.backend];
        let mut srcs = BTreeSet::new();
        for inp in &sp.inputs {
            if !srcs.insert(inp.src) {
                return Err(format!("split {si}: input {:?} copied twice", inp.src));
            }
            let sb = g.data_of(inp.src).ok_or("input without memory")?.buffer;
            if be.can_use_buffer(sb.as_ref()) {
                return Err(format!("split {si}: needless copy of {:?}", inp.src));
            }
            let hw = sb.is_host() && sb.usage() == BufferUsage::Weights;
            if hw != inp.host_weight {
                return Err(format!(
                    "split {si}: {:?} host weight misclassified",
                    inp.src
                ));
            }
            let cb = g.data_of(inp.copy).ok_or("copy without memory")?.buffer;
            if !be.can_use_buffer(cb.as_ref()) {
                return Err(format!(
                    "split {si}: copy {:?} not usable by {}",
                    inp.copy,
                    be.name()
                ));
            }
            if inp.host_weight {
                if !inp.copied {
                    return Err(format!("split {si}: host weight {:?} reused", inp.src));
                }
                expected_calls.push((si, inp.src, inp.copy));
            }
        }
        for (pos, &n) in sp.nodes.iter().enumerate() {
            if !seen.insert(n) {
                return Err(format!("node {n:?} in two splits"));
            }
            if !be.supports_op(g, n) {
                return Err(format!("{n:?} on {} which does not support it", be.name()));
            }
            if s.node_backend(n) != Some(be.name()) {
                return Err(format!("{n:?}: node_backend disagrees with its split"));
            }
            let t = g.tensor(n);
            let own = g.data_of(n).ok_or("node without memory")?.buffer;
            if !be.can_use_buffer(own.as_ref()) {
                return Err(format!("{n:?}: result not in memory {} can use", be.name()));
            }
            for &src in &t.src {
                if t.op.writes_in_place() && Some(src) == t.view_src {
                    continue;
                }
                let sb = g.data_of(src).ok_or("source without memory")?.buffer;
                if be.can_use_buffer(sb.as_ref()) {
                    continue;
                }
                if !srcs.contains(&src) {
                    return Err(format!(
                        "split {si}: {n:?} reads {src:?} in {} memory without a copy",
                        sb.name()
                    ));
                }
                if sb.usage() == BufferUsage::Weights && pos != 0 {
                    return Err(format!(
                        "split {si}: {n:?} reads a foreign weight but does not head its split"
                    ));
                }
            }
        }
    }
    for &n in g.nodes() {
        let t = g.tensor(n);
        if t.op.is_view() {
            if t.data.is_some() {
                return Err(format!("view {n:?} was given memory"));
            }
        } else if !seen.contains(&n) {
            return Err(format!("node {n:?} in no split"));
        }
    }
    if let Some(log) = log {
        if !log.errors.is_empty() {
            return Err(log.errors.join("; "));
        }
        let mut got = log.calls.clone();
        got.sort();
        expected_calls.sort();
        if got != expected_calls {
            return Err(format!(
                "hook offered {got:?}, expected the host weights {expected_calls:?}"
            ));
        }
    }
    Ok(())
}

fn make_backends(case: &Case) -> (Vec<Arc<dyn Backend>>, Arc<SimClock>) {
    let clock = SimClock::new(case.sim.profile());
    clock.set_recording(true);
    let mut v: Vec<Arc<dyn Backend>> = Vec::new();
    for (i, d) in case.devs.iter().enumerate() {
        let refuse = d.refuse.clone();
        v.push(Arc::new(
            SimBackend::new(i, 1)
                .with_clock(Arc::clone(&clock))
                .with_offload_min_batch(d.min_batch)
                .with_op_filter(Arc::new(move |g: &Graph, n: TensorId| {
                    !refuse.contains(&g.tensor(n).op.name())
                })),
        ));
    }
    v.push(Arc::new(CpuBackend::new(1).with_clock(clock.clone())));
    (v, clock)
}

/// Schedule the case; check invariants after each compute; compare results.
fn run_case(case: &Case) -> Result<(), TestCaseError> {
    let want = reference(case);
    let (backends, clock) = make_backends(case);
    let cpu = CpuBackend::new(1);
    let mut s = Scheduler::new(backends.clone()).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let log = Arc::new(Mutex::new(HookLog::default()));
    if case.hook != HookKind::None {
        s.set_copy_hook(Box::new(TestHook {
            kind: case.hook,
            log: log.clone(),
        }));
    }
    let mut b = build(case, &cpu, false);
    let store = place(&mut b, &backends, None);
    // twice on the same graph (the plan and the copies are reused), then
    // on a fresh graph of the same structure over the same weights
    for round in 0..3 {
        if round == 2 {
            b = build(case, &cpu, false);
            place(&mut b, &backends, Some(&store));
        }
        *log.lock().unwrap() = HookLog::default();
        s.alloc_graph(&mut b.g)
            .map_err(|e| TestCaseError::fail(format!("alloc: {e}")))?;
        for (id, bytes) in &b.inputs {
            // inputs of skipped steps are not in the graph: no memory
            if b.g.data_of(*id).is_some() {
                b.g.write_bytes(*id, bytes).unwrap();
            }
        }
        reset(&b);
        let st = s
            .compute(&mut b.g)
            .map_err(|e| TestCaseError::fail(format!("round {round}: {e}\n{}", s.plan_dump())))?;
        let got = read_results(&b);
        // on the simulated clock, nothing ran before what it depends on, and
        // nothing overwrote what an unfinished op or copy still read
        let tl = clock.take_timeline();
        tl.check_hazards()
            .map_err(|e| TestCaseError::fail(format!("round {round}: {e}\n{}", s.plan_dump())))?;
        if !case.devs.is_empty() && st.n_splits > 0 {
            prop_assert!(!tl.spans.is_empty(), "no spans recorded");
        }
        let lg = log.lock().unwrap();
        let hooked = (case.hook != HookKind::None).then_some(&*lg);
        check_plan(&s, &b.g, &backends, hooked)
            .map_err(|e| TestCaseError::fail(format!("round {round}: {e}\n{}", s.plan_dump())))?;
        prop_assert_eq!(st.plan_reused, round > 0, "plan reuse");
        prop_assert_eq!(st.n_splits, s.splits().len());
        let n_hw: usize = s
            .splits()
            .iter()
            .flat_map(|sp| &sp.inputs)
            .filter(|i| i.host_weight)
            .count();
        let hw_bytes: u64 = s
            .splits()
            .iter()
            .flat_map(|sp| &sp.inputs)
            .filter(|i| i.host_weight)
            .map(|i| b.g.tensor(i.src).nbytes() as u64)
            .sum();
        match case.hook {
            HookKind::None => prop_assert_eq!(st.hook_bytes(), 0),
            HookKind::Decline => {
                prop_assert_eq!(st.hook_declined, n_hw);
                prop_assert_eq!(st.hook_bytes(), 0);
            }
            HookKind::Full => {
                prop_assert_eq!(st.hook_handled, n_hw);
                prop_assert_eq!(st.hook_bytes(), hw_bytes);
            }
            HookKind::Ranges => {
                prop_assert_eq!(st.hook_handled, n_hw);
                prop_assert!(st.hook_bytes() <= hw_bytes);
            }
        }
        if case.hook != HookKind::None {
            prop_assert_eq!(lg.graphs, 1);
        }
        if std::env::var("SCHED_PROPS_VERBOSE").is_ok() && round == 0 {
            eprintln!(
                "splits {} copies {} hw {} hook {:?} sched_bytes {} hook_bytes {}",
                st.n_splits,
                s.splits().iter().map(|s| s.inputs.len()).sum::<usize>(),
                n_hw,
                case.hook,
                st.sched_bytes(),
                st.hook_bytes()
            );
        }
        if got != want {
            return Err(TestCaseError::fail(format!(
                "round {round}: scheduled results differ from the CPU reference\n{}",
                s.plan_dump()
            )));
        }
    }
    Ok(())
}

// ----- strategies -------------------------------------------------------------

fn supported_op_names() -> Vec<&'static str> {
    // what the CPU kernels implement now: probe each op on a small graph
    let cpu = CpuBackend::new(1);
    let mut g = Graph::new();
    let a = g.new_tensor_2d(GgmlType::F32, 4, 2);
    let w = g.new_tensor_2d(GgmlType::F32, 4, 4);
    let we = g.new_tensor_3d(GgmlType::F32, 4, 4, 2);
    let ids = g.new_tensor_2d(GgmlType::I32, 1, 2);
    let rid = g.new_tensor_1d(GgmlType::I32, 2);
    let cache = g.new_tensor_2d(GgmlType::F32, 4, 4);
    let ar = g.reshape_3d(a, 4, 1, 2);
    let tr = g.transpose(a);
    let dst = g.view_2d(cache, 4, 2, 16, 0);
    let nodes = [
        g.add(a, a),
        g.sub(a, a),
        g.mul(a, a),
        g.div(a, a),
        g.scale(a, 2.0),
        g.mul_mat(w, a),
        g.mul_mat_id(we, ar, ids),
        g.get_rows(w, rid),
        g.cont(tr),
        g.cpy(a, dst),
        g.set_rows(cache, a, rid),
    ];
    nodes
        .iter()
        .filter(|&&n| cpu.supports_op(&g, n))
        .map(|&n| g.tensor(n).op.name())
        .collect()
}

fn dev_strategy(ops: Vec<&'static str>) -> impl Strategy<Value = Dev> {
    // devices never refuse the in-place ops: a cache must be written where it lives
    let refusable: Vec<&'static str> = ops
        .into_iter()
        .filter(|o| *o != "CPY" && *o != "SET_ROWS")
        .collect();
    let n = refusable.len();
    (
        proptest::collection::vec(any::<bool>(), n),
        prop_oneof![Just(1i64), Just(1), Just(2), Just(3), Just(64)],
    )
        .prop_map(move |(mask, min_batch)| Dev {
            refuse: refusable
                .iter()
                .zip(mask)
                .filter(|(_, m)| *m)
                .map(|(o, _)| *o)
                .collect(),
            min_batch,
        })
}

fn step_strategy() -> impl Strategy<Value = Step> {
    (
        0..KINDS.len(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(|(k, a, b, place, p)| Step {
            kind: KINDS[k],
            a,
            b,
            place,
            p,
        })
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let ops = supported_op_names();
    (
        prop_oneof![Just(4i64), Just(8)],
        1i64..=5,
        (2i64..=4, 1i64..=3),
        prop_oneof![
            1 => Just(0usize),
            2 => Just(1usize),
            2 => Just(2usize)
        ]
        .prop_flat_map(move |n| proptest::collection::vec(dev_strategy(ops.clone()), n)),
        any::<[u8; 2]>(),
        1u8..=2,
        proptest::collection::vec(step_strategy(), 1..12),
        1u8..=3,
        prop_oneof![
            Just(HookKind::None),
            Just(HookKind::Decline),
            Just(HookKind::Full),
            Just(HookKind::Ranges)
        ],
        (any::<u64>(), 1usize..=3, any::<[u8; 6]>()),
    )
        .prop_map(
            |(
                k,
                t,
                (n_exp, n_used),
                devs,
                cache_place,
                n_inputs,
                steps,
                n_out,
                hook,
                (seed, copy_engines, costs),
            )| Case {
                k,
                t,
                n_exp,
                n_used: n_used.min(n_exp),
                devs,
                cache_place,
                n_inputs,
                steps,
                n_out,
                hook,
                seed,
                sim: SimCase {
                    copy_engines,
                    costs,
                },
            },
        )
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn scheduled_graphs_match_the_cpu(case in case_strategy()) {
        run_case(&case)?;
    }
}

// ----- fixed cases --------------------------------------------------------------

/// The CPU backend, refusing one op and failing compute on demand.
struct TestCpu {
    cpu: CpuBackend,
    refuse: Option<&'static str>,
    fail: AtomicBool,
}

impl TestCpu {
    fn new(refuse: Option<&'static str>) -> TestCpu {
        TestCpu {
            cpu: CpuBackend::new(1),
            refuse,
            fail: AtomicBool::new(false),
        }
    }
}

impl BackendDevice for TestCpu {
    fn name(&self) -> &str {
        "TESTCPU"
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(
        &self,
        size: usize,
        usage: BufferUsage,
    ) -> Result<Arc<dyn Buffer>, BackendError> {
        self.cpu.alloc_buffer(size, usage)
    }
    fn can_use_buffer(&self, buf: &dyn Buffer) -> bool {
        self.cpu.can_use_buffer(buf)
    }
    fn supports_op(&self, g: &Graph, node: TensorId) -> bool {
        Some(g.tensor(node).op.name()) != self.refuse && self.cpu.supports_op(g, node)
    }
}

impl BackendStream for TestCpu {
    fn compute(&self, g: &Graph, nodes: &[TensorId]) -> Result<(), BackendError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(BackendError::Device("injected failure".into()));
        }
        self.cpu.compute(g, nodes)
    }
    fn record_event(&self) -> Result<Event, BackendError> {
        self.cpu.record_event()
    }
}

impl Backend for TestCpu {}

/// `o = (x + w) * x - x` with `w` in the given buffer: a small fixed graph.
fn small_graph(w_buf: Arc<dyn Buffer>) -> (Graph, TensorId, TensorId, Vec<f32>) {
    let mut g = Graph::new();
    let x = g.new_tensor_2d(GgmlType::F32, 4, 3);
    g.set_name(x, "x");
    g.set_input(x);
    let w = g.new_tensor_1d(GgmlType::F32, 4);
    g.set_name(w, "w");
    g.tensor_mut(w).flags.weight = true;
    g.tensor_mut(w).data = Some(TensorData {
        buffer: w_buf,
        offset: 0,
    });
    g.write_f32(w, &[1., 2., 3., 4.]).unwrap();
    let a = g.add(x, w);
    g.set_name(a, "sum");
    let m = g.mul(a, x);
    g.set_name(m, "prod");
    let o = g.sub(m, x);
    g.set_name(o, "out");
    g.set_output(o);
    g.build_forward_expand(o);
    let xs: Vec<f32> = (0..12).map(|i| i as f32 - 3.0).collect();
    let want = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| (v + [1., 2., 3., 4.][i % 4]) * v - v)
        .collect();
    (g, x, o, want)
}

#[test]
fn no_backend_supports_an_op() {
    let sim: Arc<dyn Backend> = Arc::new(
        SimBackend::new(0, 1)
            .with_op_filter(Arc::new(|g: &Graph, n: TensorId| g.tensor(n).op != Op::Add)),
    );
    let cpu: Arc<dyn Backend> = Arc::new(TestCpu::new(Some("ADD")));
    let w = cpu.alloc_buffer(16, BufferUsage::Weights).unwrap();
    let (mut g, _, _, _) = small_graph(w);
    let mut s = Scheduler::new(vec![sim, cpu]).unwrap();
    let err = s.compute(&mut g).unwrap_err();
    assert!(
        matches!(err, SchedError::Unsupported { op: "ADD", .. }),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "no backend supports op ADD (node 'sum')");
}

#[test]
fn scheduler_needs_a_host_backend_last() {
    let sim: Arc<dyn Backend> = Arc::new(SimBackend::new(0, 1));
    let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new(1));
    assert!(Scheduler::new(vec![cpu, sim]).is_err());
    assert!(Scheduler::new(vec![]).is_err());
}

#[test]
fn compute_errors_reach_the_caller_and_the_next_graph_runs() {
    let sim: Arc<dyn Backend> = Arc::new(SimBackend::new(0, 1));
    let tc = Arc::new(TestCpu::new(None));
    let cpu: Arc<dyn Backend> = tc.clone();
    // the weight lives on the CPU, x too: the CPU computes
    let w = cpu.alloc_buffer(16, BufferUsage::Weights).unwrap();
    let mut s = Scheduler::new(vec![sim, cpu]).unwrap();
    for failing in [true, false, true, false] {
        let (mut g, x, o, want) = small_graph(w.clone());
        s.alloc_graph(&mut g).unwrap();
        let xs: Vec<f32> = (0..12).map(|i| i as f32 - 3.0).collect();
        g.write_f32(x, &xs).unwrap();
        tc.fail.store(failing, Ordering::SeqCst);
        let r = s.compute(&mut g);
        if failing {
            let e = r.unwrap_err();
            assert!(matches!(e, SchedError::Compute { .. }), "{e:?}");
            assert!(e.to_string().contains("injected failure"), "{e}");
        } else {
            r.unwrap();
            assert_eq!(g.read_f32(o).unwrap(), want);
        }
        // the graph's sources are restored either way
        assert!(g.nodes().iter().all(|&n| g
            .tensor(n)
            .src
            .iter()
            .all(|s| !g.tensor(*s).name.contains('#'))));
    }
}

struct FailingHook(bool);

impl CopyHook for FailingHook {
    fn copy_input(&mut self, _cx: &mut HookCtx<'_>) -> Result<bool, HookError> {
        if self.0 {
            Err(HookError::msg("hook says no"))
        } else {
            Ok(false)
        }
    }
}

#[test]
fn hook_errors_reach_the_caller() {
    let sim: Arc<dyn Backend> = Arc::new(SimBackend::new(0, 1).with_offload_min_batch(1));
    let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new(1));
    let w = MappedBuffer::new(Arc::new(vec![0u8; 16]));
    let w: Arc<dyn Buffer> = Arc::new(w);
    let mut s = Scheduler::new(vec![sim, cpu]).unwrap();
    s.set_copy_hook(Box::new(FailingHook(true)));
    let mk = || {
        let mut g = Graph::new();
        let x = g.new_tensor_2d(GgmlType::F32, 4, 3);
        g.set_input(x);
        let wt = g.new_tensor_1d(GgmlType::F32, 4);
        g.set_name(wt, "w");
        g.tensor_mut(wt).data = Some(TensorData {
            buffer: w.clone(),
            offset: 0,
        });
        let o = g.add(x, wt);
        g.set_output(o);
        g.build_forward_expand(o);
        g
    };
    let mut g = mk();
    let e = s.compute(&mut g).unwrap_err();
    assert!(matches!(e, SchedError::Hook { .. }), "{e:?}");
    assert!(e.to_string().contains("hook says no"), "{e}");
    s.set_copy_hook(Box::new(FailingHook(false)));
    let st = s.compute(&mut g).unwrap();
    assert_eq!(st.hook_declined, 1);
    assert_eq!(st.pair("CPU", "SIM0").map(|p| p.sched_bytes), Some(16 + 48));
}

#[test]
fn long_chains_share_compute_memory() {
    let sim: Arc<dyn Backend> = Arc::new(SimBackend::new(0, 1));
    let cpu: Arc<dyn Backend> = Arc::new(CpuBackend::new(1));
    let wb = sim.alloc_buffer(4096, BufferUsage::Weights).unwrap();
    let mut g = Graph::new();
    let x = g.new_tensor_2d(GgmlType::F32, 64, 4);
    g.set_input(x);
    let w = g.new_tensor_2d(GgmlType::F32, 64, 4);
    g.tensor_mut(w).data = Some(TensorData {
        buffer: wb,
        offset: 0,
    });
    let mut cur = x;
    for _ in 0..48 {
        cur = g.add(cur, w);
    }
    g.set_output(cur);
    g.build_forward_expand(cur);
    let mut s = Scheduler::new(vec![sim, cpu]).unwrap();
    s.alloc_graph(&mut g).unwrap();
    g.write_f32(x, &vec![1.0; 256]).unwrap();
    let st = s.compute(&mut g).unwrap();
    assert_eq!(st.n_splits, 1);
    assert_eq!(g.read_f32(cur).unwrap(), vec![1.0; 256]);
    let sim_bytes = s.compute_buffer_sizes()[0].1;
    // 48 activations of 1 KiB each would need 48 KiB; liveness needs ~3
    assert!(sim_bytes <= 4 * 1024, "{sim_bytes} bytes on SIM0");
}

/// The graph the property found a peer-copy race in, with a slow peer
/// link: `v3` (split 1 on SIM0) crosses to SIM1 by a peer copy on SIM1's
/// copy stream while SIM0's upload stream copies a later split's host
/// weight into compute memory. That upload must wait for the peer copy
/// (the source device's upload stream waits for it, not only its compute
/// stream): else it overwrites `v3` while the copy still reads it.
#[test]
fn a_peer_copys_source_is_not_overwritten_by_later_uploads() {
    let mut p = SimProfile::default_profile();
    p.host_time_scale = 0.0;
    p.copy_engines = 2;
    p.link.h2d_bw = 1e9;
    p.link.d2h_bw = 1e9;
    p.d2d_bw = Some(1e3); // a peer copy of 16 bytes lasts 16 ms
    let clock = SimClock::new(p);
    clock.set_recording(true);
    let backends: Vec<Arc<dyn Backend>> = vec![
        Arc::new(
            SimBackend::new(0, 1)
                .with_clock(Arc::clone(&clock))
                .with_offload_min_batch(1),
        ),
        Arc::new(
            SimBackend::new(1, 1)
                .with_clock(Arc::clone(&clock))
                .with_offload_min_batch(1),
        ),
        Arc::new(CpuBackend::new(1).with_clock(clock.clone())),
    ];
    let host_w: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let host_buf: Arc<dyn Buffer> = Arc::new(MappedBuffer::new(Arc::new(f32_bytes(&host_w))));
    let dev_buf = |d: usize| {
        let b = backends[d].alloc_buffer(64, BufferUsage::Weights).unwrap();
        b.write(0, &f32_bytes(&[0.5; 4])).unwrap();
        b
    };
    let (d0, d1) = (dev_buf(0), dev_buf(1));
    let mut g = Graph::new();
    let weight = |g: &mut Graph, buf: &Arc<dyn Buffer>, offset: usize| {
        let w = g.new_tensor_1d(GgmlType::F32, 4);
        g.tensor_mut(w).flags.weight = true;
        g.tensor_mut(w).data = Some(TensorData {
            buffer: buf.clone(),
            offset,
        });
        w
    };
    let x = g.new_tensor_2d(GgmlType::F32, 4, 1);
    g.set_input(x);
    let w4 = weight(&mut g, &host_buf, 0);
    let w7 = weight(&mut g, &d0, 0);
    let w11 = weight(&mut g, &host_buf, 16);
    let w13 = weight(&mut g, &d1, 0);
    let [v8, v7] = peer_race::build(&mut g, x, w4, w7, w11, w13);
    let mut s = Scheduler::new(backends.clone()).unwrap();
    // the layers' placement: v8's weight is on SIM1, the rest on SIM0
    s.alloc_graph(&mut g).unwrap();
    let xs = [1.0f32, -2.0, 3.0, 0.25];
    g.write_f32(x, &xs).unwrap();
    let st = s.compute(&mut g).unwrap();
    let tl = clock.take_timeline();
    tl.check_hazards()
        .unwrap_or_else(|e| panic!("{e}\n{}", s.plan_dump()));
    assert!(st.peer_bytes() > 0, "no peer copy:\n{}", s.plan_dump());
    let v2_want: Vec<f32> = xs.iter().zip(&host_w).map(|(a, w)| 2.0 * a + w).collect();
    let v8_want: Vec<f32> = v2_want.iter().map(|v| v * 0.5 + 0.5).collect();
    let v7_want: Vec<f32> = v2_want
        .iter()
        .zip(&host_w[4..])
        .map(|(v, w)| v + 0.5 + w)
        .collect();
    assert_eq!(g.read_f32(v8).unwrap(), v8_want);
    assert_eq!(g.read_f32(v7).unwrap(), v7_want);
}
