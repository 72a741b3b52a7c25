//! `llama-run -cnv`: the chat loop of `common::chat::conversation` over
//! stdin and stdout, then one summary over all turns.

use anyhow::Result;
use common::chat as chat_cli;
use common::cli;
use common::outfile::AtomicFile;
use common::signals;
use common::summary::RunSummary;
use llama::{Context, Sampler};

use super::flags::Args;
use super::TOOL;

/// `-cnv`: the chat loop, then the summary over all turns.
pub(crate) fn conversation(
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
        forced_routing: ctx.params().moe.forced_routing.is_some(),
        forced_routing_text: ctx
            .params()
            .moe
            .forced_routing
            .as_deref()
            .map(common::forced::summary_line),
        devices: ctx.device_stats(),
        host_weights_upload: common::summary::host_weights_upload(&loaded.model),
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
