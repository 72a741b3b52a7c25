//! llama-run: generate text with a GGUF MoE model, streaming it, then print
//! load time, prompt and generation speed, and expert traffic.
//!
//! With no `-m`, runs on an embedded default model (a small synthetic
//! qwen3moe generated into the cache on first use). With `--synth OUT`,
//! writes a synthetic model of any shape instead of running.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::{CommandFactory, Parser};
use ggml_core::GgmlType;
use llama::{Context, Sampler, SamplerParams};
use tools::args::run::{ends_with_reverse_prompt, RunExtraArgs};
use tools::chat::{self as chat_cli, ChatArgs};
use tools::cli::{self, BatchArgs, MoeCacheArgs, PlacementArgs};
use tools::outfile::AtomicFile;
use tools::progress::Progress;
use tools::signals;
use tools::simtime::SimRun;
use tools::stream::Utf8Stream;
use tools::summary::{stats_delta, RunSummary};
use tools::synth::{self, SynthParams};
use tools::tok;

const TOOL: &str = "llama-run";
const DEFAULT_PROMPT: &str = "Once upon a time";

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
struct Args {
    /// model path (GGUF); default: the embedded synthetic model
    #[arg(short = 'm', long = "model", value_name = "FNAME")]
    model: Option<PathBuf>,

