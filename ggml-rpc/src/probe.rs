//! The probe graph: at connect, every op the engine builds (each parameter
//! form: RoPE normal, NeoX and YaRN, soft_max with an F16 or F32 mask and
//! sinks, the GLUs, every weight type of the fixtures in `mul_mat`, ...) is
//! computed on the worker and by this host's CPU backend on the same
//! inputs, one op per GRAPH_COMPUTE, and the results are compared. A worker
//! whose ggml numbers an op otherwise, lays out its parameters otherwise
//! or computes it otherwise is refused with the op's name, before a model
//! is loaded onto it; one that dies on an op is refused naming that op.
//!
//! Bounds: integer results equal (`top_k` as a set: ggml gives the k
//! indices in no order), F16 results bit for bit, F32 results within an
//! NMSE of 1e-6 of ours (ggml's and this engine's CPU kernels agree far
//! closer; a wrong op or parameter lands orders above).

use std::sync::Arc;

use ggml_core::op::{GluOp, RopeMode, RopeParams, SortOrder};
use ggml_core::tensor::TensorData;
use ggml_core::{
    BackendDevice, BackendError, BackendStream, BufferUsage, CpuBackend, GgmlType, Graph, TensorId,
};

use crate::backend::RpcBackend;

/// The F32 bound: NMSE of the worker's result against ours.
pub const NMSE_BOUND: f64 = 1e-6;

/// How a case's output is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmp {
    F32,
    Exact,
    SetRows,
}

/// One op of the probe: its label, the nodes to compute (the op and the
/// views it reads), and the tensor compared.
struct Case {
    label: String,
    nodes: Vec<TensorId>,
    out: TensorId,
    cmp: Cmp,
}

