//! Fixture access shared by the llama integration tests: llama.cpp's
//! reference tokens and logits for the small models of the fixtures'
//! `models/`, found by `fixtures::fixture_path` (tests/data, then
//! ../shared/fixtures); a test prints the `SkipReason` of an absent one
//! (`fixtures::or_skip!`) and goes on without it.
#![allow(dead_code)]

use std::path::PathBuf;

// not every test crate that includes this module skips
#[allow(unused_imports)]
pub use fixtures::or_skip;
use fixtures::{fixture_path, SkipReason};

/// SIM0 with the simulated-clock profile `prof`, 2 threads, every batch
/// offloaded (the prefetch and hybrid tests' device).
pub fn sim0_with_profile(
    prof: ggml_core::SimProfile,
) -> Option<std::sync::Arc<dyn ggml_core::Backend>> {
    llama::device::open_device_with(
        "SIM0",
        &llama::device::DeviceOptions {
            n_threads: 2,
            offload_min_batch: 1,
            sim_profile: Some(prof),
            sim_mem: None,
            ..Default::default()
        },
    )
    .expect("SIM0")
}

/// `models/NAME.gguf`, or why it is absent.
pub fn model_gguf(name: &str) -> Result<PathBuf, SkipReason> {
    fixture_path(&format!("models/{name}.gguf"))
}

/// `models/NAME.gguf` of a model in the lean set tracked in tests/data
/// (tiny-qwen3moe-f32); its absence is an incomplete checkout, not a skip.
pub fn lean_model_gguf(name: &str) -> PathBuf {
    fixtures::lean_path(&format!("models/{name}.gguf"))
}

/// Every model fixture's name.
pub const MODELS: [&str; 12] = [
    "tiny-qwen3moe-f32",
    "tiny-qwen2moe-f32",
    "tiny-mixtral-f16",
    "tiny-olmoe-f32",
    "tiny-qwen3moe-q8_0",
    "tiny-qwen3moe-q4_0",
    "tiny-qwen3moe-q4_k",
    "tiny-qwen3moe-q6_k",
    "small-qwen3moe-spm-f16",
    "tiny-deepseek2-f32",
    "tiny-deepseek2-q4_k",
    "tiny-gptoss-mxfp4",
];

/// One model's reference data.
pub struct Fixture {
    pub name: String,
    pub gguf: PathBuf,
    pub prompt: String,
    pub tokens: Vec<i32>,
    /// `[n_prompt][n_vocab]`
    pub logits: Vec<f32>,
    pub gen: Vec<i32>,
    /// `[16][n_vocab]`
    pub genlogits: Vec<f32>,
    /// NMSE bound: 5e-5 for F32/F16 models, 5e-3 for quantized ones (MXFP4 included).
    pub bound: f64,
}

fn read(p: PathBuf) -> Vec<u8> {
    std::fs::read(&p).unwrap_or_else(|e| panic!("reading fixture {}: {e}", p.display()))
}

impl Fixture {
    /// The model's files (`models/NAME.{gguf,prompt.txt,tokens,logits,gen,genlogits}`),
    /// or why one of them is absent.
    pub fn load(name: &str) -> Result<Fixture, SkipReason> {
        let f = |ext: &str| fixture_path(&format!("models/{name}.{ext}"));
        let quant = ["q8_0", "q4_0", "q4_k", "q6_k", "mxfp4"]
            .iter()
            .any(|q| name.ends_with(q));
        Ok(Fixture {
            name: name.to_string(),
            gguf: f("gguf")?,
            prompt: String::from_utf8(read(f("prompt.txt")?)).expect("prompt is UTF-8"),
            tokens: bytemuck::pod_collect_to_vec(&read(f("tokens")?)),
            logits: bytemuck::pod_collect_to_vec(&read(f("logits")?)),
            gen: bytemuck::pod_collect_to_vec(&read(f("gen")?)),
            genlogits: bytemuck::pod_collect_to_vec(&read(f("genlogits")?)),
            bound: if quant { 5e-3 } else { 5e-5 },
        })
    }

