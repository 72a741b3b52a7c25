//! Synthetic MoE models: every key and tensor of a real GGUF of the
//! architecture, with random weights drawn deterministically from a seed.
//!
//! The weights are not uniform noise in every respect: the router rows of
//! each layer have different scales (so some experts are picked far more
//! often than others, as in trained models), and the output head's rows are
//! scaled by token class (word pieces > printable bytes > other bytes >
//! special tokens), so sampled text is mostly words rather than control
//! bytes, and end-of-text is rare.
//!
//! Generation is chunked (64 Ki elements per chunk, each with its own RNG
//! stream), runs on all cores, and gives the same bytes whatever the
//! thread count.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context as _, Result};
use ggml_core::gguf::GgufWriter;
use ggml_core::GgmlType;

use crate::arch;
use crate::vocab::{SynthVocab, TokenClass};

/// Architectures `--synth` can write.
pub const SYNTH_ARCHS: &[&str] = &["qwen3moe", "deepseek2", "gpt-oss"];

/// Bumped whenever the generator's output changes, so cached default
/// models are regenerated.
pub const GENERATOR_VERSION: u32 = 2;

/// The shape and type of a synthetic model.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthParams {
    /// `general.architecture`.
    pub arch: String,
    /// Decoder layers.
    pub n_layer: usize,
    /// Experts per layer.
    pub n_expert: usize,
    /// Experts used per token.
    pub n_expert_used: usize,
    /// Embedding width.
    pub n_embd: usize,
    /// Width of one expert's FFN.
    pub n_ff_exp: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Vocabulary size (`None`: the byte-level BPE vocabulary as learned,
    /// about 520 tokens; larger values pad it with control tokens).
    pub n_vocab: Option<usize>,
    /// BPE merges to learn.
    pub n_merges: usize,
    /// Training context length written to the file.
    pub n_ctx_train: usize,
    /// Type of the weight matrices (norms and the router stay F32).
    pub ty: GgmlType,
    /// RNG seed.
    pub seed: u64,
}

impl SynthParams {
    /// The embedded default model of `llama-run` and `llama-bench`.
    pub fn default_model() -> SynthParams {
        SynthParams {
            arch: "qwen3moe".into(),
            n_layer: 4,
            n_expert: 16,
            n_expert_used: 4,
            n_embd: 256,
            n_ff_exp: 256,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            n_vocab: None,
            n_merges: 256,
            n_ctx_train: 4096,
            ty: DEFAULT_MODEL_TYPE,
            seed: 42,
        }
    }