/// Deterministic inputs: a small LCG mapped to [-1, 1).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// The probe graph and its cases.
struct Probe {
    g: Graph,
    cases: Vec<Case>,
    /// Leafs with their contents.
    inputs: Vec<(TensorId, Vec<u8>)>,
    rng: Lcg,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl Probe {
    fn leaf(&mut self, ty: GgmlType, ne: &[i64], name: &str) -> TensorId {
        let t = self.g.new_tensor(ty, ne);
        self.g.set_name(t, name);
        let n: i64 = ne.iter().product();
        let vals: Vec<f32> = (0..n).map(|_| self.rng.next()).collect();
        let bytes = match ty {
            GgmlType::F32 => f32_bytes(&vals),
            _ => {
                let tr = ggml_core::quants::cpu_traits(ty).expect("a float or quant type");
                let row = ne[0] as usize;
                let rsz = ty.row_size(row as u64).unwrap_or(0);
                let mut out = vec![0u8; rsz * (n as usize / row)];
                for (src, dst) in vals.chunks(row).zip(out.chunks_mut(rsz)) {
                    (tr.from_float)(src, dst);
                }
                out
            }
        };
        self.inputs.push((t, bytes));
        t
    }

    fn ints(&mut self, ty: GgmlType, ne: &[i64], vals: &[i64], name: &str) -> TensorId {
        let t = self.g.new_tensor(ty, ne);
        self.g.set_name(t, name);
        let bytes = match ty {
            GgmlType::I64 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
            _ => vals
                .iter()
                .flat_map(|&v| (v as i32).to_le_bytes())
                .collect(),
        };
        self.inputs.push((t, bytes));
        t
    }

    fn case(&mut self, label: impl Into<String>, nodes: Vec<TensorId>, cmp: Cmp) -> TensorId {
        let out = *nodes.last().expect("a case computes something");
        self.cases.push(Case {
            label: label.into(),
            nodes,
            out,
            cmp,
        });
        out
    }

    fn one(&mut self, label: &str, node: TensorId) -> TensorId {
        self.case(label, vec![node], Cmp::F32)
    }
}

fn rope(mode: RopeMode, yarn: bool) -> RopeParams {
    RopeParams {
        n_dims: 32,
        mode,
        n_ctx_orig: if yarn { 4096 } else { 0 },
        freq_base: 10000.0.into(),
        freq_scale: if yarn { 0.25 } else { 1.0 }.into(),
        ext_factor: if yarn { 1.0 } else { 0.0 }.into(),
        attn_factor: if yarn { 0.9 } else { 1.0 }.into(),
        beta_fast: 32.0.into(),
        beta_slow: 1.0.into(),
    }
}

fn build() -> Probe {
    let mut p = Probe {
        g: Graph::new(),
        cases: Vec::new(),
        inputs: Vec::new(),
        rng: Lcg(0x5eed),
    };
    let x = p.leaf(GgmlType::F32, &[256, 4], "x");
    // matrix products over every weight type of the fixtures and the bench
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4K,
        GgmlType::Q6K,
        GgmlType::MXFP4,
    ] {
        let w = p.leaf(ty, &[256, 16], &format!("w.{}", ty.name()));
        let y = p.g.mul_mat(w, x);
        p.one(&format!("MUL_MAT ({})", ty.name()), y);
    }
    // experts: mul_mat_id and add_id, as the MoE block uses them
    let ids = p.ints(GgmlType::I32, &[2, 4], &[0, 3, 1, 2, 3, 0, 2, 2], "ids");
    let xe = p.g.reshape_3d(x, 256, 1, 4);
    for ty in [GgmlType::F32, GgmlType::Q4K, GgmlType::MXFP4] {
        let e = p.leaf(ty, &[256, 16, 4], &format!("exps.{}", ty.name()));
        let y = p.g.mul_mat_id(e, xe, ids);
        p.case(format!("MUL_MAT_ID ({})", ty.name()), vec![xe, y], Cmp::F32);
    }
    let a = p.leaf(GgmlType::F32, &[16, 2, 4], "a3");
    let bias = p.leaf(GgmlType::F32, &[16, 4], "bias");
    let y = p.g.add_id(a, bias, ids);
    p.one("ADD_ID", y);
    // rows
    let rows = p.ints(GgmlType::I32, &[3], &[5, 0, 15], "rows");
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q4K] {
        let tab = p.leaf(ty, &[256, 16], &format!("tab.{}", ty.name()));
        let y = p.g.get_rows(tab, rows);
        p.one(&format!("GET_ROWS ({})", ty.name()), y);
    }
    // element-wise, with broadcasting
    let m = p.leaf(GgmlType::F32, &[64, 4], "m");
    let b1 = p.leaf(GgmlType::F32, &[64, 1], "b1");
    for (name, y) in [
        ("ADD", p.g.add(m, b1)),
        ("SUB", p.g.sub(m, b1)),
        ("MUL", p.g.mul(m, b1)),
        ("SCALE", p.g.scale_bias(m, 0.37, -0.5)),
        ("SQR", p.g.sqr(m)),
        ("SUM_ROWS", p.g.sum_rows(m)),
        ("MEAN", p.g.mean(m)),
        ("RMS_NORM", p.g.rms_norm(m, 1e-6)),
        ("NORM", p.g.norm(m, 1e-5)),
        ("SILU", p.g.silu(m)),
        ("GELU", p.g.gelu(m)),
        ("SIGMOID", p.g.sigmoid(m)),
        ("NEG", p.g.neg(m)),
        ("RELU", p.g.relu(m)),
        ("EXP", p.g.exp(m)),
    ] {
        p.one(name, y);
    }
    let s = p.g.sqr(m);
    let pos = p.g.scale_bias(s, 1.0, 0.5);
    let d = p.g.div(m, pos);
    p.case("DIV", vec![s, pos, d], Cmp::F32);
    let r = p.g.sqrt(pos);
    p.case("SQRT", vec![s, pos, r], Cmp::F32);
    let am = p.g.argmax(m);
    p.case("ARGMAX", vec![am], Cmp::Exact);
    let srt = p.g.argsort(m, SortOrder::Desc);
    p.case("ARGSORT", vec![srt], Cmp::Exact);
    let tk = p.g.top_k(m, 4);
    p.case("TOP_K", vec![tk], Cmp::Exact);
    // gated linear units
    let up = p.leaf(GgmlType::F32, &[64, 4], "up");
    for (name, op) in [
        ("GLU (SWIGLU)", GluOp::Swiglu),
        ("GLU (GEGLU)", GluOp::Geglu),
        (
            "GLU (SWIGLU_OAI)",
            GluOp::SwigluOai {
                alpha: 1.702.into(),
                limit: 0.5.into(),
            },
        ),
    ] {
        let y = p.g.glu_split(m, up, op);
        p.one(name, y);
    }
    let y = p.g.glu(m, GluOp::Swiglu, true);
    p.one("GLU (SWIGLU, one tensor, swapped)", y);
    // rope: [head_dim 32, 2 heads, 4 tokens]
    let q = p.leaf(GgmlType::F32, &[32, 2, 4], "q");
    let qpos = p.ints(GgmlType::I32, &[4], &[0, 1, 7, 300], "pos");
    let ff = p.g.new_tensor_1d(GgmlType::F32, 16);
    p.g.set_name(ff, "freq_factors");
    p.inputs.push((
        ff,
        f32_bytes(&(0..16).map(|i| 1.0 + i as f32 / 8.0).collect::<Vec<_>>()),
    ));
    for (name, mode, yarn, f) in [
        ("ROPE (normal)", RopeMode::Normal, false, None),
        ("ROPE (neox)", RopeMode::Neox, false, None),
        ("ROPE (normal, YaRN)", RopeMode::Normal, true, None),
        ("ROPE (neox, YaRN)", RopeMode::Neox, true, None),
        ("ROPE (neox, freq factors)", RopeMode::Neox, false, Some(ff)),
    ] {
        let y = p.g.rope_ext(q, qpos, f, rope(mode, yarn));
        p.one(name, y);
    }
    // softmax: scores [8 keys, 4 queries, 2 heads]
    let kq = p.leaf(GgmlType::F32, &[8, 4, 2], "kq");
    let mask16 = p.leaf(GgmlType::F16, &[8, 4], "mask16");
    let mask32 = p.leaf(GgmlType::F32, &[8, 4], "mask32");
    let sinks = p.leaf(GgmlType::F32, &[2], "sinks");
    let y = p.g.soft_max_ext(kq, None, 1.0, 0.0);
    p.one("SOFT_MAX", y);
    let y = p.g.soft_max_ext(kq, Some(mask16), 0.35, 0.0);
    p.one("SOFT_MAX (F16 mask)", y);
    let y = p.g.soft_max_ext(kq, Some(mask32), 0.35, 0.0);
    p.one("SOFT_MAX (F32 mask)", y);
    let y = p.g.soft_max_ext(kq, Some(mask16), 0.35, 0.0);
    p.g.soft_max_add_sinks(y, sinks);
    p.one("SOFT_MAX (sinks)", y);
    // attention over an F16 cache
    let k = p.leaf(GgmlType::F16, &[32, 8, 1], "k");
    let v = p.leaf(GgmlType::F16, &[32, 8, 1], "v");
    let qa = p.leaf(GgmlType::F32, &[32, 4, 2], "qa");
    let y = p.g.flash_attn_ext(qa, k, v, Some(mask16), 0.2, 0.0, 0.0);
    p.one("FLASH_ATTN_EXT", y);
    let y = p.g.flash_attn_ext(qa, k, v, Some(mask16), 0.2, 0.0, 0.0);
    p.g.flash_attn_ext_add_sinks(y, sinks);
    p.one("FLASH_ATTN_EXT (sinks)", y);
    // layout ops
    let c = p.g.concat(m, up, 0);
    p.one("CONCAT (dim 0)", c);
    let c = p.g.concat(m, up, 1);
    p.one("CONCAT (dim 1)", c);
    let t = p.g.transpose(m);
    let ct = p.g.cont(t);
    p.case("CONT (of a transpose)", vec![t, ct], Cmp::F32);
    let pm = p.g.permute(q, [0, 2, 1, 3]);
    let cp = p.g.cont(pm);
    p.case("CONT (of a permute)", vec![pm, cp], Cmp::F32);
    let h = p.g.new_tensor_2d(GgmlType::F16, 64, 4);
    p.g.set_name(h, "half");
    p.inputs.push((h, vec![0u8; 64 * 4 * 2]));
    let y = p.g.cpy(m, h);
    p.case("CPY (F32 to F16)", vec![y], Cmp::SetRows);
    let cache = p.g.new_tensor_2d(GgmlType::F16, 64, 8);
    p.g.set_name(cache, "cache");
    p.inputs.push((cache, vec![0u8; 64 * 8 * 2]));
    let cells = p.ints(GgmlType::I64, &[4], &[6, 1, 3, 0], "cells");
    let y = p.g.set_rows(cache, m, cells);
    p.case("SET_ROWS (F32 to F16)", vec![y], Cmp::SetRows);
    p
}

