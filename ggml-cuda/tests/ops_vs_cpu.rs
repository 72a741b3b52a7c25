//! Every op and type the CUDA backend claims, computed on random inputs on
//! both `CpuBackend` and `CUDA0` through the graph API, compared by NMSE
//! (< 1e-6 for F32, < 1e-4 for F16/BF16 and quantized weights). Without a GPU
//! `CUDA0` is the emulated device (`ggml_cuda::emulator`), so these run in
//! CI. Ops the CPU backend does not implement yet are reported and skipped
//! (the CPU kernels land on other branches). `OPS_PRINT=1` prints every
//! case's NMSE.

use ggml_core::op::{GluOp, RopeMode, RopeParams, SortOrder};
use ggml_core::tensor::TensorData;
use ggml_core::{Backend, BackendDevice, BufferUsage, CpuBackend, GgmlType, Graph, TensorId};
use ggml_cuda::CudaBackend;

const F32_TOL: f64 = 1e-6;
const LOW_TOL: f64 = 1e-4;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// uniform in [-1, 1)
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn f16b(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

/// A causal F16 mask [n_kv, n_q]: query j sees the cells up to
/// n_kv - n_q + j.
fn causal_mask(n_q: i64, n_kv: i64) -> Vec<u8> {
    (0..n_q)
        .flat_map(|j| {
            (0..n_kv).flat_map(move |c| {
                f16b(if c > n_kv - n_q + j {
                    f32::NEG_INFINITY
                } else {
                    0.0
                })
            })
        })
        .collect()
}

/// Random bytes of a tensor of `ty` with `n` elements: values in [-1, 1)
/// for plain types, random quants with sane scales for block types.
fn rand_bytes(r: &mut Rng, ty: GgmlType, n: usize) -> Vec<u8> {
    match ty {
        GgmlType::F32 => (0..n).flat_map(|_| r.f().to_le_bytes()).collect(),
        GgmlType::F16 => (0..n).flat_map(|_| f16b(r.f())).collect(),
        GgmlType::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(r.f()).to_le_bytes())
            .collect(),
        q => {
            let nb = n / q.blck_size();
            let bs = q.type_size();
            let mut out = vec![0u8; nb * bs];
            for b in out.chunks_mut(bs) {
                for x in b.iter_mut() {
                    *x = r.next() as u8;
                }
                let d = 0.002 + 0.01 * r.f().abs();
                match q {
                    GgmlType::Q8_0
                    | GgmlType::Q4_0
                    | GgmlType::Q5_0
                    | GgmlType::IQ4NL
                    | GgmlType::IQ4XS => b[0..2].copy_from_slice(&f16b(d)),
                    GgmlType::Q4_1 => {
                        b[0..2].copy_from_slice(&f16b(d));
                        b[2..4].copy_from_slice(&f16b(-8.0 * d));
                    }
                    GgmlType::Q5_1 => {
                        b[0..2].copy_from_slice(&f16b(d));
                        b[2..4].copy_from_slice(&f16b(-16.0 * d));
                    }
                    GgmlType::Q4K | GgmlType::Q5K => {
                        b[0..2].copy_from_slice(&f16b(d));
                        b[2..4].copy_from_slice(&f16b(d * 0.5));
                    }
                    GgmlType::Q2K => {
                        b[80..82].copy_from_slice(&f16b(d));
                        b[82..84].copy_from_slice(&f16b(d * 0.5));
                    }
                    GgmlType::Q3K => b[108..110].copy_from_slice(&f16b(d)),
                    GgmlType::Q6K => b[208..210].copy_from_slice(&f16b(d)),
                    // E8M0 scale 2^(e - 128): 2^-8 .. 2^-5
                    GgmlType::MXFP4 => b[0] = 120 + r.below(4) as u8,
                    other => panic!("no generator for {other}"),
                }
            }
            out
        }
    }
}

struct Case {
    name: String,
    g: Graph,
    inputs: Vec<(TensorId, Vec<u8>)>,
    out: TensorId,
    tol: f64,
}

/// Builds a case: a graph, random leaf data, one output.
struct B {
    g: Graph,
    r: Rng,
    inputs: Vec<(TensorId, Vec<u8>)>,
}

impl B {
    fn new(seed: u64) -> B {
        B {
            g: Graph::new(),
            r: Rng(seed | 1),
            inputs: Vec::new(),
        }
    }
    fn rand(&mut self, ty: GgmlType, ne: &[i64]) -> TensorId {
        let id = self.g.new_tensor(ty, ne);
        let n = self.g.tensor(id).nelements() as usize;
        let bytes = rand_bytes(&mut self.r, ty, n);
        self.inputs.push((id, bytes));
        id
    }
    fn data(&mut self, ty: GgmlType, ne: &[i64], bytes: Vec<u8>) -> TensorId {
        let id = self.g.new_tensor(ty, ne);
        self.inputs.push((id, bytes));
        id
    }
    fn i32s(&mut self, ne: &[i64], v: &[i32]) -> TensorId {
        self.data(
            GgmlType::I32,
            ne,
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        )
    }
    fn done(mut self, name: impl Into<String>, out: TensorId, tol: f64) -> Case {
        self.g.build_forward_expand(out);
        Case {
            name: name.into(),
            g: self.g,
            inputs: self.inputs,
            out,
            tol,
        }
    }
}