    /// Check the shape; errors name the flag to change.
    pub fn validate(&self) -> Result<()> {
        if !SYNTH_ARCHS.contains(&self.arch.as_str()) {
            bail!(
                "--arch {}: cannot synthesize this architecture (supported: {})",
                self.arch,
                SYNTH_ARCHS.join(", ")
            );
        }
        let nonzero = [
            ("--layers", self.n_layer),
            ("--experts", self.n_expert),
            ("--used", self.n_expert_used),
            ("--embd", self.n_embd),
            ("--ff", self.n_ff_exp),
            ("--heads", self.n_head),
            ("--heads-kv", self.n_head_kv),
            ("--head-dim", self.head_dim),
        ];
        for (flag, v) in nonzero {
            if v == 0 {
                bail!("{flag} must be at least 1");
            }
        }
        if self.n_expert_used > self.n_expert {
            bail!(
                "--used {} exceeds --experts {}",
                self.n_expert_used,
                self.n_expert
            );
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            bail!(
                "--heads {} is not a multiple of --heads-kv {}",
                self.n_head,
                self.n_head_kv
            );
        }
        if !self.head_dim.is_multiple_of(2) {
            bail!("--head-dim {} must be even (RoPE pairs)", self.head_dim);
        }
        if self.arch == "deepseek2" && !self.head_dim.is_multiple_of(4) {
            bail!(
                "--head-dim {} must be a multiple of 4 for deepseek2 (its rope part is half a head, in pairs)",
                self.head_dim
            );
        }
        if !matches!(self.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
            && !quantize_supported(self.ty)
        {
            bail!(
                "--type {}: cannot write weights of this type (supported: {})",
                self.ty,
                supported_types().join(", ")
            );
        }
        let blck = self.ty.blck_size();
        for (flag, v) in [
            ("--embd", self.n_embd),
            ("--ff", self.n_ff_exp),
            ("--heads x --head-dim", self.n_head * self.head_dim),
        ] {
            if !v.is_multiple_of(blck) {
                bail!(
                    "{flag} = {v} is not a multiple of {}'s block size {blck}",
                    self.ty
                );
            }
        }
        if let Some(v) = self.n_vocab {
            let natural = SynthVocab::build(self.n_merges, None).len();
            if v < natural {
                bail!("--vocab {v} is smaller than the synthetic vocabulary's {natural} tokens");
            }
        }
        Ok(())
    }

    /// A string naming everything that determines the file's bytes.
    pub fn descriptor(&self) -> String {
        format!(
            "v{GENERATOR_VERSION} {} L{} E{} K{} D{} F{} H{} Hkv{} hd{} V{:?} M{} C{} {} s{}",
            self.arch,
            self.n_layer,
            self.n_expert,
            self.n_expert_used,
            self.n_embd,
            self.n_ff_exp,
            self.n_head,
            self.n_head_kv,
            self.head_dim,
            self.n_vocab,
            self.n_merges,
            self.n_ctx_train,
            self.ty,
            self.seed
        )
    }
}

/// Matrix type of the embedded default model.
pub const DEFAULT_MODEL_TYPE: GgmlType = GgmlType::F16;

/// Weight types `--type` accepts.
pub fn supported_types() -> Vec<&'static str> {
    GgmlType::ALL
        .iter()
        .copied()
        .filter(|&t| {
            matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) || quantize_supported(t)
        })
        .map(|t| t.name())
        .collect()
}

/// Whether this build can quantize to `ty` (every block type with a CPU
/// quantizer, except the activation-only Q8_1 / Q8_K).
fn quantize_supported(ty: GgmlType) -> bool {
    ty.is_quantized()
        && !matches!(ty, GgmlType::Q8_1 | GgmlType::Q8K)
        && ggml_core::quants::cpu_traits(ty).is_some()
}

/// llama.cpp's `general.file_type` for a model whose matrices are all `ty`.
fn file_type(ty: GgmlType) -> u32 {
    crate::ftype::pure_file_type(ty).unwrap_or(0)
}

/// How a tensor's values are drawn.
#[derive(Clone, Debug)]
pub enum Init {
    /// 1 + uniform noise of this standard deviation (norm weights).
    Ones(f32),
    /// Uniform with this standard deviation.
    Uniform(f32),
    /// Uniform with this standard deviation times a factor per row.
    RowScaled(f32, Vec<f32>),
}

struct Spec {
    name: String,
    ne: Vec<i64>,
    ty: GgmlType,
    init: Init,
}

/// splitmix64: a fast RNG with independent streams per seed.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Two uniform values in [-1, 1).
    fn pair(&mut self) -> (f32, f32) {
        let x = self.next();
        const S: f32 = 1.0 / (1u32 << 23) as f32;
        (
            ((x >> 40) as f32) * S - 1.0,
            (((x >> 8) & 0xff_ffff) as f32) * S - 1.0,
        )
    }

    /// Roughly normal (sum of four uniforms), mean 0, sd 1.
    fn normal(&mut self) -> f32 {
        let (a, b) = self.pair();
        let (c, d) = self.pair();
        (a + b + c + d) * 0.866_025_4 // sqrt(3)/2: var of U(-1,1) is 1/3
    }
}

fn hash_str(seed: u64, s: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    Rng(h).next()
}

