//! `llama-server`: load a model (or the embedded default one), start the
//! decode thread and serve the OpenAI-compatible API until Ctrl-C.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use common::cli;
use llama::Context;
use server::args::ServerArgs;
use server::chat_fallback::{render_chatml_fallback, ChatRender};
use server::constraint::Grammars;
use server::engine::{self, EngineConfig};
use server::http::{router, AppState};
use server::metrics::Metrics;

const TOOL: &str = "llama-server";

fn main() -> ExitCode {
    cli::main_wrapper(TOOL, || {
        let args = ServerArgs::parse_from_args(std::env::args_os())?;
        serve(&args)
    })
}

fn serve(a: &ServerArgs) -> Result<()> {
    let threads = a.threads.unwrap_or_else(cli::default_threads);
    let loaded = cli::load_model(TOOL, a.model.as_deref(), &a.placement, threads)?;
    let model = loaded.model;
    let n_ctx = if a.ctx_size == 0 {
        model.hparams.n_ctx_train
    } else {
        a.ctx_size
    };
    let n_slot_ctx = n_ctx / a.parallel;
    let (tk, tv) = a.cache_types()?;
    let mut params = a.batch.context_params(n_ctx, threads, &a.placement);
    params.kv_type = tk;
    params.kv_type_v = Some(tv);
    params.moe_cache = a.moe_cache.params(&a.placement)?;
    params.moe_hybrid = a.moe_cache.hybrid()?;
    params.prefetch_experts_slots = a.prefetch.slots()?;
    params.moe_predict = a.prefetch.predict();
    // one decode holds every slot's pending token plus up to a ubatch of prompt
    params.n_batch = params.n_batch.max(params.n_ubatch + a.parallel);
    let ctx = Context::new(Arc::clone(&model), params).context("cannot create the context")?;
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
    let cfg = EngineConfig {
        n_slots: a.parallel,
        n_slot_ctx,
        cont_batching: a.continuous_batching(),
    };
    let m2 = Arc::clone(&metrics);
    let decoder = std::thread::Builder::new()
        .name("decode".into())
        .spawn(move || engine::run(ctx, rx, m2, cfg))
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
        chat_render: model_chat_render(&model),
        grammars,
        webui: !a.no_webui,
        max_token_bytes,
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let addr = format!("{}:{}", a.host, a.port);
        let listener = tokio::net::TcpListener::bind(&addr)
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
        axum::serve(listener, router(state))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("server failed")
    })?;
    drop(decoder);
    Ok(())
}

/// The model's own chat template (`tokenizer.chat_template`, rendered by
/// `llama::chat` as transformers does), or ChatML when it has none or the
/// template does not compile (said once on stderr).
fn model_chat_render(model: &llama::Model) -> ChatRender {
    let text = match llama::chat::template_from_gguf(&model.file, None) {
        Ok(Some(t)) => t,
        _ => return Arc::new(render_chatml_fallback),
    };
    let tmpl = match llama::chat::ChatTemplate::new(&text) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "llama-server: the model's chat template does not compile ({e}); using ChatML"
            );
            return Arc::new(render_chatml_fallback);
        }
    };
    let tok = &model.tokenizer;
    let (bos, eos) = (
        common::chat::token_text(tok, tok.bos()),
        common::chat::token_text(tok, tok.eos()),
    );
    Arc::new(move |messages, add_generation_prompt| {
        if messages.is_empty() {
            anyhow::bail!("'messages' must hold at least one message");
        }
        let msgs: Vec<llama::chat::Message> = messages
            .iter()
            .map(|m| llama::chat::Message::new(m.role.clone(), m.content.clone()))
            .collect();
        let opts = llama::chat::RenderOptions {
            add_generation_prompt,
            bos_token: bos.clone(),
            eos_token: eos.clone(),
            ..Default::default()
        };
        tmpl.render(&msgs, &opts)
            .map_err(|e| anyhow::anyhow!("chat template: {e}"))
    })
}