fn run_on(be: &dyn Backend, c: &Case) -> Result<Vec<f32>, String> {
    let mut g = c.g.clone();
    let mut offs = Vec::new();
    let mut size = 0usize;
    for id in g.ids() {
        let t = g.tensor(id);
        if t.view_src.is_none() {
            let off = size.div_ceil(256) * 256;
            size = off + t.nbytes();
            offs.push((id, off));
        }
    }
    let buf = be
        .alloc_buffer(size, BufferUsage::Compute)
        .map_err(|e| e.to_string())?;
    for (id, off) in offs {
        g.tensor_mut(id).data = Some(TensorData {
            buffer: buf.clone(),
            offset: off,
        });
    }
    for (id, bytes) in &c.inputs {
        g.write_bytes(*id, bytes).map_err(|e| e.to_string())?;
    }
    let nodes = g.nodes().to_vec();
    be.compute(&g, &nodes).map_err(|e| e.to_string())?;
    be.synchronize().map_err(|e| e.to_string())?;
    g.read_f32(c.out).map_err(|e| e.to_string())
}

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (a, b) in got.iter().zip(want) {
        num += (*a as f64 - *b as f64).powi(2);
        den += (*b as f64).powi(2);
    }
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Every weight type the fixtures use.
const WEIGHT_TYPES: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::IQ4NL,
    GgmlType::IQ4XS,
    GgmlType::MXFP4,
];

