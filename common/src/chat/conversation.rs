//! Conversation mode (`-cnv`): read a user turn after a `> ` prompt,
//! render the conversation with the chat template, decode only the text the
//! new turn adds (the KV cache keeps every earlier turn), stream the reply;
//! `/exit` or end of input (Ctrl-D) ends it with the summary.

use std::io::{BufRead, Write};
use std::time::Instant;

use anyhow::{Context as _, Result};
use llama::chat::{ChatTemplate, Message, RenderOptions};
use llama::{Context, Sampler};

use crate::stream::Utf8Stream;
use crate::tok;

/// What the loop needs besides the context and the sampler.
pub struct ConversationParams<'a> {
    /// The compiled chat template.
    pub template: &'a ChatTemplate,
    /// BOS / EOS texts and the time for the template.
    pub render: RenderOptions,
    /// `-sys`: the first message, from the system.
    pub system_prompt: Option<String>,
    /// Tokens to generate per reply (`None`: until EOG or a full context).
    pub n_predict: Option<usize>,
    /// Never stop at EOG (`--ignore-eos`).
    pub ignore_eos: bool,
    /// The tool name for messages.
    pub tool: &'a str,
}

/// Counts of one turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnStats {
    /// Tokens decoded for the turn's new text (user message and template
    /// framing), excluding the reply.
    pub prompt_tokens: usize,
    /// Tokens sampled for the reply.
    pub gen_tokens: usize,
    /// Cells in use after the turn.
    pub n_past: usize,
}

/// Totals of a conversation.
#[derive(Debug, Clone, Default)]
pub struct ConversationStats {
    /// Every turn.
    pub turns: Vec<TurnStats>,
    /// Seconds decoding turn prompts.
    pub prompt_s: f64,
    /// Seconds generating replies.
    pub gen_s: f64,
    /// Single-token decodes while generating.
    pub gen_decodes: usize,
    /// Why it ended: `exit`, `eof`, `interrupted`, `context_full`,
    /// `stdout_closed`.
    pub stop: String,
}

/// Run the loop on `input` / `out` (stdin / stdout in `llama-run`).
pub fn run(
    ctx: &mut Context,
    sampler: &mut Sampler,
    p: &ConversationParams,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> Result<ConversationStats> {
    let model = ctx.model().clone();
    let tokenizer = &model.tokenizer;
    let mut messages: Vec<Message> = Vec::new();
    if let Some(s) = &p.system_prompt {
        messages.push(Message::new("system", s.clone()));
    }
    // the exact text the KV cache holds, to decode only what a turn adds
    let mut fed = String::new();
    let mut stats = ConversationStats::default();
    let mut last_row: Vec<f32> = Vec::new();
    let n_ctx = ctx.n_ctx();
    stats.stop = "eof".into();
    loop {
        write!(out, "\n> ").and_then(|()| out.flush()).ok();
        let mut line = String::new();
        let n = input
            .read_line(&mut line)
            .context("cannot read the user's turn")?;
        if n == 0 {
            break; // Ctrl-D
        }
        let text = line.trim_end_matches(['\n', '\r']).to_string();
        if text.trim() == "/exit" {
            stats.stop = "exit".into();
            break;
        }
        if crate::signals::interrupted() {
            stats.stop = "interrupted".into();
            break;
        }
        messages.push(Message::new("user", text));
        let opts = RenderOptions {
            add_generation_prompt: true,
            ..p.render.clone()
        };
        let rendered = p
            .template
            .render(&messages, &opts)
            .map_err(anyhow::Error::msg)?;
        // only the new text when the cache holds a prefix of the rendering;
        // else (the template rewrote history) start over
        let (delta, first) = match rendered.strip_prefix(fed.as_str()) {
            Some(d) if !fed.is_empty() => (d.to_string(), false),
            _ => {
                ctx.clear();
                (rendered.clone(), true)
            }
        };
        let ids = tok::tokenize(tokenizer, &delta, first, true)?;
        if ctx.n_past() + ids.len() + 1 > n_ctx {
            writeln!(out).ok();
            eprintln!(
                "{}: the conversation is full ({} of {} tokens, -c); ending it",
                p.tool,
                ctx.n_past(),
                n_ctx
            );
            stats.stop = "context_full".into();
            break;
        }
        for &t in &ids {
            sampler.accept(t);
        }
        let t0 = Instant::now();
        for chunk in ids.chunks(ctx.params().n_batch.max(1)) {
            ctx.decode(chunk, false).context("decode failed")?;
        }
        stats.prompt_s += t0.elapsed().as_secs_f64();
        if let Some(row) = ctx.logits(0) {
            last_row = row.to_vec();
        }
        fed.push_str(&delta);
        let mut turn = TurnStats {
            prompt_tokens: ids.len(),
            ..Default::default()
        };

        // the reply
        let t1 = Instant::now();
        let mut stream = Utf8Stream::new();
        let mut reply = String::new();
        let limit = p.n_predict.unwrap_or(usize::MAX);
        let eog_ids: Vec<i32> = if p.ignore_eos {
            tokenizer.eog_tokens().collect()
        } else {
            Vec::new()
        };
        while turn.gen_tokens < limit && !crate::signals::interrupted() {
            for &e in &eog_ids {
                if let Some(l) = last_row.get_mut(e as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
            let id = sampler.sample(&last_row);
            sampler.accept(id);
            turn.gen_tokens += 1;
            if !p.ignore_eos && tok::is_eog(tokenizer, id) {
                break;
            }
            let s = stream.push(&tok::piece(tokenizer, id, false));
            reply.push_str(&s);
            if out
                .write_all(s.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                crate::signals::set_stdout_closed();
                break;
            }
            if ctx.n_past() + 1 > n_ctx {
                break;
            }
            ctx.decode(&[id], false).context("decode failed")?;
            stats.gen_decodes += 1;
            fed.push_str(&s);
            if let Some(row) = ctx.logits(0) {
                last_row.clear();
                last_row.extend_from_slice(row);
            }
        }
        let rest = stream.finish();
        reply.push_str(&rest);
        out.write_all(rest.as_bytes()).ok();
        writeln!(out).ok();
        stats.gen_s += t1.elapsed().as_secs_f64();
        turn.n_past = ctx.n_past();
        eprintln!(
            "{}: turn {}: {} new prompt tokens decoded, {} generated, {} in the cache",
            p.tool,
            stats.turns.len() + 1,
            turn.prompt_tokens,
            turn.gen_tokens,
            turn.n_past
        );
        stats.turns.push(turn);
        messages.push(Message::new("assistant", reply));
        if crate::signals::stdout_closed() {
            stats.stop = "stdout_closed".into();
            break;
        }
        if crate::signals::interrupted() {
            stats.stop = "interrupted".into();
            break;
        }
    }
    Ok(stats)
}
