//! `llama-run`'s command line: every flag (llama.cpp's spellings, the
//! placement, cache and prefetch groups from `common`, the synthesis
//! options), and the checks that fail a bad value before any file work.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Parser;
use common::chat::ChatArgs;
use common::cli::{BatchArgs, MoeCacheArgs, PlacementArgs};

use super::args::RunExtraArgs;

/// `llama-run`'s flags.
#[derive(Parser, Debug)]
#[command(
    name = "llama-run",
    version,
    about = "Generate text with a GGUF MoE model (llama.cpp flags).",
    long_about = None,
    after_help = "Multi-letter short flags as in llama.cpp: -ngl, -ub, -ot, -cmoe, -ncmoe, -dev, -fa, -tb, -sys, -cnv, -no-cnv, -ctk, -ctv (and -nomb for --offload-min-batch); negative values after a space (--temp -1) and -ngl auto|all as llama.cpp.\n\
Without -m, runs the embedded default model (generated into $GGML_RS_CACHE, $XDG_CACHE_HOME/ggml-rs or ~/.cache/ggml-rs on first use).\n\
Examples:\n  llama-run -m Qwen3-30B-A3B-Q4_K_M.gguf -p \"Hello\" -n 64 --device CUDA0 -ngl 99 --cpu-moe\n  llama-run --device SIM0 --cpu-moe -n 32\n  llama-run --synth big.gguf --layers 2 --experts 128 --used 8 --embd 2048 --ff 768 --heads 32 --heads-kv 4 --type Q4_K"
)]
pub struct Args {
    /// model path (GGUF); default: the embedded synthetic model
    #[arg(short = 'm', long = "model", value_name = "FNAME")]
    pub(crate) model: Option<PathBuf>,