fn tol_for(ty: GgmlType) -> f64 {
    if ty == GgmlType::F32 {
        F32_TOL
    } else {
        LOW_TOL
    }
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let mut seed = 1u64;
    let mut next = || {
        seed += 1;
        B::new(seed * 0x9E37_79B9_7F4A_7C15)
    };
    // binary ops with broadcasting, F32 and F16 second operands
    for (name, which) in [("add", 0), ("sub", 1), ("mul", 2), ("div", 3)] {
        for bty in [GgmlType::F32, GgmlType::F16] {
            let mut b = next();
            let x = b.rand(GgmlType::F32, &[16, 6, 3, 2]);
            let y = b.rand(bty, &[16, 1, 3, 1]);
            let o = match which {
                0 => b.g.add(x, y),
                1 => b.g.sub(x, y),
                2 => b.g.mul(x, y),
                _ => b.g.div(x, y),
            };
            v.push(b.done(format!("{name} b={bty}"), o, tol_for(bty)));
        }
    }
    // unary ops, on a strided (transposed) source too
    for name in [
        "scale", "sqr", "sqrt", "silu", "gelu", "sigmoid", "neg", "relu", "exp",
    ] {
        for strided in [false, true] {
            let mut b = next();
            let mut x = b.rand(GgmlType::F32, &[33, 7, 2]);
            if name == "sqrt" {
                x = b.g.sqr(x);
            }
            if strided {
                x = b.g.transpose(x);
            }
            let o = match name {
                "scale" => b.g.scale_bias(x, 0.5, 0.25),
                "sqr" => b.g.sqr(x),
                "sqrt" => b.g.sqrt(x),
                "silu" => b.g.silu(x),
                "gelu" => b.g.gelu(x),
                "sigmoid" => b.g.sigmoid(x),
                "neg" => b.g.neg(x),
                "relu" => b.g.relu(x),
                _ => b.g.exp(x),
            };
            v.push(b.done(format!("{name} strided={strided}"), o, F32_TOL));
        }
    }
    // GLUs, fused and split
    let glus = [
        ("swiglu", GluOp::Swiglu),
        ("geglu", GluOp::Geglu),
        (
            "swiglu_oai",
            GluOp::SwigluOai {
                alpha: 1.702.into(),
                limit: 0.7.into(),
            },
        ),
    ];
    for (name, op) in glus {
        for swapped in [false, true] {
            let mut b = next();
            let x = b.rand(GgmlType::F32, &[64, 5, 2]);
            let o = b.g.glu(x, op, swapped);
            v.push(b.done(format!("{name} fused swapped={swapped}"), o, F32_TOL));
        }
        let mut b = next();
        let x = b.rand(GgmlType::F32, &[32, 5, 2]);
        let y = b.rand(GgmlType::F32, &[32, 5, 2]);
        let o = b.g.glu_split(x, y, op);
        v.push(b.done(format!("{name} split"), o, F32_TOL));
    }
    // row reductions
    for name in ["rms_norm", "norm", "sum_rows", "mean", "argmax"] {
        for ne0 in [7i64, 300, 4096] {
            let mut b = next();
            let x = b.rand(GgmlType::F32, &[ne0, 5]);
            let o = match name {
                "rms_norm" => b.g.rms_norm(x, 1e-6),
                "norm" => b.g.norm(x, 1e-5),
                "sum_rows" => b.g.sum_rows(x),
                "mean" => b.g.mean(x),
                _ => b.g.argmax(x),
            };
            v.push(b.done(format!("{name} ne0={ne0}"), o, F32_TOL));
        }
    }
    // rope: normal/neox, partial dims, freq factors, YaRN
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (n_dims, ff, ext) in [(64, false, 0.0f32), (32, false, 0.0), (64, true, 1.0)] {
            let mut b = next();
            let x = b.rand(GgmlType::F32, &[64, 4, 6]);
            let pos = b.i32s(&[6], &[0, 1, 7, 100, 1000, 4095]);
            let f = ff.then(|| {
                let vals: Vec<u8> = (0..n_dims / 2)
                    .flat_map(|i| (1.0f32 + i as f32 * 0.1).to_le_bytes())
                    .collect();
                b.data(GgmlType::F32, &[n_dims as i64 / 2], vals)
            });
            let p = RopeParams {
                n_dims,
                mode,
                n_ctx_orig: 4096,
                freq_base: 10000.0.into(),
                freq_scale: if ext != 0.0 { 0.25.into() } else { 1.0.into() },
                ext_factor: ext.into(),
                attn_factor: 1.0.into(),
                beta_fast: 32.0.into(),
                beta_slow: 1.0.into(),
            };
            let o = b.g.rope_ext(x, pos, f, p);
            v.push(b.done(
                format!("rope {mode:?} n_dims={n_dims} ff={ff} yarn={ext}"),
                o,
                F32_TOL,
            ));
        }
    }
    // soft_max_ext: plain, F32/F16 masks, ALiBi, sinks
    for (mask, max_bias, sinks) in [
        (None, 0.0f32, false),
        (Some(GgmlType::F32), 0.0, false),
        (Some(GgmlType::F16), 0.0, false),
        (Some(GgmlType::F32), 8.0, false),
        (Some(GgmlType::F16), 0.0, true),
    ] {
        let mut b = next();
        let x = b.rand(GgmlType::F32, &[40, 6, 5]);
        let m = mask.map(|ty| b.rand(ty, &[40, 8]));
        let o = b.g.soft_max_ext(x, m, 0.125, max_bias);
        if sinks {
            let s = b.rand(GgmlType::F32, &[5]);
            b.g.soft_max_add_sinks(o, s);
        }
        v.push(b.done(
            format!("soft_max mask={mask:?} max_bias={max_bias} sinks={sinks}"),
            o,
            F32_TOL,
        ));
    }
    // get_rows for every weight type
    for ty in WEIGHT_TYPES {
        let mut b = next();
        let a = b.rand(ty, &[256, 10]);
        let ids = b.i32s(&[4], &[3, 0, 9, 3]);
        let o = b.g.get_rows(a, ids);
        v.push(b.done(format!("get_rows {ty}"), o, tol_for(ty)));
    }
    // copies: cont of a permuted view, cpy with conversion, dup
    for (sty, dty) in [
        (GgmlType::F32, GgmlType::F32),
        (GgmlType::F32, GgmlType::F16),
        (GgmlType::F16, GgmlType::F32),
        (GgmlType::F32, GgmlType::BF16),
        (GgmlType::BF16, GgmlType::F32),
    ] {
        let mut b = next();
        let x = b.rand(sty, &[12, 5, 3]);
        let p = b.g.permute(x, [1, 2, 0, 3]);
        let dst = b.g.new_tensor(dty, &[3, 12, 5]);
        let o = b.g.cpy(p, dst);
        let tol = if sty == dty { F32_TOL } else { LOW_TOL };
        v.push(b.done(format!("cpy permuted {sty}->{dty}"), o, tol));
    }
    {
        let mut b = next();
        let x = b.rand(GgmlType::F32, &[12, 5, 3]);
        let t = b.g.transpose(x);
        let o = b.g.cont(t);
        v.push(b.done("cont transposed", o, F32_TOL));
        let mut b = next();
        let x = b.rand(GgmlType::F16, &[12, 5]);
        let o = b.g.dup(x);
        v.push(b.done("dup f16", o, F32_TOL));
    }
    // set_rows into F32/F16 with I32/I64 indices
    for dty in [GgmlType::F32, GgmlType::F16] {
        for ity in [GgmlType::I32, GgmlType::I64] {
            let mut b = next();
            let dst = b.rand(dty, &[16, 10]);
            let src = b.rand(GgmlType::F32, &[16, 3]);
            let idx: Vec<u8> = [7i64, 0, 4]
                .iter()
                .flat_map(|&i| {
                    if ity == GgmlType::I64 {
                        i.to_le_bytes().to_vec()
                    } else {
                        (i as i32).to_le_bytes().to_vec()
                    }
                })
                .collect();
            let ix = b.data(ity, &[3], idx);
            let o = b.g.set_rows(dst, src, ix);
            v.push(b.done(format!("set_rows {dty} idx={ity}"), o, tol_for(dty)));
        }
    }
    // concat along each dim
    for dim in 0..3usize {
        let mut b = next();
        let mut ne_b = [6i64, 4, 3];
        ne_b[dim] = 2;
        let x = b.rand(GgmlType::F32, &[6, 4, 3]);
        let y = b.rand(GgmlType::F32, &ne_b);
        let o = b.g.concat(x, y, dim);
        v.push(b.done(format!("concat dim={dim}"), o, F32_TOL));
    }
    // sorting
    for (name, k) in [("argsort asc", 0), ("argsort desc", -1), ("top_k", 8)] {
        let mut b = next();
        let x = b.rand(GgmlType::F32, &[128, 6]);
        let o = match k {
            0 => b.g.argsort(x, SortOrder::Asc),
            -1 => b.g.argsort(x, SortOrder::Desc),
            k => b.g.top_k(x, k),
        };
        v.push(b.done(name, o, 0.0));
    }
    // add_id
    {
        let mut b = next();
        let x = b.rand(GgmlType::F32, &[32, 4, 5]);
        let bias = b.rand(GgmlType::F32, &[32, 8]);
        let ids: Vec<i32> = (0..20).map(|i| i * 3 % 8).collect();
        let ids = b.i32s(&[4, 5], &ids);
        let o = b.g.add_id(x, bias, ids);
        v.push(b.done("add_id", o, F32_TOL));
    }
    // mul_mat: every weight type, decode and batch sizes, broadcasting,
    // strided activations
    for ty in WEIGHT_TYPES {
        for n in [1i64, 4, 33] {
            let mut b = next();
            let a = b.rand(ty, &[512, 24, 2]);
            let x = b.rand(GgmlType::F32, &[512, n, 4]);
            let o = b.g.mul_mat(a, x);
            v.push(b.done(format!("mul_mat {ty} n={n} bcast"), o, tol_for(ty)));
        }
        let mut b = next();
        let a = b.rand(ty, &[256, 20]);
        let x = b.rand(GgmlType::F32, &[40, 256]);
        let xt = b.g.transpose(x);
        let o = b.g.mul_mat(a, xt);
        v.push(b.done(format!("mul_mat {ty} strided b"), o, tol_for(ty)));
    }
    // decode (MMVQ): 1, 2 and 8 columns over rows of 1280 (a partial
    // staging chunk), and mul_mat_id with 8 of 128 experts for 1, 2 and 8
    // tokens: ids repeat across tokens (one weight read per expert group),
    // some are -1 (exact zeros), and b is shared or per slot
    for ty in WEIGHT_TYPES {
        for n in [1i64, 2, 8] {
            let mut b = next();
            let a = b.rand(ty, &[1280, 12]);
            let x = b.rand(GgmlType::F32, &[1280, n]);
            let o = b.g.mul_mat(a, x);
            v.push(b.done(format!("mmvq {ty} cols={n}"), o, tol_for(ty)));
        }
        for (n_tok, b_ne1) in [(1i64, 1i64), (2, 8), (8, 1)] {
            let mut b = next();
            let (n_expert, n_used) = (128i64, 8i64);
            let w = b.rand(ty, &[256, 8, n_expert]);
            let x = b.rand(GgmlType::F32, &[256, b_ne1, n_tok]);
            let mut ids = Vec::new();
            for t in 0..n_tok {
                for e in 0..n_used {
                    // a pool of 12 experts so tokens share some; slot 5 of
                    // every other token is -1
                    let id = if e == 5 && t % 2 == 1 {
                        -1
                    } else {
                        (b.r.below(12) * 10 + e as u64) as i32 % n_expert as i32
                    };
                    ids.push(id);
                }
            }
            let ids = b.i32s(&[n_used, n_tok], &ids);
            let o = b.g.mul_mat_id(w, x, ids);
            v.push(b.done(
                format!("mmvq_id {ty} 8 of 128 tokens={n_tok} b.ne1={b_ne1}"),
                o,
                tol_for(ty),
            ));
        }
    }
    // prompts (MMQ, grouped mul_mat_id): 17, 128 and 512 columns, edge
    // tiles of rows and columns (40 rows in a 64-row tile; 136 rows: 128
    // and 8; 17 columns in a 32-column tile), 128 columns over K = 1024 in
    // two K splits (few tiles); mul_mat_id with 8 of 128 experts, -1 rows,
    // and slot-remapped ids (a bank of 16 slots, ids through an I32 map on
    // the device)
    // (the 128-column cases draw from a seed stream of their own, so that
    // every other case keeps the inputs it had before they were added)
    let mut split_seed = 0u64;
    for ty in WEIGHT_TYPES {
        for n in [17i64, 128, 512] {
            let mut b = if n == 128 {
                split_seed += 1;
                B::new(split_seed * 0xD1B5_4A32_D192_ED03)
            } else {
                next()
            };
            let (k, m) = if n == 128 { (1024, 136) } else { (512, 40) };
            let a = b.rand(ty, &[k, m]);
            let x = b.rand(GgmlType::F32, &[k, n]);
            let o = b.g.mul_mat(a, x);
            v.push(b.done(format!("mmq {ty} cols={n}"), o, tol_for(ty)));
        }
        for n_tok in [17i64, 512] {
            for remap in [false, true] {
                let mut b = next();
                let (n_expert, n_used) = (128i64, 8i64);
                let n_bank = if remap { 16 } else { n_expert };
                let w = b.rand(ty, &[256, 40, n_bank]);
                let x = b.rand(GgmlType::F32, &[256, 1, n_tok]);
                let mut sel = Vec::new();
                for t in 0..n_tok {
                    for e in 0..n_used {
                        let id = if e == 3 && t % 3 == 0 {
                            -1
                        } else {
                            (b.r.below(16) * 8 + e as u64) as i32
                        };
                        sel.push(id);
                    }
                }
                let o = if remap {
                    // the cache's map: expert 8k + e sits in slot (k + e) % 16
                    let map: Vec<i32> =
                        (0..n_expert as i32).map(|x| (x / 8 + x % 8) % 16).collect();
                    let sel: Vec<i32> = sel.iter().map(|&x| x.max(0)).collect();
                    let sel = b.i32s(&[n_used * n_tok, 1], &sel);
                    let map = b.i32s(&[1, n_expert], &map);
                    let slots = b.g.get_rows(map, sel);
                    let slots = b.g.reshape(slots, &[n_used, n_tok]);
                    b.g.mul_mat_id(w, x, slots)
                } else {
                    let ids = b.i32s(&[n_used, n_tok], &sel);
                    b.g.mul_mat_id(w, x, ids)
                };
                let what = if remap {
                    "slot-remapped"
                } else {
                    "with -1 rows"
                };
                v.push(b.done(
                    format!("mmq_id {ty} 8 of 128 tokens={n_tok} {what}"),
                    o,
                    tol_for(ty),
                ));
            }
        }
    }
    {
        // deepseek2's absorbed MLA product: a 3D Q5_0 weight per head, b a
        // permuted view of part of each q row; then heavy-tailed activations
        let mut b = next();
        let a = b.rand(GgmlType::Q5_0, &[64, 256, 4]);
        let xf = b.rand(GgmlType::F32, &[96, 4, 34]);
        let x = b.g.view(xf, &[64, 4, 34], &[384, 1536], 0);
        let xp = b.g.permute(x, [0, 2, 1, 3]);
        let o = b.g.mul_mat(a, xp);
        v.push(b.done("mmq q5_0 per head, b a permuted row view", o, LOW_TOL));
        let mut b = next();
        let a = b.rand(GgmlType::Q4K, &[256, 384]);
        let n = 256 * 34;
        let xs: Vec<u8> = (0..n)
            .flat_map(|i| {
                let u = b.r.f();
                let v = if i % 97 == 0 { u * 40.0 } else { u * u * u };
                v.to_le_bytes()
            })
            .collect();
        let x = b.data(GgmlType::F32, &[256, 34], xs);
        let o = b.g.mul_mat(a, x);
        v.push(b.done("mmq q4_K heavy-tailed activations", o, LOW_TOL));
    }
    // flash attention: 1, 17 and 512 queries over 1 to 4096 cached cells,
    // causal F16 mask, GQA (4 heads over 2), F32/F16/BF16 and quantized
    // K/V caches, sinks (gpt-oss), ALiBi and softcap, MLA's head shapes
    // (k 576, v 512, one k/v head: deepseek2)
    let fa_cases: [(i64, i64, GgmlType, GgmlType); 14] = [
        (1, 1, GgmlType::F16, GgmlType::F16),
        (1, 4096, GgmlType::F16, GgmlType::F16),
        (17, 4096, GgmlType::F16, GgmlType::F16),
        (512, 512, GgmlType::F16, GgmlType::F16),
        (17, 300, GgmlType::F32, GgmlType::F32),
        (17, 300, GgmlType::BF16, GgmlType::BF16),
        (1, 1000, GgmlType::Q8_0, GgmlType::Q8_0),
        (17, 300, GgmlType::Q4_0, GgmlType::Q4_0),
        (17, 300, GgmlType::Q4_1, GgmlType::Q5_1),
        (17, 300, GgmlType::Q5_0, GgmlType::IQ4NL),
        (512, 600, GgmlType::Q8_0, GgmlType::F16),
        (1, 64, GgmlType::IQ4NL, GgmlType::Q8_0),
        // a Q8_0 cache at decode over 4096 cells (segments, combine with
        // sinks) and 17 queries over it
        (1, 4096, GgmlType::Q8_0, GgmlType::Q8_0),
        (17, 4096, GgmlType::Q8_0, GgmlType::Q8_0),
    ];
    for (i, (n_q, n_kv, kty, vty)) in fa_cases.into_iter().enumerate() {
        let mut b = next();
        let (d, n_head, n_head_kv) = (64i64, 4i64, 2i64);
        let q = b.rand(GgmlType::F32, &[d, n_q, n_head]);
        let k = b.rand(kty, &[d, n_kv, n_head_kv]);
        let vc = b.rand(vty, &[d, n_kv, n_head_kv]);
        let mask = b.data(GgmlType::F16, &[n_kv, n_q], causal_mask(n_q, n_kv));
        let (max_bias, softcap) = if i == 4 { (8.0, 30.0) } else { (0.0, 0.0) };
        let o =
            b.g.flash_attn_ext(q, k, vc, Some(mask), 0.125, max_bias, softcap);
        let with_sinks = i == 3 || i == 7 || i == 12;
        if with_sinks {
            let sinks = b.rand(GgmlType::F32, &[n_head]);
            b.g.flash_attn_ext_add_sinks(o, sinks);
        }
        let tol = if kty == GgmlType::F32 && vty == GgmlType::F32 {
            F32_TOL
        } else {
            LOW_TOL
        };
        v.push(b.done(
            format!(
                "flash_attn q={n_q} cells={n_kv} k={kty} v={vty}{}{}",
                if with_sinks { " sinks" } else { "" },
                if i == 4 { " alibi softcap" } else { "" }
            ),
            o,
            tol,
        ));
    }
    // the kernels' other shapes: head dimension 128 with 8 query heads on
    // one KV head (the vector kernel's packed rows and cell segments at
    // decode, the tensor-core kernel's 128 instance for prompts), a head
    // dimension neither tensor-core instance takes whose F16 rows are not
    // 16-byte multiples (68: element loads of K), BF16 prompts, F32 K
    // with Q8_0 V
    let fa_more: [(i64, i64, i64, i64, GgmlType, GgmlType); 6] = [
        (128, 1, 4096, 8, GgmlType::F16, GgmlType::F16),
        (128, 2, 777, 8, GgmlType::Q8_0, GgmlType::Q8_0),
        (128, 33, 1000, 8, GgmlType::F16, GgmlType::F16),
        (128, 64, 256, 8, GgmlType::BF16, GgmlType::BF16),
        (68, 20, 200, 2, GgmlType::F16, GgmlType::F16),
        (64, 3, 2500, 4, GgmlType::F32, GgmlType::Q8_0),
    ];
    for (d, n_q, n_kv, group, kty, vty) in fa_more {
        let mut b = next();
        let (n_head_kv, n_head) = (8 / group.min(8), 8i64);
        let q = b.rand(GgmlType::F32, &[d, n_q, n_head]);
        let k = b.rand(kty, &[d, n_kv, n_head_kv]);
        let vc = b.rand(vty, &[d, n_kv, n_head_kv]);
        let mask = b.data(GgmlType::F16, &[n_kv, n_q], causal_mask(n_q, n_kv));
        let o = b.g.flash_attn_ext(q, k, vc, Some(mask), 0.09, 0.0, 0.0);
        let tol = if kty == GgmlType::F32 && vty == GgmlType::F32 {
            F32_TOL
        } else {
            LOW_TOL
        };
        v.push(b.done(
            format!(
                "flash_attn d={d} q={n_q} cells={n_kv} heads {n_head}/{n_head_kv} k={kty} v={vty}"
            ),
            o,
            tol,
        ));
    }
    for (n_q, n_kv) in [(1i64, 256i64), (17, 256)] {
        let mut b = next();
        let n_head = 4i64;
        let q = b.rand(GgmlType::F32, &[576, n_q, n_head]);
        let k = b.rand(GgmlType::F16, &[576, n_kv, 1]);
        let vc = b.rand(GgmlType::F16, &[512, n_kv, 1]);
        let o = b.g.flash_attn_ext(q, k, vc, None, 0.04, 0.0, 0.0);
        v.push(b.done(
            format!("flash_attn MLA 576/512 q={n_q} cells={n_kv}"),
            o,
            LOW_TOL,
        ));
    }
    // the decode MoE FFN as llama's moe_ffn builds it (the fused expert
    // mat-vec: gate + up + GLU, down + router weights + the sum over the
    // slots): every quantized type at 1 token (both fusions) and 3 (gate/up
    // only), gpt-oss's clamped SwiGLU with per-expert biases, GeGLU
    for (ty, n_tok, act, biases) in moe_ffn_cases() {
        let mut b = next();
        let o = moe_ffn_graph(&mut b, ty, n_tok, act, biases);
        let act_name = match act {
            GluOp::Swiglu => "swiglu",
            GluOp::Geglu => "geglu",
            GluOp::SwigluOai { .. } => "swiglu_oai",
        };
        v.push(b.done(
            format!("moe_ffn {ty} tokens={n_tok} {act_name} biases={biases}"),
            o,
            tol_for(ty),
        ));
    }
    // mul_mat_id: every weight type, b shared (ne1 = 1) or per expert
    for ty in WEIGHT_TYPES {
        for (b_ne1, n_tok) in [(1i64, 1i64), (2, 5), (1, 40)] {
            let mut b = next();
            let n_used = 2i64;
            let w = b.rand(ty, &[256, 16, 6]);
            let x = b.rand(GgmlType::F32, &[256, b_ne1, n_tok]);
            let ids: Vec<i32> = (0..n_used * n_tok).map(|_| b.r.below(6) as i32).collect();
            let ids = b.i32s(&[n_used, n_tok], &ids);
            let o = b.g.mul_mat_id(w, x, ids);
            v.push(b.done(
                format!("mul_mat_id {ty} b.ne1={b_ne1} tokens={n_tok}"),
                o,
                tol_for(ty),
            ));
        }
    }
    // the expert cache's chain: slots = get_rows(I32 slot map, selected ids)
    // on the device, then mul_mat_id over a bank holding fewer experts
    // (slot-remapped ids); hybrid's: the CPU map sends device experts to -1
    // (rows skipped, exact zeros), then add_id by the router's ids
    let (n_expert, n_used) = (8i64, 2i64);
    let cached = [1i32, 3, 4, 6];
    for ty in WEIGHT_TYPES {
        for n_tok in [1i64, 6] {
            for hybrid in [false, true] {
                let mut b = next();
                let sel: Vec<i32> = (0..n_used * n_tok)
                    .map(|_| cached[b.r.below(4) as usize])
                    .collect();
                let map: Vec<i32> = (0..n_expert as i32)
                    .map(|e| match cached.iter().position(|&c| c == e) {
                        // hybrid: expert 3 runs on the device, so -1 here
                        Some(_) if hybrid && e == 3 => -1,
                        Some(slot) => slot as i32,
                        None => -1,
                    })
                    .collect();
                let sel = b.i32s(&[n_used, n_tok], &sel);
                let map = b.i32s(&[1, n_expert], &map);
                let flat = b.g.reshape(sel, &[n_used * n_tok, 1]);
                let slots = b.g.get_rows(map, flat);
                let slots = b.g.reshape(slots, &[n_used, n_tok]);
                let bank = b.rand(ty, &[256, 16, cached.len() as i64]);
                let x = b.rand(GgmlType::F32, &[256, 1, n_tok]);
                let mut o = b.g.mul_mat_id(bank, x, slots);
                if hybrid {
                    let bias = b.rand(GgmlType::F32, &[16, n_expert]);
                    o = b.g.add_id(o, bias, sel);
                }
                let what = if hybrid {
                    "hybrid -1 rows + add_id"
                } else {
                    "cache slot-remapped"
                };
                v.push(b.done(
                    format!("get_rows I32 map -> mul_mat_id {ty} {what} tokens={n_tok}"),
                    o,
                    tol_for(ty),
                ));
            }
        }
    }
    v
}