    /// prompt to start generation with (escapes such as \n are processed
    /// unless --no-escape) [default: "Once upon a time"]
    #[arg(
        short = 'p',
        long = "prompt",
        value_name = "PROMPT",
        conflicts_with = "file"
    )]
    prompt: Option<String>,

    /// a file containing the prompt (taken byte for byte)
    #[arg(short = 'f', long = "file", value_name = "FNAME")]
    file: Option<PathBuf>,

    /// number of tokens to predict (-1 = until end of generation or a full context)
    #[arg(
        short = 'n',
        long = "n-predict",
        value_name = "N",
        default_value_t = 128,
        allow_negative_numbers = true
    )]
    n_predict: i64,

    /// number of CPU threads (default and -1: all cores)
    #[arg(
        short = 't',
        long = "threads",
        value_name = "N",
        allow_negative_numbers = true
    )]
    threads: Option<i64>,

    /// size of the prompt context (0 = from the model)
    #[arg(
        short = 'c',
        long = "ctx-size",
        value_name = "N",
        default_value_t = 4096
    )]
    ctx_size: usize,

    #[command(flatten)]
    batch: BatchArgs,

    /// RNG seed (-1 = random)
    #[arg(short = 's', long = "seed", value_name = "SEED", default_value_t = -1, allow_negative_numbers = true)]
    seed: i64,

    /// temperature (0 = greedy)
    #[arg(long = "temp", value_name = "N", default_value_t = 0.8)]
    temp: f32,

    /// top-k sampling (0 = disabled)
    #[arg(
        long = "top-k",
        value_name = "N",
        default_value_t = 40,
        allow_negative_numbers = true
    )]
    top_k: i32,

    /// top-p sampling (1.0 = disabled)
    #[arg(long = "top-p", value_name = "N", default_value_t = 0.95)]
    top_p: f32,

    /// min-p sampling (0.0 = disabled)
    #[arg(long = "min-p", value_name = "N", default_value_t = 0.05)]
    min_p: f32,

    /// penalize repeated sequences of tokens (1.0 = disabled)
    #[arg(long = "repeat-penalty", value_name = "N", default_value_t = 1.0)]
    repeat_penalty: f32,

    /// last n tokens to consider for the repeat penalty (0 = disabled, -1 = context size)
    #[arg(
        long = "repeat-last-n",
        value_name = "N",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    repeat_last_n: i64,

    #[command(flatten)]
    placement: PlacementArgs,

    #[command(flatten)]
    moe_cache: MoeCacheArgs,

    #[command(flatten)]
    prefetch: tools::args::prefetch::PrefetchArgs,

    #[command(flatten)]
    chat: ChatArgs,

    #[command(flatten)]
    extra: RunExtraArgs,

    /// do not process escapes in -p (\n, \t, \\, ...)
    #[arg(long = "no-escape")]
    no_escape: bool,

    /// do not print the prompt before the generated text
    #[arg(long = "no-display-prompt")]
    no_display_prompt: bool,

    /// also print the placement of every tensor and the scheduler's plan
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,

    /// write float32 LE logits: every prompt position, then one row after
    /// each generated token is fed
    #[arg(long = "logits-out", value_name = "FILE")]
    logits_out: Option<PathBuf>,

    /// write int32 LE token ids: the prompt's, then the generated ones
    #[arg(long = "tokens-out", value_name = "FILE")]
    tokens_out: Option<PathBuf>,

    /// write every op, copy and wait of the run as a Chrome trace (open in
    /// Perfetto; see docs/timeline.md): from the simulated clock on a sim
    /// device, from CUDA events (wall-clock) on a CUDA device
    #[arg(long = "timeline-out", value_name = "FILE.json")]
    timeline_out: Option<PathBuf>,

    /// write the routing trace (every ubatch's expert ids per MoE layer) for
    /// llama-moe-cache (see docs/moe-cache-tuning.md)
    #[arg(long = "expert-trace-out", value_name = "FILE")]
    expert_trace_out: Option<PathBuf>,

    /// write the summary as one JSON object
    #[arg(long = "stats-out", value_name = "FILE")]
    stats_out: Option<PathBuf>,

    /// write a synthetic model to OUT.gguf and exit (see the synthesis options)
    #[arg(long = "synth", value_name = "OUT.gguf", help_heading = "Synthesis")]
    synth: Option<PathBuf>,

    /// architecture of the synthetic model: qwen3moe, or deepseek2 /
    /// gpt-oss with DeepSeek-V3's / GPT-OSS-120B's layer shapes (2 layers)
    /// where the flags below are not given
    #[arg(long = "arch", default_value = "qwen3moe", help_heading = "Synthesis")]
    arch: String,

    /// decoder layers [default: 4; deepseek2, gpt-oss: 2]
    #[arg(long = "layers", help_heading = "Synthesis")]
    layers: Option<usize>,

    /// experts per layer [default: 16; deepseek2: 256, gpt-oss: 128]
    #[arg(long = "experts", help_heading = "Synthesis")]
    experts: Option<usize>,

    /// experts used per token [default: 4; deepseek2: 8, gpt-oss: 4]
    #[arg(long = "used", help_heading = "Synthesis")]
    used: Option<usize>,

    /// embedding width [default: 256; deepseek2: 7168, gpt-oss: 2880]
    #[arg(long = "embd", help_heading = "Synthesis")]
    embd: Option<usize>,

    /// width of one expert's FFN [default: 256; deepseek2: 2048, gpt-oss: 2880]
    #[arg(long = "ff", help_heading = "Synthesis")]
    ff: Option<usize>,

    /// attention heads (default: embd / head-dim; deepseek2: 128, gpt-oss: 64)
    #[arg(long = "heads", help_heading = "Synthesis")]
    heads: Option<usize>,

    /// key/value heads (default: heads / 4 when divisible, else heads;
    /// gpt-oss: 8; deepseek2 always caches one latent head)
    #[arg(long = "heads-kv", help_heading = "Synthesis")]
    heads_kv: Option<usize>,

    /// head dimension (default: 128, or embd / 4 below 512; gpt-oss: 64;
    /// deepseek2: 128, which sets its MLA widths in DeepSeek-V3's ratios)
    #[arg(long = "head-dim", help_heading = "Synthesis")]
    head_dim: Option<usize>,

    /// vocabulary size (default: the ~520-token byte-level BPE vocabulary;
    /// larger sizes pad it, e.g. 151936 for Qwen3's output-head cost)
    #[arg(long = "vocab", help_heading = "Synthesis")]
    vocab: Option<usize>,

    /// type of the weight matrices (norms and the router stay F32)
    #[arg(long = "type", default_value = "F16", help_heading = "Synthesis")]
    ty: String,

    /// seed of the synthetic weights
    #[arg(long = "synth-seed", default_value_t = 42, help_heading = "Synthesis")]
    synth_seed: u64,
}

