//! `kernel-bench`: achieved GB/s or TFLOP/s of the CUDA kernels the bench
//! model spends its time in, from CUDA events (the backend's event
//! timeline), with the fraction of an H200's 4.8 TB/s or 990 dense TFLOP/s:
//!
//! - decode `mul_mat_id` Q4_K (MMVQ: `k_quantize_q8_1` + `k_mmvq_id`),
//! - prompt `mul_mat` Q4_K (MMQ: `k_quantize_q8_1` + `k_mmq`),
//! - prompt `mul_mat_id` Q4_K (grouped: `k_quantize_q8_1` + `k_moe_group`
//!   + `k_mmq_id`),
//! - flash attention, prompt (`k_fa_mma_64`) and decode (`k_fa_vec_64` +
//!   `k_fa_combine`), F16 K/V.
//!
//! ```sh
//! cargo run --release -p ggml-cuda --example kernel-bench -- [--small] [--reps N] [--json]
//! ```
//!
//! Shapes are the 4-layer bench file's (Qwen3-30B-A3B's layers: embd 2048,
//! expert ff 768, 128 experts of which 8 used, 32 heads over 4 K/V heads of
//! 64, a 512-token prompt, 4096 cached cells for decode attention). Without
//! a GPU it runs on the emulated CUDA0 with `--small` shapes (implied) and
//! every figure is labelled `emulated`: CPU time of the emulator, not a GPU
//! measurement. `--json` prints one JSON object per kernel.

use std::process::ExitCode;
use std::sync::Arc;

use ggml_core::tensor::TensorData;
use ggml_core::timeline::SpanKind;
use ggml_core::{
    BackendDevice, BackendDiagnostics, BackendStream, BufferUsage, GgmlType, Graph, TensorId,
};
use ggml_cuda::CudaBackend;

/// H200 HBM bandwidth, GB/s.
const PEAK_GBS: f64 = 4800.0;
/// H200 dense FP16 tensor-core rate, TFLOP/s.
const PEAK_TFLOPS: f64 = 990.0;

const USAGE: &str = "usage: kernel-bench [--small] [--reps N (default 5)] [--json]";