/// FNV-1a of a string, for cache file names.
pub fn fnv64(s: &str) -> u64 {
    hash_str(0, s)
}

const CHUNK: usize = 1 << 16;
const SQRT3: f32 = 1.732_050_8;

/// Convert `src` to `ty`'s bytes in `dst` (exactly the row size of `src`).
fn convert(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    match ty {
        GgmlType::F32 => dst.copy_from_slice(bytemuck::cast_slice(src)),
        GgmlType::F16 => {
            for (d, &s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&half::f16::from_f32(s).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (d, &s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&half::bf16::from_f32(s).to_le_bytes());
            }
        }
        _ => {
            let t = ggml_core::quants::cpu_traits(ty).expect("validate() checked the type");
            (t.from_float)(src, dst)
        }
    }
}

/// Quantized tensors larger than this are assembled from pools of
/// quantized blocks (see `fill`).
pub const POOL_MIN_ELEMENTS: usize = 8 << 20;
/// Elements per pool (4096 blocks of 256).
const POOL_ELEMENTS: usize = 1 << 20;

/// The distinct row scales of an init (for pools), `None` if too many.
fn pool_scales(init: &Init) -> Option<(f32, Vec<f32>)> {
    match init {
        Init::Uniform(sd) => Some((*sd, vec![1.0])),
        Init::RowScaled(sd, rows) => {
            let mut v: Vec<f32> = Vec::new();
            for r in rows {
                if !v.contains(r) {
                    if v.len() == 8 {
                        return None;
                    }
                    v.push(*r);
                }
            }
            Some((*sd, v))
        }
        Init::Ones(_) => None,
    }
}

/// Fill one tensor's bytes in parallel; `done` counts elements finished.
///
/// Small tensors, and all float ones, are drawn and converted value by
/// value. Quantizing 10^9 values with the K-quant reference quantizers
/// takes minutes on two cores, so a quantized tensor of more than
/// [`POOL_MIN_ELEMENTS`] is assembled from blocks picked at random from a
/// pool of 2^20 values quantized once (one pool per distinct row scale):
/// same shapes, bytes, value statistics and compute cost, in seconds.
fn fill(spec: &Spec, seed: u64, n_threads: usize, done: &AtomicUsize) -> Result<Vec<u8>> {
    let n: usize = spec.ne.iter().product::<i64>() as usize;
    let ne0 = spec.ne[0] as usize;
    let ty = spec.ty;
    let nbytes = ty
        .row_size(n as u64)
        .with_context(|| format!("{}: {} elements do not fit {}", spec.name, n, ty))?;
    let chunk_bytes = ty
        .row_size(CHUNK as u64)
        .expect("CHUNK is a multiple of every block size");
    let tseed = hash_str(seed, &spec.name);

    // pools of quantized blocks, one per distinct row scale
    let mut pools: Vec<(f32, Vec<u8>)> = Vec::new();
    if ty.is_quantized() && n > POOL_MIN_ELEMENTS {
        if let Some((sd, scales)) = pool_scales(&spec.init) {
            let scratch = AtomicUsize::new(0);
            for (k, sc) in scales.into_iter().enumerate() {
                let pool_spec = Spec {
                    name: format!("{}#pool{k}", spec.name),
                    ne: vec![POOL_ELEMENTS as i64],
                    ty,
                    init: Init::Uniform(sd * sc),
                };
                pools.push((sc, fill(&pool_spec, seed, n_threads, &scratch)?));
            }
        }
    }
    let pool_of_row = |row: usize| -> &[u8] {
        let sc = match &spec.init {
            Init::RowScaled(_, rows) => rows[row],
            _ => 1.0,
        };
        &pools
            .iter()
            .find(|p| p.0 == sc)
            .expect("a pool for every scale")
            .1
    };
    let (blck, ts) = (ty.blck_size(), ty.type_size());
    let pool_blocks = (POOL_ELEMENTS / blck) as u64;

    let mut out = vec![0u8; nbytes];
    {
        let work = Mutex::new(out.chunks_mut(chunk_bytes).enumerate());
        std::thread::scope(|s| {
            for _ in 0..n_threads.max(1) {
                s.spawn(|| {
                    let mut buf = vec![0f32; CHUNK];
                    loop {
                        let Some((ci, dst)) = work.lock().expect("no panics while held").next()
                        else {
                            break;
                        };
                        let start = ci * CHUNK;
                        let len = CHUNK.min(n - start);
                        let mut rng = Rng(tseed ^ (ci as u64).wrapping_mul(0xa076_1d64_78bd_642f));
                        if !pools.is_empty() {
                            for (b, d) in dst.chunks_exact_mut(ts).enumerate() {
                                let pool = pool_of_row((start + b * blck) / ne0);
                                let k = (rng.next() % pool_blocks) as usize;
                                d.copy_from_slice(&pool[k * ts..(k + 1) * ts]);
                            }
                            done.fetch_add(len, Ordering::Relaxed);
                            continue;
                        }
                        let vals = &mut buf[..len];
                        for pair in vals.chunks_mut(2) {
                            let (a, b) = rng.pair();
                            pair[0] = a;
                            if pair.len() > 1 {
                                pair[1] = b;
                            }
                        }
                        match &spec.init {
                            Init::Ones(sd) => {
                                vals.iter_mut().for_each(|v| *v = 1.0 + *v * SQRT3 * sd)
                            }
                            Init::Uniform(sd) => vals.iter_mut().for_each(|v| *v *= SQRT3 * sd),
                            Init::RowScaled(sd, rows) => {
                                for (j, v) in vals.iter_mut().enumerate() {
                                    *v *= SQRT3 * sd * rows[(start + j) / ne0];
                                }
                            }
                        }
                        convert(ty, vals, dst);
                        done.fetch_add(len, Ordering::Relaxed);
                    }
                });
            }
        });
    }
    Ok(out)
}