/// Give every tensor that is not a view memory in `buf` (back to back,
/// 64-byte aligned) and write the inputs.
fn place(p: &mut Probe, buf: &Arc<dyn ggml_core::Buffer>) -> Result<(), BackendError> {
    let mut off = 0usize;
    let ids: Vec<TensorId> = p.g.ids().collect();
    for t in ids {
        if p.g.tensor(t).view_src.is_some() {
            continue;
        }
        let n = p.g.tensor(t).nbytes();
        p.g.tensor_mut(t).data = Some(TensorData {
            buffer: Arc::clone(buf),
            offset: off,
        });
        off += n.next_multiple_of(64);
    }
    for (t, bytes) in &p.inputs {
        p.g.write_bytes(*t, bytes)?;
    }
    Ok(())
}

fn total_size(p: &Probe) -> usize {
    p.g.ids()
        .filter(|&t| p.g.tensor(t).view_src.is_none())
        .map(|t| p.g.tensor(t).nbytes().next_multiple_of(64))
        .sum()
}

fn nmse(ours: &[f32], theirs: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (a, b) in ours.iter().zip(theirs) {
        let (a, b) = (*a as f64, *b as f64);
        if a.is_nan() != b.is_nan() || (a.is_infinite() && a != b) {
            return f64::INFINITY;
        }
        if a.is_finite() && b.is_finite() {
            num += (a - b) * (a - b);
            den += a * a;
        }
    }
    if den == 0.0 {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        num / den
    }
}