struct Opts {
    small: bool,
    reps: usize,
    json: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        small: false,
        reps: 5,
        json: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--small" => o.small = true,
            "--json" => o.json = true,
            "--reps" => {
                let v = it.next().ok_or("--reps needs a value")?;
                o.reps = v
                    .parse()
                    .map_err(|_| format!("--reps {v}: not a whole number"))?;
                if o.reps == 0 {
                    return Err("--reps must be at least 1".into());
                }
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(o)
}

/// The bench shapes (full, or `--small` for the emulator).
struct Shapes {
    embd: i64,
    ff: i64,
    experts: i64,
    used: i64,
    prompt: i64,
    heads: i64,
    heads_kv: i64,
    head_dim: i64,
    cells: i64,
}

impl Shapes {
    fn new(small: bool) -> Shapes {
        if small {
            Shapes {
                embd: 256,
                ff: 64,
                experts: 16,
                used: 4,
                prompt: 64,
                heads: 4,
                heads_kv: 2,
                head_dim: 64,
                cells: 256,
            }
        } else {
            Shapes {
                embd: 2048,
                ff: 768,
                experts: 128,
                used: 8,
                prompt: 512,
                heads: 32,
                heads_kv: 4,
                head_dim: 64,
                cells: 4096,
            }
        }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Random bytes of `n` elements of F32, F16 or Q4_K (sane scales).
fn rand_bytes(r: &mut Rng, ty: GgmlType, n: usize) -> Vec<u8> {
    match ty {
        GgmlType::F32 => (0..n).flat_map(|_| r.f().to_le_bytes()).collect(),
        GgmlType::F16 => (0..n)
            .flat_map(|_| half::f16::from_f32(r.f()).to_le_bytes())
            .collect(),
        _ => {
            let bs = ty.type_size();
            let mut out = vec![0u8; n / ty.blck_size() * bs];
            for b in out.chunks_mut(bs) {
                for x in b.iter_mut() {
                    *x = r.next() as u8;
                }
                // Q4_K: d and dmin
                b[0..2].copy_from_slice(&half::f16::from_f32(0.004).to_le_bytes());
                b[2..4].copy_from_slice(&half::f16::from_f32(0.002).to_le_bytes());
            }
            out
        }
    }
}

/// One kernel case: a graph, its inputs, the op timed, and what it moves.
struct Case {
    name: &'static str,
    shape: String,
    g: Graph,
    inputs: Vec<(TensorId, Vec<u8>)>,
    /// Bytes the op must read at least (weights, K/V).
    bytes: f64,
    /// Multiply-adds times two.
    flops: f64,
    /// Whether the kernel is bound by memory (report GB/s) or compute.
    memory_bound: bool,
}

struct Builder {
    g: Graph,
    r: Rng,
    inputs: Vec<(TensorId, Vec<u8>)>,
}

impl Builder {
    fn new(seed: u64) -> Builder {
        Builder {
            g: Graph::new(),
            r: Rng(seed),
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
    /// `used` distinct expert ids per token.
    fn ids(&mut self, used: i64, tokens: i64, experts: i64) -> TensorId {
        let mut v = Vec::new();
        for _ in 0..tokens {
            let start = self.r.next() % experts as u64;
            let step = 1 + 2 * (self.r.next() % (experts as u64 / 2).max(1));
            let mut chosen: Vec<i32> = Vec::new();
            let mut e = start;
            while chosen.len() < used as usize {
                if !chosen.contains(&(e as i32)) {
                    chosen.push(e as i32);
                }
                e = (e + step) % experts as u64;
                if chosen.len() < used as usize && e == start {
                    e = (e + 1) % experts as u64;
                }
            }
            v.extend(chosen);
        }
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.data(GgmlType::I32, &[used, tokens], bytes)
    }
    fn done(
        mut self,
        name: &'static str,
        shape: String,
        out: TensorId,
        bytes: f64,
        flops: f64,
        memory_bound: bool,
    ) -> Case {
        self.g.build_forward_expand(out);
        Case {
            name,
            shape,
            g: self.g,
            inputs: self.inputs,
            bytes,
            flops,
            memory_bound,
        }
    }
}

fn q4k_bytes(n: i64) -> f64 {
    (n / 256 * 144) as f64
}

fn cases(s: &Shapes) -> Vec<Case> {
    let mut v = Vec::new();
    // decode mul_mat_id: one token, `used` experts' gate-sized matrices
    let mut b = Builder::new(0x9E37_79B9_7F4A_7C15);
    let w = b.rand(GgmlType::Q4K, &[s.embd, s.ff, s.experts]);
    let x = b.rand(GgmlType::F32, &[s.embd, 1, 1]);
    let ids = b.ids(s.used, 1, s.experts);
    let o = b.g.mul_mat_id(w, x, ids);
    let n = s.used * s.ff * s.embd;
    v.push(b.done(
        "decode mul_mat_id Q4_K",
        format!(
            "{} of {} experts [{} x {}], 1 token",
            s.used, s.experts, s.embd, s.ff
        ),
        o,
        q4k_bytes(n),
        2.0 * n as f64,
        true,
    ));
    // prompt mul_mat: an embd x embd projection over the prompt
    let mut b = Builder::new(0x2545_F491_4F6C_DD1D);
    let a = b.rand(GgmlType::Q4K, &[s.embd, s.embd]);
    let x = b.rand(GgmlType::F32, &[s.embd, s.prompt]);
    let o = b.g.mul_mat(a, x);
    v.push(b.done(
        "prompt mul_mat Q4_K",
        format!("[{} x {}] x {} columns", s.embd, s.embd, s.prompt),
        o,
        q4k_bytes(s.embd * s.embd),
        2.0 * (s.embd * s.embd * s.prompt) as f64,
        false,
    ));
    // prompt mul_mat_id: the prompt's tokens over their experts
    let mut b = Builder::new(0x1234_5678_9ABC_DEF1);
    let w = b.rand(GgmlType::Q4K, &[s.embd, s.ff, s.experts]);
    let x = b.rand(GgmlType::F32, &[s.embd, 1, s.prompt]);
    let ids = b.ids(s.used, s.prompt, s.experts);
    let o = b.g.mul_mat_id(w, x, ids);
    v.push(b.done(
        "prompt mul_mat_id Q4_K",
        format!(
            "{} tokens x {} of {} experts [{} x {}]",
            s.prompt, s.used, s.experts, s.embd, s.ff
        ),
        o,
        q4k_bytes(s.experts * s.ff * s.embd),
        2.0 * (s.prompt * s.used * s.ff * s.embd) as f64,
        false,
    ));
    // flash attention over the prompt (causal) and one decode query
    for (name, n_q, n_kv) in [
        ("flash attention prompt F16", s.prompt, s.prompt),
        ("flash attention decode F16", 1, s.cells),
    ] {
        let mut b = Builder::new(0x0F0F_1234_5555_AAAA ^ n_kv as u64);
        let d = s.head_dim;
        let q = b.rand(GgmlType::F32, &[d, n_q, s.heads]);
        let k = b.rand(GgmlType::F16, &[d, n_kv, s.heads_kv]);
        let vv = b.rand(GgmlType::F16, &[d, n_kv, s.heads_kv]);
        let mask: Vec<u8> = (0..n_q)
            .flat_map(|j| {
                (0..n_kv).flat_map(move |c| {
                    let m = if c > n_kv - n_q + j {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    };
                    half::f16::from_f32(m).to_le_bytes()
                })
            })
            .collect();
        let mask = b.data(GgmlType::F16, &[n_kv, n_q], mask);
        let o =
            b.g.flash_attn_ext(q, k, vv, Some(mask), 1.0 / (d as f32).sqrt(), 0.0, 0.0);
        // cells attended: causal over the prompt, all for decode
        let attended: i64 = (0..n_q).map(|j| n_kv - n_q + j + 1).sum();
        v.push(b.done(
            name,
            format!(
                "{n_q} queries x {} heads over {n_kv} cells, head {d}, {} K/V heads",
                s.heads, s.heads_kv
            ),
            o,
            (2 * n_kv * s.heads_kv * d * 2) as f64,
            4.0 * (attended * s.heads * d) as f64,
            n_q == 1,
        ));
    }
    v
}

/// Load a case on the backend; returns the graph with data attached.
fn load(be: &CudaBackend, c: &Case) -> Result<Graph, String> {
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
            buffer: Arc::clone(&buf),
            offset: off,
        });
    }
    for (id, bytes) in &c.inputs {
        g.write_bytes(*id, bytes).map_err(|e| e.to_string())?;
    }
    Ok(g)
}

/// Mean op time in seconds over `reps` computes, from the event timeline.
fn time_op(be: &CudaBackend, g: &Graph, reps: usize) -> Result<f64, String> {
    let nodes = g.nodes().to_vec();
    be.compute(g, &nodes).map_err(|e| e.to_string())?; // warm-up
    be.synchronize().map_err(|e| e.to_string())?;
    if !be.set_event_timeline(true) {
        return Err("the backend records no event timeline".into());
    }
    for _ in 0..reps {
        be.compute(g, &nodes).map_err(|e| e.to_string())?;
    }
    be.synchronize().map_err(|e| e.to_string())?;
    let tl = be
        .take_event_timeline()
        .map_err(|e| e.to_string())?
        .ok_or("no timeline recorded")?;
    be.set_event_timeline(false);
    let ns: u64 = tl
        .spans
        .iter()
        .filter(|s| s.kind == SpanKind::Op)
        .map(|s| s.end_ns.saturating_sub(s.start_ns))
        .sum();
    Ok(ns as f64 * 1e-9 / reps as f64)
}

fn json_str(s: &str) -> String {
    format!("{s:?}")
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut o = match parse(&args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("kernel-bench: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(why) = ggml_cuda::unavailable_reason() {
        eprintln!("kernel-bench: no GPU ({why}): emulated CUDA0, --small shapes");
        ggml_cuda::emulator::fallback(&why);
        o.small = true;
    }
    let be = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("kernel-bench: CUDA0: {e}");
            return ExitCode::from(1);
        }
    };
    let on = if be.is_emulated() {
        "emulated"
    } else {
        "device"
    };
    let name = be.device_name().unwrap_or_else(|_| "?".into());
    let mut failed = false;
    for c in cases(&Shapes::new(o.small)) {
        let r = load(&be, &c).and_then(|g| time_op(&be, &g, o.reps));
        match r {
            Ok(secs) => {
                let gbs = c.bytes / secs / 1e9;
                let tflops = c.flops / secs / 1e12;
                let (value, unit, frac) = if c.memory_bound {
                    (gbs, "GB/s", gbs / PEAK_GBS)
                } else {
                    (tflops, "TFLOP/s", tflops / PEAK_TFLOPS)
                };
                if o.json {
                    println!(
                        "{{\"kernel\": {}, \"shape\": {}, \"time_us\": {:.2}, \"gbs\": {:.3}, \"tflops\": {:.4}, \"value\": {:.4}, \"unit\": \"{unit}\", \"fraction_of_h200\": {:.5}, \"measured_on\": \"{on}\", \"device_name\": {}}}",
                        json_str(c.name),
                        json_str(&c.shape),
                        secs * 1e6,
                        gbs,
                        tflops,
                        value,
                        frac,
                        json_str(&name)
                    );
                } else {
                    println!(
                        "{:<30} {:>10.1} us  {:>9.3} {unit:<7} {:>7.3}% of H200 ({on}; {})",
                        c.name,
                        secs * 1e6,
                        value,
                        100.0 * frac,
                        c.shape
                    );
                }
            }
            Err(e) => {
                failed = true;
                eprintln!("kernel-bench: {}: {e}", c.name);
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