fn specs(p: &SynthParams, vocab: &SynthVocab) -> Vec<Spec> {
    let (d, f, e, v) = (
        p.n_embd as i64,
        p.n_ff_exp as i64,
        p.n_expert as i64,
        vocab.len() as i64,
    );
    let (hd, qd, kvd) = (
        p.head_dim as i64,
        (p.n_head * p.head_dim) as i64,
        (p.n_head_kv * p.head_dim) as i64,
    );
    let sd_in = |fan_in: i64| 1.0 / (fan_in as f32).sqrt();
    let mut rng = Rng(hash_str(p.seed, "shape-of-things"));
    let mut out = Vec::new();
    // matrices whose rows do not split into the type's blocks (deepseek2's
    // attn_k_b in Q4_K) get llama.cpp's fallback type, as llama-quantize does
    let mut add = |name: String, ne: Vec<i64>, ty: GgmlType, init: Init| {
        let ty = match ty {
            t if t == p.ty && ne.len() >= 2 => {
                crate::ftype::row_type(ne[0], t).unwrap_or(GgmlType::F16)
            }
            t => t,
        };
        out.push(Spec { name, ne, ty, init })
    };
    add(
        "token_embd.weight".into(),
        vec![d, v],
        p.ty,
        Init::Uniform(1.0),
    );
    add(
        "output_norm.weight".into(),
        vec![d],
        GgmlType::F32,
        Init::Ones(0.05),
    );
    // output head: logits with sd ~4 for word pieces, less for the rest
    let head_rows: Vec<f32> = vocab
        .classes
        .iter()
        .map(|c| match c {
            TokenClass::SpaceWord => 1.0,
            TokenClass::Word => 0.8,
            TokenClass::Printable => 0.6,
            TokenClass::OtherByte => 0.15,
            TokenClass::Special => 0.05,
        })
        .collect();
    add(
        "output.weight".into(),
        vec![d, v],
        p.ty,
        Init::RowScaled(4.0 * sd_in(d), head_rows),
    );
    for il in 0..p.n_layer {
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        match p.arch.as_str() {
            "deepseek2" => {
                if arch::deepseek2_layer(p, il, &mut add) {
                    continue;
                }
            }
            "gpt-oss" => arch::gptoss_layer(p, il, &mut add),
            _ => {
                add(n("attn_norm"), vec![d], GgmlType::F32, Init::Ones(0.05));
                add(n("attn_q"), vec![d, qd], p.ty, Init::Uniform(sd_in(d)));
                add(n("attn_k"), vec![d, kvd], p.ty, Init::Uniform(sd_in(d)));
                add(n("attn_v"), vec![d, kvd], p.ty, Init::Uniform(sd_in(d)));
                add(
                    n("attn_output"),
                    vec![qd, d],
                    p.ty,
                    Init::Uniform(sd_in(qd)),
                );
                add(n("attn_q_norm"), vec![hd], GgmlType::F32, Init::Ones(0.05));
                add(n("attn_k_norm"), vec![hd], GgmlType::F32, Init::Ones(0.05));
                add(n("ffn_norm"), vec![d], GgmlType::F32, Init::Ones(0.05));
            }
        }
        // router: rows with log-normal scales, so routing is skewed
        let scales: Vec<f32> = (0..p.n_expert)
            .map(|_| (0.9 * rng.normal()).exp())
            .collect();
        add(
            n("ffn_gate_inp"),
            vec![d, e],
            GgmlType::F32,
            Init::RowScaled(2.0 * sd_in(d), scales),
        );
        add(
            n("ffn_gate_exps"),
            vec![d, f, e],
            p.ty,
            Init::Uniform(sd_in(d)),
        );
        add(
            n("ffn_up_exps"),
            vec![d, f, e],
            p.ty,
            Init::Uniform(sd_in(d)),
        );
        add(
            n("ffn_down_exps"),
            vec![f, d, e],
            p.ty,
            Init::Uniform(sd_in(f)),
        );
    }
    out
}