    /// The fixture with llama.cpp's own flash-attention reference in place of
    /// the default (flash attention off) one: `NAME.fa.logits`, `NAME.fa.gen`
    /// and `NAME.fa.genlogits`, written by `scripts/llama-cpp-logits.sh` with
    /// llama.cpp 0.5.0-dev and otherwise the same settings (tests/data/README.md).
    pub fn load_flash_attn(name: &str) -> Result<Fixture, SkipReason> {
        let mut fx = Fixture::load(name)?;
        let f = |ext: &str| fixture_path(&format!("models/{name}.fa.{ext}"));
        fx.logits = bytemuck::pod_collect_to_vec(&read(f("logits")?));
        fx.gen = bytemuck::pod_collect_to_vec(&read(f("gen")?));
        fx.genlogits = bytemuck::pod_collect_to_vec(&read(f("genlogits")?));
        Ok(fx)
    }

    pub fn n_vocab(&self) -> usize {
        self.logits.len() / self.tokens.len()
    }

    /// The reference's allowed greedy prefix: positions up to the first row
    /// whose top-2 margin is below `4·sqrt(bound)·σ` (fixtures README).
    /// Row 0 is the last prompt row, row i+1 is genlogits row i.
    pub fn reliable_greedy_len(&self) -> usize {
        let n = self.n_vocab();
        let np = self.tokens.len();
        let mut rows: Vec<&[f32]> = vec![&self.logits[(np - 1) * n..np * n]];
        rows.extend(self.genlogits.chunks(n));
        let mut len = 0;
        for (i, r) in rows.iter().enumerate().take(self.gen.len()) {
            if margin(r) < 4.0 * self.bound.sqrt() * sigma(r) {
                break;
            }
            len = i + 1;
        }
        len
    }
}

/// Whether two logit vectors are the same bits (same length, every value
/// bit for bit).
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// mean((a - b)^2) / mean(b^2)
pub fn nmse(ours: &[f32], reference: &[f32]) -> f64 {
    assert_eq!(ours.len(), reference.len(), "logits lengths differ");
    let mut num = 0.0f64;
    let mut den = 0.0f64;
    for (a, b) in ours.iter().zip(reference) {
        num += (*a as f64 - *b as f64).powi(2);
        den += (*b as f64).powi(2);
    }
    num / den
}

fn margin(row: &[f32]) -> f64 {
    let mut v: Vec<f32> = row.to_vec();
    v.sort_by(|a, b| b.total_cmp(a));
    (v[0] - v[1]) as f64
}

fn sigma(row: &[f32]) -> f64 {
    let n = row.len() as f64;
    let mean = row.iter().map(|&x| x as f64).sum::<f64>() / n;
    (row.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt()
}

impl Fixture {
    /// The fixture's model, on `device` with every expert in host memory
    /// (`--cpu-moe`), or on the CPU alone when `device` is `None`.
    pub fn model_with_host_experts(&self, device: Option<&str>) -> std::sync::Arc<llama::Model> {
        let dev = device.and_then(|d| llama::device::open_device(d, 2, 1).expect("device"));
        let params = llama::ModelParams {
            device: dev,
            placement: llama::placement::Placement {
                cpu_moe: device.is_some(),
                ..Default::default()
            },
            progress: None,
            ..Default::default()
        };
        std::sync::Arc::new(llama::Model::load(&self.gguf, params).expect("load"))
    }
}

impl Fixture {
    /// Run the fixture's prompt through `ctx` (every row's logits), then
    /// feed `n_gen` of the reference's generated tokens one at a time
    /// (teacher forcing): the prompt rows and the forced rows.
    pub fn prompt_and_forced(
        &self,
        ctx: &mut llama::Context,
        n_gen: usize,
    ) -> (Vec<f32>, Vec<f32>) {
        ctx.decode(&self.tokens, true).expect("prompt");
        let mut prompt = Vec::with_capacity(self.logits.len());
        for i in 0..self.tokens.len() {
            prompt.extend_from_slice(ctx.logits(i).expect("row"));
        }
        let mut forced = Vec::new();
        for &t in &self.gen[..n_gen.min(self.gen.len())] {
            ctx.decode(&[t], false).expect("decode");
            forced.extend_from_slice(ctx.logits(0).expect("row"));
        }
        (prompt, forced)
    }
}
