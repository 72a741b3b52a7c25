//! llama-bench: prompt processing (pp) and text generation (tg) throughput,
//! as llama.cpp's llama-bench prints it (markdown table or JSON).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::{Parser, ValueEnum};
use llama::moe_cache::{CacheStats, MoeCacheParams};
use llama::{Context, Model};
use serde::Serialize;
use tools::cli::{self, BatchArgs, MoeCacheArgs, PlacementArgs};

const TOOL: &str = "llama-bench";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Md,
    Json,
}

#[derive(Parser, Debug)]
#[command(
    name = "llama-bench",
    version,
    about = "Measure prompt processing (pp) and generation (tg) speed (llama.cpp's llama-bench).",
    after_help = "Lists take comma-separated values or repeated flags: -p 128,512 -t 1,2.\n\
Multi-letter short flags as in llama.cpp: -ngl, -ub, -ot, -cmoe, -ncmoe, -dev (and -nomb for --offload-min-batch).\n\
Without -m, benchmarks the embedded default model."
)]
struct Args {
    /// model paths (default: the embedded synthetic model)
    #[arg(
        short = 'm',
        long = "model",
        value_name = "FNAME",
        value_delimiter = ','
    )]
    model: Vec<PathBuf>,

    /// prompt lengths: a ppN test decodes N random tokens as one batch (0 = none)
    #[arg(short = 'p', long = "n-prompt", value_name = "N", value_delimiter = ',', default_values_t = [512])]
    n_prompt: Vec<usize>,

    /// generation lengths: a tgN test decodes N tokens one at a time (0 = none)
    #[arg(short = 'n', long = "n-gen", value_name = "N", value_delimiter = ',', default_values_t = [128])]
    n_gen: Vec<usize>,

    /// repetitions of each test
    #[arg(
        short = 'r',
        long = "repetitions",
        value_name = "N",
        default_value_t = 5
    )]
    repetitions: usize,

    /// CPU threads (default: all cores)
    #[arg(short = 't', long = "threads", value_name = "N", value_delimiter = ',')]
    threads: Vec<usize>,

    #[command(flatten)]
    batch: BatchArgs,

    #[command(flatten)]
    placement: PlacementArgs,

    #[command(flatten)]
    moe_cache: MoeCacheArgs,

    /// output format
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Md)]
    output: Output,

    /// skip the warmup run before each test
    #[arg(long = "no-warmup")]
    no_warmup: bool,

    /// print the placement of every tensor
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
}

/// One result, with llama-bench's JSON field names where they apply.
#[derive(Serialize, Debug, Clone)]
struct TestResult {
    build_commit: String,
    model_filename: String,
    model_type: String,
    model_size: u64,
    model_n_params: u64,
    backends: String,
    n_batch: usize,
    n_ubatch: usize,
    n_threads: usize,
    type_k: String,
    type_v: String,
    n_gpu_layers: i64,
    cpu_moe: bool,
    n_cpu_moe: usize,
    n_prompt: usize,
    n_gen: usize,
    test_time: String,
    avg_ns: u64,
    stddev_ns: u64,
    avg_ts: f64,
    stddev_ts: f64,
    samples_ns: Vec<u64>,
    samples_ts: Vec<f64>,
    /// Expert bytes copied host -> device per token (offloaded runs).
    h2d_bytes_experts_per_token: f64,
    /// What whole-tensor copies would move per token.
    h2d_bytes_full_copy_per_token: f64,
    /// Other bytes copied host -> device per token.
    h2d_bytes_other_per_token: f64,
    /// Experts copied per token.
    experts_copied_per_token: f64,
    /// `--moe-cache-mib` of this test (`0` = off, `auto`, or MiB).
    moe_cache_mib: String,
    /// The cache's budget in MiB as resolved (0 = no cache).
    moe_cache_budget_mib: f64,
    /// The cache's policy (empty when there is no cache).
    moe_cache_policy: String,
    /// Decode-ubatch hit rate of the cache.
    moe_cache_hit_rate: f64,
    /// Prompt-ubatch hit rate of the cache.
    moe_cache_hit_rate_prompt: f64,
    /// Bytes uploaded into the cache per token.
    moe_cache_bytes_uploaded_per_token: f64,
}

impl TestResult {
    fn test_name(&self) -> String {
        if self.n_prompt > 0 {
            format!("pp{}", self.n_prompt)
        } else {
            format!("tg{}", self.n_gen)
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse_from(cli::normalize_args(std::env::args_os()));
    cli::main_wrapper(TOOL, || run(&args))
}

/// llama.cpp's names of `general.file_type` values.
fn ftype_name(ft: u32) -> &'static str {
    match ft {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        25 => "IQ4_NL - 4.5 bpw",
        30 => "IQ4_XS - 4.25 bpw",
        32 => "BF16",
        38 => "MXFP4 MoE",
        _ => "?",
    }
}

fn model_type(model: &Model) -> String {
    let n = model.n_params() as f64;
    let size = if n >= 1e9 {
        format!("{:.0}B", n / 1e9)
    } else {
        format!("{:.0}M", n / 1e6)
    };
    let ft = model
        .file
        .get_u32("general.file_type")
        .ok()
        .flatten()
        .map_or("?", ftype_name);
    format!("{} {size} {ft}", model.hparams.arch.name())
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// xorshift64* for random prompt tokens.
struct Rng(u64);
impl Rng {
    fn token(&mut self, n_vocab: usize) -> i32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n_vocab as u64) as i32
    }
}