/// Build the model in memory. `progress` is called from this thread with
/// the fraction of elements generated.
pub fn synthesize(p: &SynthParams, progress: &mut dyn FnMut(f32)) -> Result<GgufWriter> {
    p.validate()?;
    let vocab = SynthVocab::build(p.n_merges, p.n_vocab);
    let a = p.arch.as_str();
    let mut w = GgufWriter::new();
    let u = |v: usize| v as u32;
    w.set_kv("general.architecture", a);
    w.set_kv("general.name", format!("ggml-rs synthetic {a}"));
    w.set_kv("general.file_type", file_type(p.ty));
    w.set_kv("general.description", p.descriptor());
    w.set_kv(format!("{a}.context_length"), u(p.n_ctx_train));
    w.set_kv(format!("{a}.embedding_length"), u(p.n_embd));
    w.set_kv(format!("{a}.block_count"), u(p.n_layer));
    w.set_kv(
        format!("{a}.feed_forward_length"),
        u(p.n_ff_exp * p.n_expert_used),
    );
    w.set_kv(format!("{a}.expert_feed_forward_length"), u(p.n_ff_exp));
    w.set_kv(format!("{a}.expert_count"), u(p.n_expert));
    w.set_kv(format!("{a}.expert_used_count"), u(p.n_expert_used));
    w.set_kv(format!("{a}.attention.head_count"), u(p.n_head));
    w.set_kv(format!("{a}.attention.head_count_kv"), u(p.n_head_kv));
    w.set_kv(format!("{a}.attention.key_length"), u(p.head_dim));
    w.set_kv(format!("{a}.attention.value_length"), u(p.head_dim));
    w.set_kv(format!("{a}.attention.layer_norm_rms_epsilon"), 1e-6f32);
    w.set_kv(format!("{a}.rope.freq_base"), 1_000_000f32);
    crate::arch::arch_kvs(p, &mut w);
    w.set_kv("tokenizer.ggml.model", "gpt2");
    w.set_kv("tokenizer.ggml.pre", "gpt-2");
    w.set_kv("tokenizer.ggml.tokens", vocab.tokens.clone());
    w.set_kv("tokenizer.ggml.token_type", vocab.token_types.clone());
    w.set_kv("tokenizer.ggml.merges", vocab.merges.clone());
    w.set_kv("tokenizer.ggml.bos_token_id", vocab.eos);
    w.set_kv("tokenizer.ggml.eos_token_id", vocab.eos);
    w.set_kv("tokenizer.ggml.padding_token_id", vocab.eos);
    w.set_kv("tokenizer.ggml.add_bos_token", false);

    let specs = specs(p, &vocab);
    let total: usize = specs
        .iter()
        .map(|s| s.ne.iter().product::<i64>() as usize)
        .sum();
    let n_threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let done = AtomicUsize::new(0);
    type Tensors = Vec<(String, Vec<i64>, GgmlType, Vec<u8>)>;
    let result: Mutex<Result<Tensors>> = Mutex::new(Ok(Vec::new()));
    let finished = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut tensors = Vec::with_capacity(specs.len());
            for spec in &specs {
                match fill(spec, p.seed, n_threads, &done) {
                    Ok(bytes) => tensors.push((spec.name.clone(), spec.ne.clone(), spec.ty, bytes)),
                    Err(e) => {
                        *result.lock().expect("not poisoned") = Err(e);
                        finished.store(true, Ordering::Release);
                        return;
                    }
                }
            }
            *result.lock().expect("not poisoned") = Ok(tensors);
            finished.store(true, Ordering::Release);
        });
        while !finished.load(Ordering::Acquire) {
            progress(done.load(Ordering::Relaxed) as f32 / total.max(1) as f32);
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    progress(1.0);
    let tensors = result.into_inner().expect("not poisoned")?;
    for (name, ne, ty, bytes) in tensors {
        w.add_tensor(name, &ne, ty, bytes)?;
    }
    Ok(w)
}