/// (weight type, tokens, GLU, per-expert biases) of the MoE FFN cases.
fn moe_ffn_cases() -> Vec<(GgmlType, i64, GluOp, bool)> {
    let mut v = Vec::new();
    for ty in WEIGHT_TYPES.into_iter().filter(|t| t.is_quantized()) {
        for n_tok in [1, 3] {
            v.push((ty, n_tok, GluOp::Swiglu, false));
        }
    }
    let oai = GluOp::SwigluOai {
        alpha: 1.702.into(),
        limit: 7.0.into(),
    };
    v.push((GgmlType::MXFP4, 1, oai, true));
    v.push((GgmlType::Q4_0, 2, oai, true));
    v.push((GgmlType::Q8_0, 1, GluOp::Geglu, false));
    v
}

/// `moe_ffn`'s graph for `n_tok` tokens: 4 of 32 experts of 256 x 256
/// (gate, up, down of type `ty`), the router weights, the GLU, optional
/// per-expert biases through `add_id`; returns the sum over the slots.
fn moe_ffn_graph(b: &mut B, ty: GgmlType, n_tok: i64, act: GluOp, biases: bool) -> TensorId {
    let (n_embd, ff, n_expert, n_used) = (256i64, 256i64, 32i64, 4i64);
    let x = b.rand(GgmlType::F32, &[n_embd, 1, n_tok]);
    let mut ids = Vec::new();
    for _ in 0..n_tok {
        let mut chosen: Vec<i32> = Vec::new();
        while chosen.len() < n_used as usize {
            let e = b.r.below(n_expert as u64) as i32;
            if !chosen.contains(&e) {
                chosen.push(e);
            }
        }
        ids.extend(chosen);
    }
    let ids = b.i32s(&[n_used, n_tok], &ids);
    let weights = b.rand(GgmlType::F32, &[1, n_used, n_tok]);
    let (wu, wg, wd) = (
        b.rand(ty, &[n_embd, ff, n_expert]),
        b.rand(ty, &[n_embd, ff, n_expert]),
        b.rand(ty, &[ff, n_embd, n_expert]),
    );
    let mut up = b.g.mul_mat_id(wu, x, ids);
    let mut gate = b.g.mul_mat_id(wg, x, ids);
    if biases {
        let (bu, bg) = (
            b.rand(GgmlType::F32, &[ff, n_expert]),
            b.rand(GgmlType::F32, &[ff, n_expert]),
        );
        up = b.g.add_id(up, bu, ids);
        gate = b.g.add_id(gate, bg, ids);
    }
    let par = b.g.glu_split(gate, up, act);
    let mut experts = b.g.mul_mat_id(wd, par, ids);
    if biases {
        let bd = b.rand(GgmlType::F32, &[n_embd, n_expert]);
        experts = b.g.add_id(experts, bd, ids);
    }
    let experts = b.g.mul(experts, weights);
    let (nb1, nb2) = (b.g.tensor(experts).nb[1], b.g.tensor(experts).nb[2]);
    let mut out = b.g.view_2d(experts, n_embd, n_tok, nb2, 0);
    for i in 1..n_used as usize {
        let e = b.g.view_2d(experts, n_embd, n_tok, nb2, i * nb1);
        out = b.g.add(out, e);
    }
    out
}