fn main() -> ExitCode {
    let stderr_guard = tools::signals::protect_stderr();
    tools::signals::install_sigint();
    let argv = match tools::args::normalize(&Args::command(), std::env::args_os()) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{TOOL}: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let args = match Args::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            // print (usage errors, --help, --version) and let the stderr
            // forwarder drain before exiting
            let _ = e.print();
            drop(stderr_guard);
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let code = cli::main_wrapper(TOOL, || match &args.synth {
        Some(out) => synthesize(&args, out),
        None if args.extra.list_devices => {
            tools::devices::print_devices();
            Ok(())
        }
        None if args.chat.chat_render.is_some() => {
            chat_cli::render_mode(&args.chat, args.model.as_deref())
        }
        None => run(&args),
    });
    drop(stderr_guard);
    // a clean end after SIGINT (130) or a closed stdout (141)
    match tools::signals::exit_code() {
        Some(c) if code == ExitCode::SUCCESS => ExitCode::from(c),
        _ => code,
    }
}

fn synthesize(a: &Args, out: &PathBuf) -> Result<()> {
    let ty = GgmlType::from_name(&a.ty).with_context(|| {
        format!(
            "--type {}: unknown type (supported: {})",
            a.ty,
            synth::supported_types().join(", ")
        )
    })?;
    let base = SynthParams::preset(&a.arch).with_context(|| {
        format!(
            "--arch {}: cannot synthesize this architecture (supported: {})",
            a.arch,
            synth::SYNTH_ARCHS.join(", ")
        )
    })?;
    let embd = a.embd.unwrap_or(base.n_embd);
    let p = if a.arch == "qwen3moe" {
        let head_dim = a
            .head_dim
            .unwrap_or(if embd >= 512 { 128 } else { (embd / 4).max(2) });
        let heads = a.heads.unwrap_or((embd / head_dim.max(1)).max(1));
        let heads_kv = a.heads_kv.unwrap_or(if heads.is_multiple_of(4) {
            heads / 4
        } else {
            heads
        });
        SynthParams {
            n_head: heads,
            n_head_kv: heads_kv,
            head_dim,
            ..base
        }
    } else {
        SynthParams {
            n_head: a.heads.unwrap_or(base.n_head),
            n_head_kv: a.heads_kv.unwrap_or(base.n_head_kv),
            head_dim: a.head_dim.unwrap_or(base.head_dim),
            ..base
        }
    };
    let p = SynthParams {
        n_layer: a.layers.unwrap_or(p.n_layer),
        n_expert: a.experts.unwrap_or(p.n_expert),
        n_expert_used: a.used.unwrap_or(p.n_expert_used),
        n_embd: embd,
        n_ff_exp: a.ff.unwrap_or(p.n_ff_exp),
        n_vocab: a.vocab,
        seed: a.synth_seed,
        ty,
        ..p
    };
    p.validate()?;
    tools::synth_budget::check(&p)?;
    let t0 = Instant::now();
    let mut bar = Progress::new("synthesizing");
    let w = synth::synthesize(&p, &mut |f| bar.set(f))?;
    bar.finish();
    let t1 = Instant::now();
    synth::write_atomic(&w, out)?;
    let size = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "{TOOL}: wrote {} ({}, {} layers, {} experts, {} used, embd {}, ff {}, heads {}/{}x{}, {}): generated in {:.2} s, written in {:.2} s",
        out.display(),
        cli::fmt_bytes(size as f64),
        p.n_layer,
        p.n_expert,
        p.n_expert_used,
        p.n_embd,
        p.n_ff_exp,
        p.n_head,
        p.n_head_kv,
        p.head_dim,
        p.ty,
        (t1 - t0).as_secs_f64(),
        t1.elapsed().as_secs_f64()
    );
    Ok(())
}