/// Write `w` to `path` atomically: a temporary file in the same directory,
/// then a rename, so a reader never sees a partial model.
pub fn write_atomic(w: &GgufWriter, path: &Path) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create directory '{}'", dir.display()))?;
    }
    let file_name = path
        .file_name()
        .with_context(|| format!("'{}' is not a file path", path.display()))?
        .to_string_lossy()
        .into_owned();
    let tmp = path.with_file_name(format!(".{file_name}.tmp-{}", std::process::id()));
    if let Err(e) = w.write_file(&tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write '{}'", tmp.display()));
    }
    std::fs::rename(&tmp, path).with_context(|| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot move '{}' to '{}'", tmp.display(), path.display())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> SynthParams {
        SynthParams {
            n_layer: 1,
            n_expert: 4,
            n_expert_used: 2,
            n_embd: 64,
            n_ff_exp: 64,
            n_head: 2,
            n_head_kv: 1,
            head_dim: 32,
            ty: GgmlType::F32,
            ..SynthParams::default_model()
        }
    }

    #[test]
    fn same_seed_same_bytes() {
        let a = synthesize(&small(), &mut |_| {})
            .unwrap()
            .to_bytes()
            .unwrap();
        let b = synthesize(&small(), &mut |_| {})
            .unwrap()
            .to_bytes()
            .unwrap();
        assert_eq!(a, b);
        let c = synthesize(&SynthParams { seed: 7, ..small() }, &mut |_| {})
            .unwrap()
            .to_bytes()
            .unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let e = SynthParams {
            n_expert_used: 9,
            ..small()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("--used"));
        let e = SynthParams {
            arch: "gpt9".into(),
            ..small()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("qwen3moe"));
    }
}