#[test]
fn the_moe_ffn_fuses_on_cuda_as_planned() {
    use ggml_cuda::fusion::{plan, Fused, Step};
    for (ty, n_tok, act, biases) in moe_ffn_cases() {
        let mut b = B::new(5);
        let o = moe_ffn_graph(&mut b, ty, n_tok, act, biases);
        let c = b.done("plan", o, 0.0);
        let nodes = c.g.nodes().to_vec();
        let steps = plan(&c.g, &nodes);
        let glu = steps
            .iter()
            .filter(|s| {
                matches!(
                    s,
                    Step::Fused {
                        fused: Fused::ExpertGlu { .. },
                        ..
                    }
                )
            })
            .count();
        let down = steps
            .iter()
            .filter(|s| {
                matches!(
                    s,
                    Step::Fused {
                        fused: Fused::ExpertDown { .. },
                        ..
                    }
                )
            })
            .count();
        // Q4_1 / Q5_1 (Q8_1 activations) are not fused
        let fusable = !matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1);
        let want_down = usize::from(fusable && n_tok == 1);
        assert_eq!(glu, usize::from(fusable), "{ty} tokens={n_tok}: {steps:?}");
        assert_eq!(down, want_down, "{ty} tokens={n_tok}: {steps:?}");
        // every node is run once: by itself or inside one fused step
        let covered: usize = steps
            .iter()
            .map(|s| match s {
                Step::Node(_) => 1,
                Step::Fused { nodes, .. } => nodes.len(),
            })
            .sum();
        assert_eq!(covered, nodes.len());
        // an intermediate the caller reads (an output) is not fused away
        let find = |g: &Graph, pick: &dyn Fn(&ggml_core::Op) -> bool| {
            nodes.iter().copied().find(|&n| pick(&g.tensor(n).op))
        };
        let fused_kinds = |g: &Graph| -> (bool, bool) {
            let steps = plan(g, &nodes);
            let has = |f: &dyn Fn(&Fused) -> bool| {
                steps
                    .iter()
                    .any(|s| matches!(s, Step::Fused { fused, .. } if f(fused)))
            };
            (
                has(&|f| matches!(f, Fused::ExpertGlu { .. })),
                has(&|f| matches!(f, Fused::ExpertDown { .. })),
            )
        };
        if fusable {
            let mut g = c.g.clone();
            let mul = find(&g, &|op| *op == ggml_core::Op::Mul).expect("the weights' mul");
            g.set_output(mul);
            assert_eq!(fused_kinds(&g), (true, false), "{ty}: mul is an output");
            let mut g = c.g.clone();
            let mm = find(&g, &|op| *op == ggml_core::Op::MulMatId).expect("up");
            g.set_output(mm);
            assert!(!fused_kinds(&g).0, "{ty}: up is an output");
        }
    }
}