/// Run one repetition with `n_threads` threads; returns nanoseconds and the
/// transfer counters.
fn run_once(
    model: &std::sync::Arc<Model>,
    a: &Args,
    n_threads: usize,
    n_prompt: usize,
    n_gen: usize,
    cache: MoeCacheParams,
    rng: &mut Rng,
) -> Result<(u64, llama::TransferStats, Option<CacheStats>)> {
    let n_vocab = model.hparams.n_vocab;
    let mut params = a
        .batch
        .context_params((n_prompt + n_gen).max(1), n_threads, &a.placement);
    params.moe_cache = cache;
    let mut ctx = Context::new(model.clone(), params).context("cannot create the context")?;
    let tokens: Vec<i32> = (0..n_prompt.max(n_gen))
        .map(|_| rng.token(n_vocab))
        .collect();
    let t0 = Instant::now();
    if n_prompt > 0 {
        for chunk in tokens[..n_prompt].chunks(a.batch.batch_size) {
            ctx.decode(chunk, false).context("decode failed")?;
        }
    } else {
        for &t in &tokens[..n_gen] {
            ctx.decode(&[t], false).context("decode failed")?;
        }
    }
    Ok((
        t0.elapsed().as_nanos() as u64,
        ctx.stats(),
        ctx.moe_cache_stats(),
    ))
}

