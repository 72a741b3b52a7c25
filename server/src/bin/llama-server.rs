//! `llama-server`: load a model (or the embedded default one), start the
//! decode thread and serve the OpenAI-compatible API until Ctrl-C.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use common::cli;
use llama::Context;
use server::args::ServerArgs;
use server::constraint::Grammars;
use server::engine::{self, EngineConfig};
use server::metrics::Metrics;
use server::request::Defaults;
use server::routes::router;
use server::state::AppState;

const TOOL: &str = "llama-server";

fn main() -> ExitCode {
    cli::main_wrapper(TOOL, || {
        let args = ServerArgs::parse_from_args(std::env::args_os())?;
        serve(&args)
    })
}

fn serve(a: &ServerArgs) -> Result<()> {
    let threads = a.threads.unwrap_or_else(cli::default_threads);
    let (tk, tv) = a.cache_types()?;
    let mut placement = a.placement.clone();
    let mut moe_cache = a.moe_cache.clone();
    let fit_ctx = common::fit::FitContext {
        n_ctx: a.ctx_size,
        n_ubatch: a.batch.ubatch_size.min(a.batch.batch_size),
        type_k: tk,
        type_v: tv,
        prefetch_slots: a.prefetch.slots()?,
    };
    let plan = common::fit::apply(
        TOOL,
        &a.fit,
        a.model.as_deref(),
        &fit_ctx,
        &mut placement,
        &mut moe_cache,
    )?;
    let loaded = cli::load_model(TOOL, a.model.as_deref(), &placement, threads)?;
    let model = loaded.model;
    let n_ctx = if a.ctx_size == 0 {
        model.hparams.n_ctx_train
    } else {
        a.ctx_size
    };
    let n_slot_ctx = n_ctx / a.parallel;
    let mut params = a.batch.context_params(n_ctx, threads, &placement);
    params.kv_type = tk;
    params.kv_type_v = Some(tv);
    (params.moe.cache, params.moe.cache_sizes) = moe_cache.device_params(&placement)?;
    params.moe.hybrid = a.moe_cache.hybrid()?;
    params.moe.cache_alias = a.moe_cache.alias()?;
    params.moe.prefetch = a.prefetch.setting()?;
    params.moe.predict = a.prefetch.predict();
    // one decode holds every slot's pending token and its draft tokens,
    // plus up to a ubatch of prompt
    let spec = a.spec.params()?;
    params.n_batch = params
        .n_batch
        .max(params.n_ubatch + a.parallel * (1 + spec.n_max));
    let ctx = Context::new(Arc::clone(&model), params).context("cannot create the context")?;
    let drafts = server::speculative::draft_sources(
        a,
        &model,
        &placement,
        plan.as_ref().map(|p| (p, &fit_ctx)),
        n_slot_ctx,
        threads,
    )?;
    let speculative = !drafts.is_empty();
    let model_id = a.alias.clone().unwrap_or_else(|| {
        loaded
            .path
            .file_name()
            .map_or_else(|| "model".into(), |f| f.to_string_lossy().into_owned())
    });
    let vocab = model.tokenizer.n_vocab();
    let max_token_bytes = (0..vocab as i32)
        .map(|t| model.tokenizer.token_to_piece(t, true).len())
        .max()
        .unwrap_or(1)
        .max(1);
    let grammars = Arc::new(Grammars::new(Arc::clone(&model))?);
    let metrics = Arc::new(Metrics::default());
    let (jobs, rx) = tokio::sync::mpsc::channel(a.max_queue.max(1));
    let view: engine::SlotsView = Arc::default();
    let cfg = EngineConfig {
        n_slots: a.parallel,
        n_slot_ctx,
        cont_batching: a.continuous_batching(),
        view: Arc::clone(&view),
    };
    let template = server::chat::template_text(
        a.chat_template.as_deref(),
        a.chat_template_file.as_deref(),
        &model.file,
    )?;
    let tok = &model.tokenizer;
    let chat_render = server::chat::make_render(
        &template,
        common::chat::token_text(tok, tok.bos()),
        common::chat::token_text(tok, tok.eos()),
    )?;
    if let Some(dir) = &a.slot_save_path {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--slot-save-path {}", dir.display()))?;
    }
    let s = &a.sampling;
    let defaults = Defaults {
        temperature: s.temp,
        top_k: s.top_k,
        top_p: s.top_p,
        min_p: s.min_p,
        seed: u64::try_from(s.seed)
            .ok()
            .filter(|&x| x != server::native::DEFAULT_SEED),
        repeat_penalty: s.repeat_penalty,
        repeat_last_n: s.repeat_last_n,
        n_keep: a.keep,
        spec_n_max: spec.n_max,
        spec_n_min: spec.n_min.min(spec.n_max),
        spec_p_min: spec.p_min,
    };
    let m2 = Arc::clone(&metrics);
    let decoder = std::thread::Builder::new()
        .name("decode".into())
        .spawn(move || engine::run(ctx, rx, m2, cfg, drafts))
        .context("cannot start the decode thread")?;
    let state = Arc::new(AppState {
        jobs,
        metrics,
        model: Arc::clone(&model),
        model_id,
        model_aliases: a
            .model
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect(),
        api_key: a.api_key.clone(),
        n_slot_ctx,
        n_slots: a.parallel,
        default_max_tokens: usize::try_from(a.n_predict).ok(),
        timeout: Duration::from_secs(a.timeout),
        chat_render,
        grammars,
        max_token_bytes,
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        has_alias: a.alias.is_some(),
        model_path: loaded.path.display().to_string(),
        chat_template: template,
        defaults: std::sync::RwLock::new(defaults),
        ctx_shift: a.context_shift(),
        slots_enabled: a.slots_enabled(),
        slot_save_path: a.slot_save_path.clone(),
        props_enabled: a.props,
        webui: !a.no_webui,
        verbose: a.verbose,
        embedding: a.embedding,
        pooling: a.pooling()?,
        reranking: a.reranking,
        view,
        speculative,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let addr = format!("{}:{}", a.host, a.port);
        let listener = server::serve::bind(&addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!(
            "{TOOL}: model {} ({} slots of {} tokens, continuous batching {})",
            loaded.path.display(),
            a.parallel,
            n_slot_ctx,
            if a.continuous_batching() { "on" } else { "off" }
        );
        eprintln!("server listening on http://{}:{}", a.host, local.port());
        server::serve::serve(listener, router(state), async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("server failed")
    })?;
    drop(decoder);
    Ok(())
}