/// Without a usable GPU, `CUDA0` is the emulated device: the real backend
/// and `kernels.cu` run on the CPU.
fn use_emulator_without_gpu() {
    if let Some(reason) = ggml_cuda::unavailable_reason() {
        println!("no GPU ({reason}): running on the emulated CUDA0");
        ggml_cuda::emulator::fallback(&reason);
    }
}

#[test]
fn ops_match_cpu() {
    use_emulator_without_gpu();
    let gpu = CudaBackend::new(0).expect("CUDA device 0");
    let cpu = CpuBackend::new(2);
    let (mut passed, mut skipped) = (0, 0);
    let mut failures = Vec::new();
    // OPS_FILTER=text runs only the cases whose name contains it
    let filter = std::env::var("OPS_FILTER").ok();
    for c in cases() {
        if filter
            .as_ref()
            .is_some_and(|f| !c.name.contains(f.as_str()))
        {
            continue;
        }
        let nodes = c.g.nodes().to_vec();
        if let Some(&n) = nodes.iter().find(|&&n| !gpu.supports_op(&c.g, n)) {
            failures.push(format!(
                "{}: CUDA does not claim {}",
                c.name,
                c.g.tensor(n).op.name()
            ));
            continue;
        }
        if let Some(&n) = nodes.iter().find(|&&n| !cpu.supports_op(&c.g, n)) {
            println!(
                "skipped {}: the CPU backend lacks {}",
                c.name,
                c.g.tensor(n).op.name()
            );
            skipped += 1;
            continue;
        }
        let want = run_on(&cpu, &c);
        let got = run_on(&gpu, &c);
        match (got, want) {
            (Ok(got), Ok(want)) => {
                let e = nmse(&got, &want);
                let finite = got.iter().all(|x| x.is_finite());
                if std::env::var_os("OPS_PRINT").is_some() {
                    println!("{}: NMSE {e:.3e}", c.name);
                }
                if e <= c.tol && finite && got.len() == want.len() {
                    passed += 1;
                } else {
                    failures.push(format!("{}: NMSE {e:.3e} > {:.0e}", c.name, c.tol));
                }
            }
            (Err(e), _) => failures.push(format!("{}: CUDA error: {e}", c.name)),
            (_, Err(e)) => {
                println!("skipped {}: CPU error: {e}", c.name);
                skipped += 1;
            }
        }
    }
    println!(
        "ops_vs_cpu: {passed} passed, {} failed, {skipped} skipped (CPU lacks the op)",
        failures.len()
    );
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
    if gpu.is_emulated() {
        let st = ggml_cuda::emulator::stats(0);
        println!("emulated CUDA0: {} kernel launches", st.launches);
        assert!(st.launches as usize >= passed, "{st:?}");
        assert!(ggml_cuda::emulator::take_hazards().is_empty());
    }
}