fn run(a: &Args) -> Result<()> {
    if a.repetitions == 0 {
        bail!("-r must be at least 1");
    }
    a.batch.check()?;
    if a.threads.contains(&0) {
        bail!("-t must be at least 1");
    }
    let caches = a.moe_cache.all_params(&a.placement)?;
    let threads = if a.threads.is_empty() {
        vec![cli::default_threads()]
    } else {
        a.threads.clone()
    };
    let models: Vec<Option<PathBuf>> = if a.model.is_empty() {
        vec![None]
    } else {
        a.model.iter().cloned().map(Some).collect()
    };
    // fail on a bad path before any benchmark runs
    for m in models.iter().flatten() {
        cli::check_model_path(m)?;
    }
    // tests: pp for each -p, tg for each -n (llama-bench's order)
    let tests: Vec<(usize, usize)> = a
        .n_prompt
        .iter()
        .filter(|&&p| p > 0)
        .map(|&p| (p, 0))
        .chain(a.n_gen.iter().filter(|&&n| n > 0).map(|&n| (0, n)))
        .collect();
    if tests.is_empty() {
        bail!("no tests: every -p and -n value is 0");
    }
    let mut results = Vec::new();
    let stdout = std::io::stdout();
    let mut header_done = false;
    for m in &models {
        for &nt in &threads {
            let loaded = cli::load_model(TOOL, m.as_deref(), &a.placement, nt)?;
            let model = &loaded.model;
            let backend = cli::device_name(model);
            if a.verbose {
                eprintln!("{TOOL}: placement: {}", cli::placement_summary(model));
                eprint!("{}", cli::placement_table(model));
            }
            let offloaded = backend != "CPU";
            if a.output == Output::Md && !header_done {
                let mut out = stdout.lock();
                let extra = if offloaded {
                    " cache MiB | cache hits | experts h2d/tok |"
                } else {
                    ""
                };
                let extra_sep = if offloaded {
                    " --------: | ---------: | --------------: |"
                } else {
                    ""
                };
                writeln!(
                    out,
                    "| model                          |       size |     params | backend    | threads |            test |{extra}                  t/s |"
                )?;
                writeln!(
                    out,
                    "| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: |{extra_sep} -------------------: |"
                )?;
                out.flush()?;
                header_done = true;
            }
            for (&(np, ng), (cache_arg, cache)) in tests.iter().flat_map(|t| {
                a.moe_cache
                    .moe_cache_mib
                    .iter()
                    .zip(caches.iter().copied())
                    .map(move |c| (t, c))
            }) {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (np as u64) << 20 ^ ng as u64);
                if !a.no_warmup {
                    if np > 0 {
                        run_once(model, a, nt, np, 0, cache, &mut rng)?;
                    } else {
                        run_once(model, a, nt, 0, 1, cache, &mut rng)?;
                    }
                }
                let n_tok = (np + ng) as f64;
                let mut samples_ns = Vec::new();
                let mut traffic = [0f64; 4];
                let mut cache_sum = [0f64; 3];
                let mut cache_info = (0f64, String::new());
                for _ in 0..a.repetitions {
                    let (ns, st, cs) = run_once(model, a, nt, np, ng, cache, &mut rng)?;
                    if let Some(c) = cs {
                        let t = c.total();
                        cache_sum[0] += t.hit_rate_decode();
                        cache_sum[1] += t.hit_rate_prompt();
                        cache_sum[2] += t.bytes_uploaded as f64 / n_tok;
                        cache_info = (c.budget_bytes as f64 / 1048576.0, c.policy.clone());
                    }
                    samples_ns.push(ns.max(1));
                    traffic[0] += st.h2d_bytes_experts as f64 / n_tok;
                    traffic[1] += st.h2d_bytes_full_copy as f64 / n_tok;
                    traffic[2] += st.h2d_bytes_other as f64 / n_tok;
                    traffic[3] += st.experts_copied as f64 / n_tok;
                }
                let reps = a.repetitions as f64;
                let samples_ts: Vec<f64> = samples_ns
                    .iter()
                    .map(|&ns| n_tok * 1e9 / ns as f64)
                    .collect();
                let (avg_ts, stddev_ts) = mean_sd(&samples_ts);
                let ns_f: Vec<f64> = samples_ns.iter().map(|&x| x as f64).collect();
                let (avg_ns, stddev_ns) = mean_sd(&ns_f);
                let r = TestResult {
                    build_commit: env!("CARGO_PKG_VERSION").into(),
                    model_filename: loaded.path.display().to_string(),
                    model_type: model_type(model),
                    model_size: model.size_bytes() as u64,
                    model_n_params: model.n_params(),
                    backends: backend.clone(),
                    n_batch: a.batch.batch_size,
                    n_ubatch: a.batch.ubatch_size,
                    n_threads: nt,
                    type_k: "f16".into(),
                    type_v: "f16".into(),
                    n_gpu_layers: a.placement.n_gpu_layers.unwrap_or(if offloaded {
                        -1
                    } else {
                        0
                    }),
                    cpu_moe: a.placement.cpu_moe,
                    n_cpu_moe: a.placement.n_cpu_moe.unwrap_or(0),
                    n_prompt: np,
                    n_gen: ng,
                    test_time: format!(
                        "{}",
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs())
                    ),
                    avg_ns: avg_ns as u64,
                    stddev_ns: stddev_ns as u64,
                    avg_ts,
                    stddev_ts,
                    samples_ns,
                    samples_ts,
                    h2d_bytes_experts_per_token: traffic[0] / reps,
                    h2d_bytes_full_copy_per_token: traffic[1] / reps,
                    h2d_bytes_other_per_token: traffic[2] / reps,
                    experts_copied_per_token: traffic[3] / reps,
                    moe_cache_mib: cache_arg.clone(),
                    moe_cache_budget_mib: cache_info.0,
                    moe_cache_policy: cache_info.1.clone(),
                    moe_cache_hit_rate: cache_sum[0] / reps,
                    moe_cache_hit_rate_prompt: cache_sum[1] / reps,
                    moe_cache_bytes_uploaded_per_token: cache_sum[2] / reps,
                };
                if a.output == Output::Md {
                    let mut out = stdout.lock();
                    let size = r.model_size as f64;
                    let size_s = if size < 1024.0 * 1024.0 * 1024.0 {
                        format!("{:.2} MiB", size / 1024.0 / 1024.0)
                    } else {
                        format!("{:.2} GiB", size / 1024.0 / 1024.0 / 1024.0)
                    };
                    let params = r.model_n_params as f64;
                    let params_s = if params < 1e9 {
                        format!("{:.2} M", params / 1e6)
                    } else {
                        format!("{:.2} B", params / 1e9)
                    };
                    let extra = if offloaded {
                        let hits = if r.moe_cache_policy.is_empty() {
                            "-".to_string()
                        } else if r.n_gen > 0 {
                            format!("{:.1}%", 100.0 * r.moe_cache_hit_rate)
                        } else {
                            format!("{:.1}%", 100.0 * r.moe_cache_hit_rate_prompt)
                        };
                        format!(
                            " {:>9} | {:>10} | {:>15} |",
                            if r.moe_cache_policy.is_empty() {
                                "0".to_string()
                            } else {
                                format!("{:.2}", r.moe_cache_budget_mib)
                            },
                            hits,
                            cli::fmt_bytes(r.h2d_bytes_experts_per_token)
                        )
                    } else {
                        String::new()
                    };
                    writeln!(
                        out,
                        "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} | {:>15} |{extra} {:>20} |",
                        r.model_type,
                        size_s,
                        params_s,
                        r.backends,
                        r.n_threads,
                        r.test_name(),
                        format!("{:.2} ± {:.2}", r.avg_ts, r.stddev_ts)
                    )?;
                    out.flush()?;
                }
                results.push(r);
            }
        }
    }
    let mut out = stdout.lock();
    match a.output {
        Output::Md => writeln!(out, "\nbuild: ggml-rs tools {}", env!("CARGO_PKG_VERSION"))?,
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&results)?)?,
    }
    Ok(())
}