    /// prompt to start generation with (escapes such as \n are processed
    /// unless --no-escape) [default: "Once upon a time"]
    #[arg(
        short = 'p',
        long = "prompt",
        value_name = "PROMPT",
        conflicts_with = "file"
    )]
    pub(crate) prompt: Option<String>,

    /// a file containing the prompt (taken byte for byte)
    #[arg(short = 'f', long = "file", value_name = "FNAME")]
    pub(crate) file: Option<PathBuf>,

    /// number of tokens to predict (-1 = until end of generation or a full context)
    #[arg(
        short = 'n',
        long = "n-predict",
        value_name = "N",
        default_value_t = 128,
        allow_negative_numbers = true
    )]
    pub(crate) n_predict: i64,

    /// number of CPU threads (default and -1: all cores)
    #[arg(
        short = 't',
        long = "threads",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub(crate) threads: Option<i64>,

    /// size of the prompt context (0 = from the model)
    #[arg(
        short = 'c',
        long = "ctx-size",
        value_name = "N",
        default_value_t = 4096
    )]
    pub(crate) ctx_size: usize,

    #[command(flatten)]
    pub(crate) batch: BatchArgs,

    /// RNG seed (-1 = random)
    #[arg(short = 's', long = "seed", value_name = "SEED", default_value_t = -1, allow_negative_numbers = true)]
    pub(crate) seed: i64,

    /// temperature (0 = greedy)
    #[arg(long = "temp", value_name = "N", default_value_t = 0.8)]
    pub(crate) temp: f32,

    /// top-k sampling (0 = disabled)
    #[arg(
        long = "top-k",
        value_name = "N",
        default_value_t = 40,
        allow_negative_numbers = true
    )]
    pub(crate) top_k: i32,

    /// top-p sampling (1.0 = disabled)
    #[arg(long = "top-p", value_name = "N", default_value_t = 0.95)]
    pub(crate) top_p: f32,

    /// min-p sampling (0.0 = disabled)
    #[arg(long = "min-p", value_name = "N", default_value_t = 0.05)]
    pub(crate) min_p: f32,

    /// penalize repeated sequences of tokens (1.0 = disabled)
    #[arg(long = "repeat-penalty", value_name = "N", default_value_t = 1.0)]
    pub(crate) repeat_penalty: f32,

    /// last n tokens to consider for the repeat penalty (0 = disabled, -1 = context size)
    #[arg(
        long = "repeat-last-n",
        value_name = "N",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    pub(crate) repeat_last_n: i64,

    #[command(flatten)]
    pub(crate) placement: PlacementArgs,

    #[command(flatten)]
    pub(crate) moe_cache: MoeCacheArgs,

    #[command(flatten)]
    pub(crate) fit: common::fit::FitArgs,

    #[command(flatten)]
    pub(crate) prefetch: common::args::prefetch::PrefetchArgs,

    #[command(flatten)]
    pub(crate) chat: ChatArgs,

    #[command(flatten)]
    pub(crate) extra: RunExtraArgs,

    #[command(flatten)]
    pub(crate) spec: common::args::speculative::SpecArgs,

    /// do not process escapes in -p (\n, \t, \\, ...)
    #[arg(long = "no-escape")]
    pub(crate) no_escape: bool,

    /// do not print the prompt before the generated text
    #[arg(long = "no-display-prompt")]
    pub(crate) no_display_prompt: bool,

    /// also print the placement of every tensor and the scheduler's plan
    #[arg(short = 'v', long = "verbose")]
    pub(crate) verbose: bool,

    /// write float32 LE logits: every prompt position, then one row after
    /// each generated token is fed
    #[arg(long = "logits-out", value_name = "FILE")]
    pub(crate) logits_out: Option<PathBuf>,

    /// write int32 LE token ids: the prompt's, then the generated ones
    #[arg(long = "tokens-out", value_name = "FILE")]
    pub(crate) tokens_out: Option<PathBuf>,

    /// write every op, copy and wait of the run as a Chrome trace (open in
    /// Perfetto; see docs/timeline.md): from the simulated clock on a sim
    /// device, from CUDA events (wall-clock) on a CUDA device
    #[arg(long = "timeline-out", value_name = "FILE.json")]
    pub(crate) timeline_out: Option<PathBuf>,

    /// write the routing trace (every ubatch's expert ids per MoE layer) for
    /// llama-moe-cache (see docs/moe-cache-tuning.md)
    #[arg(long = "expert-trace-out", value_name = "FILE")]
    pub(crate) expert_trace_out: Option<PathBuf>,

    /// forced routing: every MoE layer uses this trace's expert ids instead
    /// of its router's (token i takes trace token i, wrapping; weights stay
    /// the router's); for measuring the offload path: the text is not the
    /// model's
    #[arg(long = "expert-trace-in", value_name = "FILE")]
    pub(crate) expert_trace_in: Option<PathBuf>,

    /// write the summary as one JSON object
    #[arg(long = "stats-out", value_name = "FILE")]
    pub(crate) stats_out: Option<PathBuf>,

    /// write a synthetic model to OUT.gguf and exit (see the synthesis options)
    #[arg(long = "synth", value_name = "OUT.gguf", help_heading = "Synthesis")]
    pub(crate) synth: Option<PathBuf>,

    /// architecture of the synthetic model: qwen3moe, or deepseek2 /
    /// gpt-oss with DeepSeek-V3's / GPT-OSS-120B's layer shapes (2 layers)
    /// where the flags below are not given
    #[arg(long = "arch", default_value = "qwen3moe", help_heading = "Synthesis")]
    pub(crate) arch: String,

    /// decoder layers [default: 4; deepseek2, gpt-oss: 2]
    #[arg(long = "layers", help_heading = "Synthesis")]
    pub(crate) layers: Option<usize>,

    /// experts per layer [default: 16; deepseek2: 256, gpt-oss: 128]
    #[arg(long = "experts", help_heading = "Synthesis")]
    pub(crate) experts: Option<usize>,

    /// experts used per token [default: 4; deepseek2: 8, gpt-oss: 4]
    #[arg(long = "used", help_heading = "Synthesis")]
    pub(crate) used: Option<usize>,

    /// embedding width [default: 256; deepseek2: 7168, gpt-oss: 2880]
    #[arg(long = "embd", help_heading = "Synthesis")]
    pub(crate) embd: Option<usize>,

    /// width of one expert's FFN [default: 256; deepseek2: 2048, gpt-oss: 2880]
    #[arg(long = "ff", help_heading = "Synthesis")]
    pub(crate) ff: Option<usize>,

    /// attention heads (default: embd / head-dim; deepseek2: 128, gpt-oss: 64)
    #[arg(long = "heads", help_heading = "Synthesis")]
    pub(crate) heads: Option<usize>,

    /// key/value heads (default: heads / 4 when divisible, else heads;
    /// gpt-oss: 8; deepseek2 always caches one latent head)
    #[arg(long = "heads-kv", help_heading = "Synthesis")]
    pub(crate) heads_kv: Option<usize>,

    /// head dimension (default: 128, or embd / 4 below 512; gpt-oss: 64;
    /// deepseek2: 128, which sets its MLA widths in DeepSeek-V3's ratios)
    #[arg(long = "head-dim", help_heading = "Synthesis")]
    pub(crate) head_dim: Option<usize>,

    /// vocabulary size (default: the ~520-token byte-level BPE vocabulary;
    /// larger sizes pad it, e.g. 151936 for Qwen3's output-head cost)
    #[arg(long = "vocab", help_heading = "Synthesis")]
    pub(crate) vocab: Option<usize>,

    /// type of the weight matrices (norms and the router stay F32)
    #[arg(long = "type", default_value = "F16", help_heading = "Synthesis")]
    pub(crate) ty: String,

    /// seed of the synthetic weights
    #[arg(long = "synth-seed", default_value_t = 42, help_heading = "Synthesis")]
    pub(crate) synth_seed: u64,
}

/// Err naming the first flag with a value out of its range.
pub(crate) fn check_args(a: &Args) -> Result<()> {
    if let Some(t) = a.threads {
        if t == 0 || t < -1 {
            bail!("-t {t}: must be -1 (all cores) or at least 1");
        }
    }
    if a.repeat_last_n < -1 {
        bail!(
            "--repeat-last-n {}: must be -1 (context size) or at least 0",
            a.repeat_last_n
        );
    }
    a.extra.check()?;
    a.batch.check()?;
    a.fit.check()?;
    if a.n_predict < -1 {
        bail!("-n {}: must be -1 (unlimited) or at least 0", a.n_predict);
    }
    if !a.temp.is_finite() {
        bail!("--temp {}: must be a number", a.temp);
    }
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        bail!("--top-p {}: must be in (0, 1]", a.top_p);
    }
    if !(0.0..=1.0).contains(&a.min_p) {
        bail!("--min-p {}: must be in [0, 1]", a.min_p);
    }
    if !(a.repeat_penalty > 0.0 && a.repeat_penalty.is_finite()) {
        bail!("--repeat-penalty {}: must be positive", a.repeat_penalty);
    }
    if a.placement.offload_min_batch == 0 {
        bail!("--offload-min-batch must be at least 1");
    }
    a.moe_cache.params(&a.placement)?;
    a.moe_cache.hybrid()?;
    a.placement.sim_mem_bytes()?;
    a.spec.source()?;
    Ok(())
}