fn check_args(a: &Args) -> Result<()> {
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
    Ok(())
}

/// Writes to a file if one was asked for (a temporary name, renamed when
/// complete: see `tools::outfile`).
struct OutFile(Option<AtomicFile>);

impl OutFile {
    fn create(path: &Option<PathBuf>) -> Result<OutFile> {
        Ok(OutFile(match path {
            Some(p) => Some(AtomicFile::create(p)?),
            None => None,
        }))
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some(f) = &mut self.0 {
            f.write_all(bytes)?;
        }
        Ok(())
    }

    fn is_some(&self) -> bool {
        self.0.is_some()
    }

    fn finish(self) -> Result<()> {
        if let Some(f) = self.0 {
            f.commit()?;
        }
        Ok(())
    }
}

/// `-cnv`: the chat loop, then the summary over all turns.
fn conversation(
    a: &Args,
    loaded: &cli::Loaded,
    ctx: &mut Context,
    sampler: &mut Sampler,
) -> Result<()> {
    let model = &loaded.model;
    let (template, render, source) = chat_cli::model_chat(&a.chat, &model.file, &model.tokenizer)?;
    eprintln!("{TOOL}: conversation mode, chat template: {source:?}; /exit or Ctrl-D ends it");
    let params = chat_cli::conversation::ConversationParams {
        template: &template,
        render,
        system_prompt: a.chat.system_prompt.clone(),
        n_predict: usize::try_from(a.n_predict).ok(),
        ignore_eos: a.extra.ignore_eos,
        tool: TOOL,
    };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout();
    let st = chat_cli::conversation::run(ctx, sampler, &params, &mut input, &mut out)?;
    let prompt_tokens: usize = st.turns.iter().map(|t| t.prompt_tokens).sum();
    let gen_tokens: usize = st.turns.iter().map(|t| t.gen_tokens).sum();
    let s = RunSummary {
        model: loaded.path.display().to_string(),
        device: cli::device_name(model),
        expert_copy: !a.placement.no_expert_copy,
        offload_min_batch: a.placement.offload_min_batch,
        load_s: loaded.load_s,
        prompt_tokens,
        prompt_s: st.prompt_s,
        prompt_tps: prompt_tokens as f64 / st.prompt_s.max(1e-9),
        gen_tokens,
        gen_s: st.gen_s,
        gen_tps: gen_tokens as f64 / st.gen_s.max(1e-9),
        gen_decodes: st.gen_decodes,
        stop: st.stop.clone(),
        n_threads: ctx.params().n_threads,
        n_threads_batch: ctx
            .params()
            .n_threads_batch
            .unwrap_or(ctx.params().n_threads),
        ..Default::default()
    };
    eprintln!();
    eprintln!("{TOOL}: {} turns", st.turns.len());
    eprint!("{}", s.to_text());
    if let Some(p) = &a.stats_out {
        let mut f = AtomicFile::create(p)?;
        f.write_all((serde_json::to_string_pretty(&s)? + "\n").as_bytes())?;
        f.commit()?;
    }
    if signals::stdout_closed() {
        signals::set_exit_code(signals::EXIT_STDOUT_CLOSED);
    } else if signals::interrupted() {
        signals::set_exit_code(signals::EXIT_INTERRUPTED);
    }
    Ok(())
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn run(a: &Args) -> Result<()> {
    check_args(a)?;
    let prompt = match (&a.prompt, &a.file) {
        (Some(p), _) if a.no_escape => p.clone(),
        (Some(p), _) => cli::process_escapes(p),
        (None, Some(f)) => cli::read_text_file(f)?,
        (None, None) => DEFAULT_PROMPT.to_string(),
    };
    let n_threads = match a.threads {
        Some(t) if t > 0 => t as usize,
        _ => cli::default_threads(),
    };
    // -fa auto turns flash attention on where a quantized V cache needs
    // it (llama.cpp resolves auto to on where the backend has it)
    let fa_auto = a.batch.flash_attn == "auto";
    let (kv_type, kv_type_v) = a
        .extra
        .kv_types(fa_auto || matches!(a.batch.flash_attn.as_str(), "on" | "1"))?;
    // Open every output file before the long work, so a bad path fails fast.
    let mut logits_out = OutFile::create(&a.logits_out)?;
    let mut tokens_out = OutFile::create(&a.tokens_out)?;
    let stats_out = match &a.stats_out {
        Some(p) => Some(AtomicFile::create(p)?),
        None => None,
    };

    let loaded = cli::load_model(TOOL, a.model.as_deref(), &a.placement, n_threads)?;
    let model = &loaded.model;
    let hp = &model.hparams;
    let device = cli::device_name(model);
    eprintln!(
        "{TOOL}: model {}: {}, {} layers, {} experts ({} used), n_embd {}, n_vocab {}, {:.2} M params, {}",
        loaded.path.display(),
        hp.arch.name(),
        hp.n_layer,
        hp.n_expert,
        hp.n_expert_used,
        hp.n_embd,
        hp.n_vocab,
        model.n_params() as f64 / 1e6,
        cli::fmt_bytes(model.size_bytes() as f64)
    );
    eprintln!("{TOOL}: placement: {}", cli::placement_summary(model));
    if a.verbose {
        eprint!("{}", cli::placement_table(model));
    }

    let mut ctx_params = a.batch.context_params(a.ctx_size, n_threads, &a.placement);
    ctx_params.moe_cache = a.moe_cache.params(&a.placement)?;
    ctx_params.moe_hybrid = a.moe_cache.hybrid()?;
    ctx_params.prefetch_experts_slots = a.prefetch.slots()?;
    ctx_params.moe_predict = a.prefetch.predict();
    ctx_params.kv_type = kv_type;
    ctx_params.kv_type_v = Some(kv_type_v);
    ctx_params.flash_attn |= fa_auto && kv_type_v.is_quantized();
    // -tb N: the threads of prompt ubatches (-1 or absent: as -t)
    ctx_params.n_threads_batch = a.extra.threads_batch.filter(|&n| n > 0).map(|n| n as usize);
    let mut ctx = Context::new(model.clone(), ctx_params).context("cannot create the context")?;
    if a.prefetch.predict() && ctx.predict_stats().is_none() {
        eprintln!(
            "{TOOL}: warning: --moe-predict on needs the expert cache (a device, experts in host memory, --moe-cache-mib not 0): no prediction"
        );
    }
    if let Some((n, bytes, note)) = ctx.prefetch_slots() {
        if let Some(note) = note {
            eprintln!("{TOOL}: warning: {note}");
        }
        if a.verbose {
            eprintln!(
                "{TOOL}: prefetch: {n} staging slots of {}",
                cli::fmt_bytes(bytes as f64)
            );
        }
    }
    let trace_out = match &a.expert_trace_out {
        Some(p) => {
            ctx.start_expert_trace();
            Some((p, AtomicFile::create(p)?))
        }
        None => None,
    };

    let mut sim = ctx
        .sim_clock()
        .map(|c| SimRun::start(c, a.timeline_out.is_some()));
    // without a simulated clock, a device that records CUDA events
    let event_timeline = match (&a.timeline_out, &sim, &model.device) {
        (Some(_), None, Some(d)) if d.set_event_timeline(true) => Some(d.clone()),
        (Some(_), None, _) => bail!(
            "--timeline-out: needs a simulated device (--device SIM0) or a CUDA device (its events)"
        ),
        _ => None,
    };

    let tokenizer = &model.tokenizer;
    let prompt_ids = tok::tokenize(tokenizer, &prompt, true, true)?;
    if prompt_ids.is_empty() {
        bail!("the prompt is empty after tokenization (give one with -p or -f)");
    }
    if prompt_ids.len() > ctx.n_ctx() {
        bail!(
            "the prompt has {} tokens, more than the context of {} (-c)",
            prompt_ids.len(),
            ctx.n_ctx()
        );
    }
    for &t in &prompt_ids {
        tokens_out.write(&t.to_le_bytes())?;
    }

    let seed = if a.seed < 0 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    } else {
        a.seed as u64
    };
    let mut sampler = Sampler::new(SamplerParams {
        temp: a.temp,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repeat_penalty: a.repeat_penalty,
        repeat_last_n: if a.repeat_last_n < 0 {
            ctx.n_ctx()
        } else {
            a.repeat_last_n as usize
        },
        seed,
    })
    .with_penalties(a.extra.presence_penalty, a.extra.frequency_penalty);
    if chat_cli::conversation_mode(&a.chat, &model.file, a.prompt.is_some() || a.file.is_some()) {
        return conversation(a, &loaded, &mut ctx, &mut sampler);
    }
    for &t in &prompt_ids {
        sampler.accept(t);
    }

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut pipe_open = true;
    let mut emit = |out: &mut std::io::StdoutLock, s: &str| {
        if pipe_open
            && !s.is_empty()
            && (out.write_all(s.as_bytes()).is_err() || out.flush().is_err())
        {
            pipe_open = false; // e.g. `| head`: stop, quietly (exit 141)
            signals::set_stdout_closed();
        }
    };
    // prompt, in batches of -b
    let all_logits = logits_out.is_some();
    let t_prompt = Instant::now();
    let mut last_row: Vec<f32> = Vec::new();
    for chunk in prompt_ids.chunks(a.batch.batch_size) {
        ctx.decode(chunk, all_logits)
            .context("prompt decode failed")?;
        let rows = if all_logits { chunk.len() } else { 1 };
        for r in 0..rows {
            let row = ctx.logits(r).context("no logits after the prompt")?;
            if all_logits {
                logits_out.write(&f32_bytes(row))?;
            }
            if r + 1 == rows {
                last_row = row.to_vec();
            }
        }
    }
    let prompt_s = t_prompt.elapsed().as_secs_f64();
    // what the CPU backend ran the prompt on (-tb)
    let prompt_threads = ctx.cpu_backend().n_threads();
    if let Some(sim) = &mut sim {
        sim.prompt_done();
    }
    if a.verbose {
        eprintln!("{TOOL}: scheduler plan of the last prompt graph:");
        eprintln!("{}", ctx.plan_dump().trim_end());
    }
    if !a.no_display_prompt {
        emit(&mut out, &prompt);
    }
    let stats_prompt = ctx.stats();

    // generation
    let n_ctx = ctx.n_ctx();
    let limit = if a.n_predict < 0 {
        usize::MAX
    } else {
        a.n_predict as usize
    };
    let mut text = Utf8Stream::new();
    let mut gen_tokens = 0usize;
    let mut gen_decodes = 0usize;
    let mut stop = "n_predict";
    let mut generated = String::new();
    // a prompt ending in an end-of-generation token has nothing to continue
    // (unless --ignore-eos)
    let prompt_ends_eog = !a.extra.ignore_eos
        && prompt_ids
            .last()
            .is_some_and(|&t| tok::is_eog(tokenizer, t));
    if prompt_ends_eog {
        stop = "eog";
    }
    let eog_ids: Vec<i32> = if a.extra.ignore_eos {
        tokenizer.eog_tokens().collect()
    } else {
        Vec::new()
    };
    let t_gen = Instant::now();
    while gen_tokens < limit && !prompt_ends_eog {
        for &e in &eog_ids {
            if let Some(l) = last_row.get_mut(e as usize) {
                *l = f32::NEG_INFINITY; // --ignore-eos: never sampled
            }
        }
        if signals::interrupted() {
            stop = "interrupted";
            break;
        }
        if signals::stdout_closed() {
            stop = "stdout_closed";
            break;
        }
        let id = sampler.sample(&last_row);
        sampler.accept(id);
        gen_tokens += 1;
        tokens_out.write(&id.to_le_bytes())?;
        let eog = !a.extra.ignore_eos && tok::is_eog(tokenizer, id);
        let mut reverse = false;
        if !eog {
            let s = text.push(&tok::piece(tokenizer, id, false));
            emit(&mut out, &s);
            if !a.extra.reverse_prompt.is_empty() {
                generated.push_str(&s);
                reverse = ends_with_reverse_prompt(&generated, &a.extra.reverse_prompt);
            }
        }
        let more = !eog && !reverse && gen_tokens < limit;
        // Feed the token when another one follows, or when its logits are
        // asked for (--logits-out has one row per generated token).
        if more || logits_out.is_some() {
            if ctx.n_past() + 1 > n_ctx {
                stop = "context_full";
                break;
            }
            ctx.decode(&[id], false).context("decode failed")?;
            gen_decodes += 1;
            let row = ctx.logits(0).context("no logits after decode")?;
            logits_out.write(&f32_bytes(row))?;
            last_row.clear();
            last_row.extend_from_slice(row);
        }
        if eog {
            stop = "eog";
            break;
        }
        if reverse {
            stop = "reverse_prompt";
            break;
        }
    }
    let gen_s = t_gen.elapsed().as_secs_f64();
    let rest = text.finish();
    emit(&mut out, &rest);
    emit(&mut out, "\n");
    drop(out);
    logits_out.finish()?;
    tokens_out.finish()?;

    let stats_total = ctx.stats();
    if let (Some((p, mut f)), Some(t)) = (trace_out, ctx.take_expert_trace()) {
        f.write_all(&t.to_bytes())
            .with_context(|| format!("cannot write {}", p.display()))?;
        f.commit()?;
    }
    let mut s = RunSummary {
        model: loaded.path.display().to_string(),
        device,
        expert_copy: !a.placement.no_expert_copy,
        offload_min_batch: a.placement.offload_min_batch,
        load_s: loaded.load_s,
        prompt_tokens: prompt_ids.len(),
        prompt_s,
        prompt_tps: prompt_ids.len() as f64 / prompt_s.max(1e-9),
        gen_tokens,
        gen_s,
        gen_tps: if gen_tokens > 0 {
            gen_tokens as f64 / gen_s.max(1e-9)
        } else {
            0.0
        },
        gen_decodes,
        stop: stop.into(),
        sim: sim
            .as_ref()
            .map(|r| r.report(prompt_ids.len(), gen_decodes)),
        n_threads_batch: prompt_threads,
        n_threads: if gen_decodes > 0 {
            ctx.cpu_backend().n_threads()
        } else {
            ctx.params().n_threads
        },
        ..Default::default()
    };
    if let (Some(d), Some(p)) = (&event_timeline, &a.timeline_out) {
        tools::simtime::write_event_timeline(d.as_ref(), p)?;
    }
    if let (Some(r), Some(p)) = (&sim, &a.timeline_out) {
        r.write_timeline(p)?;
    }
    s.set_traffic(&stats_total, &stats_delta(&stats_prompt, &stats_total));
    s.set_cache(ctx.moe_cache_stats());
    s.prefetch = tools::prefetch_report::PrefetchReport::with_predict(
        &stats_total,
        ctx.prefetch_stats(),
        ctx.prefetch_slots().map_or(0, |p| p.0),
        ctx.predict_stats(),
    );
    if signals::stdout_closed() {
        signals::set_exit_code(signals::EXIT_STDOUT_CLOSED);
    } else {
        eprintln!();
        eprint!("{}", s.to_text());
    }
    if let Some(mut f) = stats_out {
        let json = serde_json::to_string_pretty(&s)?;
        f.write_all((json + "\n").as_bytes())?;
        f.commit()?;
    }
    if signals::interrupted() {
        signals::set_exit_code(signals::EXIT_INTERRUPTED);
    }
    Ok(())
}