fn as_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn sorted_rows(b: &[u8], row: usize) -> Vec<Vec<i32>> {
    let v: Vec<i32> = b
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    v.chunks(row.max(1))
        .map(|r| {
            let mut r = r.to_vec();
            r.sort_unstable();
            r
        })
        .collect()
}

/// Run the probe on `be` against this host's CPU backend (`n_threads`
/// threads); an op whose result differs, or on which the worker fails, is
/// an error naming the worker and the op.
pub fn check(be: &RpcBackend, n_threads: usize) -> Result<(), BackendError> {
    let mut local = build();
    let mut remote = build();
    let size = total_size(&local);
    let cpu = CpuBackend::new(n_threads.max(1));
    let lbuf = cpu.alloc_buffer(size, BufferUsage::Compute)?;
    place(&mut local, &lbuf)?;
    let rbuf = be.alloc_buffer(size, BufferUsage::Compute)?;
    place(&mut remote, &rbuf)?;
    let who = format!("{} ({})", be.name(), be.endpoint());
    for (i, case) in local.cases.iter().enumerate() {
        cpu.compute(&local.g, &case.nodes)?;
        let rc = &remote.cases[i];
        let fail = |e: BackendError| {
            BackendError::Device(format!(
                "{who}: the probe graph's {} failed on the worker: {e}",
                case.label
            ))
        };
        be.compute(&remote.g, &rc.nodes).map_err(fail)?;
        let ours = local.g.read_bytes(case.out)?;
        let theirs = remote.g.read_bytes(rc.out).map_err(fail)?;
        let t = local.g.tensor(case.out);
        let bad = match case.cmp {
            Cmp::F32 => {
                let e = nmse(&as_f32(&ours), &as_f32(&theirs));
                (e > NMSE_BOUND).then(|| {
                    format!(
                        "NMSE {e:.3e} against this engine's CPU backend (bound {NMSE_BOUND:.0e})"
                    )
                })
            }
            Cmp::Exact if matches!(t.op, ggml_core::Op::TopK { .. }) => {
                let row = t.ne[0] as usize;
                (sorted_rows(&ours, row) != sorted_rows(&theirs, row))
                    .then(|| "other indices than this engine's CPU backend".to_string())
            }
            Cmp::Exact | Cmp::SetRows => {
                (ours != theirs).then(|| "other values than this engine's CPU backend".to_string())
            }
        };
        if let Some(why) = bad {
            return Err(BackendError::Device(format!(
                "{who}: the worker computes the probe graph's {} otherwise: {why}; its ggml numbers or computes this op unlike protocol {}'s",
                case.label,
                crate::proto::VERSION
            )));
        }
    }
    Ok(())
}

/// The labels of the probe's ops, in order (for docs and tests).
pub fn op_labels() -> Vec<String> {
    build().cases.into_iter().map(|c| c.label).collect()
}