#[test]
fn bad_expert_id_is_an_error_not_a_read() {
    use_emulator_without_gpu();
    let gpu = CudaBackend::new(0).expect("CUDA device 0");
    let mut b = B::new(99);
    let w = b.rand(GgmlType::Q8_0, &[64, 8, 4]);
    let x = b.rand(GgmlType::F32, &[64, 1, 2]);
    let ids = b.i32s(&[2, 2], &[0, 4, 1, -1]);
    let o = b.g.mul_mat_id(w, x, ids);
    let c = b.done("bad ids", o, 0.0);
    let err = run_on(&gpu, &c).expect_err("out-of-range ids must fail");
    assert!(err.contains("out of range"), "{err}");
    // the backend stays usable
    let mut b = B::new(7);
    let a = b.rand(GgmlType::F32, &[8, 2]);
    let y = b.rand(GgmlType::F32, &[8, 2]);
    let o = b.g.add(a, y);
    let c = b.done("after", o, 0.0);
    run_on(&gpu, &c).expect("backend usable after an id error");
}

/// The prompt kernels' sm_75 instruction paths (int8 m16n8k32 as four
/// m8n8k16, f16 m16n8k16 as two m16n8k8), taken by the emulator when it
/// emulates a Turing GPU: MMQ for Q4_K (a scale per 32), Q6_K (a scale per
/// 16: m16n8k16 there), Q8_0, and grouped `mul_mat_id`.
#[test]
fn mmq_on_the_sm_75_paths_matches_cpu() {
    use_emulator_without_gpu();
    let gpu = CudaBackend::new(0).expect("CUDA device 0");
    if !gpu.is_emulated() {
        println!("skipped: a real GPU takes its own architecture's path");
        return;
    }
    let cpu = CpuBackend::new(2);
    let wanted = [
        "mmq q4_K cols=17",
        "mmq q6_K cols=17",
        "mmq q8_0 cols=128",
        "mmq_id q4_K 8 of 128 tokens=17 with -1 rows",
    ];
    ggml_cuda::emu_kernels::set_emulated_arch(750);
    let mut ran = 0;
    for c in cases()
        .into_iter()
        .filter(|c| wanted.contains(&c.name.as_str()))
    {
        let got = run_on(&gpu, &c);
        let want = run_on(&cpu, &c).expect("the CPU runs it");
        let got = got.unwrap_or_else(|e| panic!("{}: CUDA error: {e}", c.name));
        let e = nmse(&got, &want);
        assert!(
            e <= c.tol,
            "{} at sm_75: NMSE {e:.3e} > {:.0e}",
            c.name,
            c.tol
        );
        ran += 1;
    }
    ggml_cuda::emu_kernels::set_emulated_arch(900);
    assert_eq!(ran, wanted.len());
}
