//! `llama-run`'s command line: every flag (llama.cpp's spellings, the
//! placement, cache and prefetch groups from `common`, the synthesis
//! options), and the checks that fail a bad value before any file work.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Parser;
use common::chat::ChatArgs;
use common::cli::{BatchArgs, MoeCacheArgs, PlacementArgs};

use super::args::RunExtraArgs;

/// `llama-run`'s flags: each field is the flag whose entry in
/// [`common::flags::table`] has the field's name as its id (spellings,
/// help, default, parser); [`common::flags::parse_from`] parses them.
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
    #[arg(long)]
    pub(crate) model: Option<PathBuf>,

    #[arg(long, conflicts_with = "file")]
    pub(crate) prompt: Option<String>,

    #[arg(long)]
    pub(crate) file: Option<PathBuf>,

    #[arg(long)]
    pub(crate) n_predict: i64,

    #[arg(long)]
    pub(crate) threads: Option<i64>,

    #[arg(long)]
    pub(crate) ctx_size: usize,

    #[command(flatten)]
    pub(crate) batch: BatchArgs,

    #[arg(long)]
    pub(crate) seed: i64,

    #[arg(long)]
    pub(crate) temp: f32,

    #[arg(long)]
    pub(crate) top_k: i32,

    #[arg(long)]
    pub(crate) top_p: f32,

    #[arg(long)]
    pub(crate) min_p: f32,

    #[arg(long)]
    pub(crate) repeat_penalty: f32,

    #[arg(long)]
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

    #[arg(long)]
    pub(crate) no_escape: bool,

    #[arg(long)]
    pub(crate) no_display_prompt: bool,

    #[arg(long)]
    pub(crate) verbose: bool,

    #[arg(long)]
    pub(crate) logits_out: Option<PathBuf>,

    #[arg(long)]
    pub(crate) tokens_out: Option<PathBuf>,

    #[arg(long)]
    pub(crate) timeline_out: Option<PathBuf>,

    #[arg(long)]
    pub(crate) expert_trace_out: Option<PathBuf>,

    #[arg(long)]
    pub(crate) expert_trace_in: Option<PathBuf>,

    #[arg(long)]
    pub(crate) stats_out: Option<PathBuf>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) synth: Option<PathBuf>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) arch: String,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) layers: Option<usize>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) experts: Option<usize>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) used: Option<usize>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) embd: Option<usize>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) ff: Option<usize>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) heads: Option<usize>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) heads_kv: Option<usize>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) head_dim: Option<usize>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) vocab: Option<usize>,

    #[arg(long, help_heading = "Synthesis")]
    pub(crate) ty: String,

    #[arg(long, help_heading = "Synthesis")]
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
    a.moe_cache.alias()?;
    a.placement.sim_mem_bytes()?;
    a.spec.source()?;
    Ok(())
}
