//! One `llama-run` generation: flags checked, output files opened, the
//! model loaded and placed, the prompt decoded in batches, tokens sampled
//! and streamed (whole UTF-8 characters) until a stop, then the summary
//! (speed, expert traffic, cache, prefetch, simulated time) on stderr and
//! the requested files written.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use common::chat as chat_cli;
use common::cli;
use common::outfile::AtomicFile;
use common::signals;
use common::simtime::SimRun;
use common::stream::Utf8Stream;
use common::summary::{stats_delta, RunSummary};
use common::tok;
use llama::{Context, Sampler, SamplerParams};

use super::args::ends_with_reverse_prompt;
use super::conversation::conversation;
use super::default_device::{announce, run_placement, RunPlacement};
use super::flags::{check_args, Args};
use super::outputs::{f32_bytes, OutFile};
use super::{DEFAULT_PROMPT, TOOL};

/// Generate as `a` asks.
pub(crate) fn run(a: &Args) -> Result<()> {
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
    // it or the CUDA device runs it (llama.cpp resolves auto to on where
    // the backend has it: llama::device::flash_attn_auto)
    let fa_auto = a.batch.flash_attn == common::flags::FlashAttn::Auto;
    let (kv_type, kv_type_v) = a.extra.kv_types(fa_auto || a.batch.flash_attn.is_on())?;
    // Open every output file before the long work, so a bad path fails fast.
    let mut logits_out = OutFile::create(&a.logits_out)?;
    let mut tokens_out = OutFile::create(&a.tokens_out)?;
    let stats_out = match &a.stats_out {
        Some(p) => Some(AtomicFile::create(p)?),
        None => None,
    };

    let RunPlacement {
        mut placement,
        default_run,
    } = run_placement(a);
    let mut moe_cache = a.moe_cache.clone();
    let fit_ctx = common::fit::FitContext {
        n_ctx: a.ctx_size,
        n_ubatch: a.batch.ubatch_size.min(a.batch.batch_size),
        type_k: kv_type,
        type_v: kv_type_v,
        prefetch_slots: a.prefetch.slots()?,
    };
    // the draft's placement follows the flags as given (before the plan)
    let spec_placement = placement.clone();
    let fit_plan = common::fit::apply(
        TOOL,
        &a.fit,
        a.model.as_deref(),
        &fit_ctx,
        &mut placement,
        &mut moe_cache,
    )?;
    if default_run {
        if let Some(d) = &placement.device {
            eprintln!("{}", announce(TOOL, d));
        }
    }
    a.moe_cache
        .host_cache_load_mode(&mut placement, a.model.as_deref());
    let loaded = cli::load_model(TOOL, a.model.as_deref(), &placement, n_threads)?;
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

    let mut ctx_params = a.batch.context_params(a.ctx_size, n_threads, &placement);
    let moe = &mut ctx_params.moe;
    (moe.cache, moe.cache_sizes) = moe_cache.device_params(&placement)?;
    moe.hybrid = a.moe_cache.hybrid()?;
    moe.cache_alias = a.moe_cache.alias()?;
    let (host_cache, host_line) = a.moe_cache.host_cache(model)?;
    if let Some(l) = host_line {
        eprintln!("{TOOL}: {l}");
    }
    moe.host_cache = host_cache;
    moe.prefetch = a.prefetch.setting()?;
    moe.predict = a.prefetch.predict();
    moe.forced_routing = match &a.expert_trace_in {
        Some(p) => Some(Arc::new(common::forced::load(p, model)?)),
        None => None,
    };
    let forced_text = moe
        .forced_routing
        .as_deref()
        .map(common::forced::summary_line);
    if let Some(t) = &forced_text {
        eprint!("{TOOL}: {t}");
        if moe.predict == llama::moe_cache::predict::MoePredict::Router {
            eprintln!(
                "{TOOL}: warning: --moe-predict {} guesses the model's own routing, not the trace's (--moe-predict history predicts the trace)",
                a.prefetch.moe_predict
            );
        }
    }
    ctx_params.kv_type = kv_type;
    ctx_params.kv_type_v = Some(kv_type_v);
    ctx_params.flash_attn |= fa_auto && llama::device::flash_attn_auto(model, kv_type, kv_type_v);
    // -tb N: the threads of prompt ubatches (-1 or absent: as -t)
    ctx_params.n_threads_batch = a.extra.threads_batch.filter(|&n| n > 0).map(|n| n as usize);
    let mut ctx = Context::new(model.clone(), ctx_params).context("cannot create the context")?;
    if let Some(n) = ctx.host_cache_note() {
        eprintln!("{TOOL}: warning: {n}");
    }
    if a.prefetch.predict().is_on() && ctx.predict_stats().is_none() {
        eprintln!(
            "{TOOL}: warning: --moe-predict {} needs the expert cache (a device, experts in host memory, --moe-cache-mib not 0): no prediction",
            a.prefetch.moe_predict
        );
    }
    if let Some(r) = ctx.moe().alias() {
        eprintln!("{TOOL}: {}", r.line());
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
        (Some(_), None, Some(d)) if d.diagnostics().is_some_and(|x| x.set_event_timeline(true)) => {
            Some(d.clone())
        }
        (Some(_), None, _) => bail!(
            "--timeline-out: needs a simulated device (--device SIM0) or a CUDA device (its events)"
        ),
        _ => None,
    };

    let speculation = super::speculative::load(
        a,
        model,
        &spec_placement,
        n_threads,
        fit_plan.as_ref().map(|p| (p, &fit_ctx)),
    )?;

    let link_start = ctx.link_counts();
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
    let mut spec = match speculation {
        Some(sp) => {
            let clock = sp.draft_clock.clone();
            Some((sp.start(a, &prompt_ids)?, clock.map(|c| (c.totals(), c))))
        }
        None => None,
    };
    let stats_prompt = ctx.stats();
    let host_prompt = ctx.host_cache_stats();
    let pipeline_prompt = ctx.pipeline_counts();
    let link_prompt = ctx.link_counts();

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
    let host_gen0 = ctx.host_time();
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
            let fed = spec.as_ref().map_or(ctx.n_past(), |(sd, _)| sd.n_tokens());
            if fed + 1 > n_ctx {
                stop = "context_full";
                break;
            }
            // with speculation, a token the last verify batch guessed
            // right needs no decode; gen_decodes counts tokens fed either
            // way (the per-token figures)
            let row = match &mut spec {
                Some((sd, _)) => {
                    // guesses past the last token wanted are never checked
                    let max_draft = limit.saturating_sub(gen_tokens + 1);
                    sd.feed(&mut ctx, id, max_draft).context("decode failed")?.0
                }
                None => {
                    ctx.decode(&[id], false).context("decode failed")?;
                    ctx.logits(0).context("no logits after decode")?
                }
            };
            gen_decodes += 1;
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
    let gen_device_s = ctx.host_time().since(&host_gen0).device_ns as f64 * 1e-9;
    let rest = text.finish();
    emit(&mut out, &rest);
    emit(&mut out, "\n");
    drop(out);
    logits_out.finish()?;
    tokens_out.finish()?;

    if let Some((sd, _)) = &mut spec {
        sd.finish(&mut ctx);
    }
    let stats_total = ctx.stats();
    if let (Some((p, mut f)), Some(t)) = (trace_out, ctx.take_expert_trace()) {
        f.write_all(&t.to_bytes())
            .with_context(|| format!("cannot write {}", p.display()))?;
        f.commit()?;
    }
    let mut s = RunSummary {
        model: loaded.path.display().to_string(),
        device,
        expert_copy: !placement.no_expert_copy,
        offload_min_batch: placement.offload_min_batch,
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
        host_s_per_token: if gen_tokens > 0 {
            (gen_s - gen_device_s).max(0.0) / gen_tokens as f64
        } else {
            0.0
        },
        stop: stop.into(),
        sim: sim.as_ref().map(|r| {
            let mut rep = r.report(prompt_ids.len(), gen_decodes);
            // a draft on its own simulated device runs between the
            // target's decodes: its simulated time adds to generation's
            if let Some((_, Some((t0, c)))) = &spec {
                rep.add_serial_gen_ns(c.totals().since(t0).now_ns, gen_decodes);
            }
            rep
        }),
        n_threads_batch: prompt_threads,
        n_threads: if gen_decodes > 0 {
            ctx.cpu_backend().n_threads()
        } else {
            ctx.params().n_threads
        },
        forced_routing: forced_text.is_some(),
        forced_routing_text: forced_text,
        host_weights_upload: common::summary::host_weights_upload(&loaded.model),
        n_ubatch: ctx.params().n_ubatch,
        moe_cache_alias: ctx.moe().alias().is_some_and(|r| r.on),
        moe_cache_alias_reason: ctx
            .moe()
            .alias()
            .map(|r| r.reason.clone())
            .unwrap_or_default(),
        moe_cache_alias_text: ctx.moe().alias().map(|r| r.line()),
        ..Default::default()
    };
    if let (Some(d), Some(p)) = (&event_timeline, &a.timeline_out) {
        common::simtime::write_event_timeline(d.as_ref(), p)?;
    }
    if let (Some(r), Some(p)) = (&sim, &a.timeline_out) {
        r.write_timeline(p)?;
    }
    s.spec = spec.as_ref().map(|(sd, _)| {
        common::spec_summary::SpecSummary::of(sd.stats(), a.spec.draft_n_max, sd.draft_decodes())
    });
    s.set_traffic(&stats_total, &stats_delta(&stats_prompt, &stats_total));
    s.set_moe(&ctx.moe_stats());
    s.host_cache = ctx.host_cache_stats().map(|h| {
        common::host_cache_summary::HostCacheSummary::of(&h, host_prompt.as_ref(), gen_decodes)
    });
    s.devices = ctx.device_stats();
    s.pipeline = common::pipeline_summary::PipelineSummary::of(
        &ctx.pipeline_counts().since(&pipeline_prompt),
        gen_decodes,
        ctx.last_n_splits(),
    );
    if let (Some(a0), Some(a1), Some(a2)) = (link_start, link_prompt, ctx.link_counts()) {
        s.rpc = Some(common::rpc_summary::RpcSummary::of(
            &a0,
            &a1,
            &a2,
            gen_decodes,
        ));
    }
    s.prefetch = common::prefetch_report::PrefetchReport::with_predict(
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
        if default_run {
            eprint!("{}", s.offload_text());
        }
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
