//! The decode thread: slots, the queue, continuous batching.
//!
//! Each slot owns one sequence of the context's KV cache (sequence id =
//! slot index) and remembers the tokens its cells hold. A request takes
//! the idle slot whose cached tokens share the longest prefix with its
//! prompt, keeps that prefix (`seq_rm` of the rest) and decodes only the
//! remainder. Every loop turn builds one batch: the pending token of each
//! generating slot, then prompt tokens of slots still reading their prompt,
//! up to one ubatch in all, so a generating slot never waits more than one
//! ubatch for another request's prompt. Requests join between decodes;
//! a request whose client is gone (its event channel closed) leaves its
//! slot before the next decode.
//!
//! A slot whose context fills while its request may still generate shifts
//! its context (llama.cpp's context shift): it keeps the first `n_keep`
//! tokens, drops half of the rest, and decodes the kept tokens again into
//! emptied cells (recomputed, so the kept tokens' keys are exact, where
//! llama.cpp re-rotates them in place). Slot actions (`/slots/{id}`:
//! save, restore, erase) run on this thread between decodes ([`Task`]).
//!
//! With speculative decoding each slot has a draft source: a generating
//! slot's pending token enters the batch with the tokens its source
//! guesses follow it (each with its logits row); the request's sampler
//! takes the rows in order, a guess it agrees with needs no decode of its
//! own, and the cells of the guesses it does not reach are removed.

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use llama::speculative::DraftSource;
use llama::{Batch, Context, Sampler, SamplerParams, SeqId};
use tokio::sync::{mpsc, oneshot};

use crate::metrics::Metrics;
use crate::request::GenParams;
use crate::stop::{find_stop, safe_len};

/// What the decode thread tells a request's handler.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A generated token and the text it releases (possibly empty: an
    /// incomplete UTF-8 sequence or a possible stop string is held back).
    Token {
        /// Token id.
        id: i32,
        /// Text released by this token.
        text: String,
        /// Its log-probability and the top alternatives, when asked for.
        logprobs: Option<TokenLogprobs>,
        /// The request's timings so far.
        timings: Timings,
    },
    /// Text released at the end, not tied to a new token.
    Text(String),
    /// The end of generation.
    Done(Usage),
    /// Generation failed.
    Error(String),
}

/// The log-probability of a chosen token and of the most likely tokens:
/// by default of the model's distribution (log-softmax of the logits,
/// before temperature and truncation: llama.cpp's default, and vLLM's);
/// with `post_sampling_probs` of the distribution the token was drawn
/// from ([`post_sampling_logprobs`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    /// Log-probability of the chosen token.
    pub logprob: f32,
    /// The `n` most likely tokens and their log-probabilities, best first.
    pub top: Vec<(i32, f32)>,
}

/// [`TokenLogprobs`] of `tok` in `logits` with `n` alternatives.
pub fn token_logprobs(logits: &[f32], tok: i32, n: usize) -> TokenLogprobs {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let lse = max as f64 + sum.ln();
    let lp = |l: f32| (f64::from(l) - lse) as f32;
    let mut idx: Vec<i32> = (0..logits.len() as i32).collect();
    let n = n.min(idx.len());
    if n > 0 {
        idx.select_nth_unstable_by(n - 1, |&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        idx.truncate(n);
        idx.sort_by(|&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
    } else {
        idx.clear();
    }
    TokenLogprobs {
        logprob: logits
            .get(tok as usize)
            .map_or(f32::NEG_INFINITY, |&l| lp(l)),
        top: idx
            .into_iter()
            .map(|t| (t, lp(logits[t as usize])))
            .collect(),
    }
}

/// [`TokenLogprobs`] of `tok` in a sampler's post-chain distribution
/// `dist` (most likely first, from [`Sampler::sample_with_probs`]) with at
/// most `n` alternatives: only tokens the chain kept are listed.
pub fn post_sampling_logprobs(dist: &[(i32, f32)], tok: i32, n: usize) -> TokenLogprobs {
    let ln = |p: f32| if p > 0.0 { p.ln() } else { f32::NEG_INFINITY };
    TokenLogprobs {
        logprob: dist
            .iter()
            .find(|d| d.0 == tok)
            .map_or(f32::NEG_INFINITY, |d| ln(d.1)),
        top: dist.iter().take(n).map(|&(t, p)| (t, ln(p))).collect(),
    }
}

/// llama.cpp's `timings` of a request: prompt tokens decoded and the time
/// to the first token, tokens generated and the time since.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    /// Prompt tokens decoded (the cached prefix not counted).
    pub prompt_n: usize,
    /// Milliseconds from the slot taking the request to the first token.
    pub prompt_ms: f64,
    /// Tokens generated.
    pub predicted_n: usize,
    /// Milliseconds from the first token to the last.
    pub predicted_ms: f64,
    /// Expert-cache hits and misses counted while the request ran (the
    /// cache is shared: other requests' decodes in that time are counted
    /// too); `None` without an expert cache, and in the per-token timings.
    pub expert_cache: Option<(u64, u64)>,
    /// Speculative decoding's tokens drafted for the request and, of
    /// those, accepted (llama.cpp's `draft_n`, `draft_n_accepted`); `None`
    /// when the server does not speculate.
    pub draft: Option<(usize, usize)>,
}

/// Token counts of a finished request.
#[derive(Clone, Debug, PartialEq)]
pub struct Usage {
    /// `stop` (end of generation token or stop string) or `length`.
    pub finish_reason: &'static str,
    /// llama.cpp's `stop_type`: `eos`, `word` (a stop string) or `limit`.
    pub stop_type: &'static str,
    /// The stop string that ended the generation (`word`), else empty.
    pub stopping_word: String,
    /// The prompt was cut to fit, or the context shifted, or the
    /// generation stopped at the end of the slot's context.
    pub truncated: bool,
    /// The slot that served the request.
    pub id_slot: usize,
    /// Timings of the request.
    pub timings: Timings,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Of those, tokens reused from the cache.
    pub cached_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
}

/// A request for the decode thread.
pub struct Job {
    /// Prompt token ids (checked: non-empty, in the vocabulary, shorter than a slot).
    pub prompt: Vec<i32>,
    /// Sampling and stopping settings.
    pub params: GenParams,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Where the events go; a closed channel cancels the request.
    pub events: mpsc::UnboundedSender<Event>,
    /// The prompt was cut to fit the slot (reported as `truncated`).
    pub prompt_truncated: bool,
    /// Shift the context when it fills (else stop there).
    pub ctx_shift: bool,
    /// The event channels of further choices (`n` > 1), one each: they
    /// take idle slots of their own, share the prompt's cells (`seq_cp`
    /// after the prompt is decoded once) and sample from its logits on.
    pub more_choices: Vec<mpsc::UnboundedSender<Event>>,
}

/// What the decode thread is asked to do.
pub enum Task {
    /// Generate.
    Generate(Box<Job>),
    /// Act on an idle slot (`/slots/{id}?action=...`).
    Slot(SlotTask),
    /// The last hidden states of a prompt's tokens (embeddings), computed
    /// in an idle slot.
    Embed(EmbedTask),
}

/// A prompt to embed and where its hidden states go.
pub struct EmbedTask {
    /// The prompt (checked: non-empty, in the vocabulary, shorter than a slot).
    pub tokens: Vec<i32>,
    /// Each token's last hidden state (`n_embd` values), or why not.
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
}

/// An action on one slot and where its answer goes.
pub struct SlotTask {
    /// The slot.
    pub id: usize,
    /// What to do.
    pub action: SlotAction,
    /// The answer: tokens saved / restored / erased, or why not.
    pub reply: oneshot::Sender<Result<usize, String>>,
}

/// `/slots/{id}?action=...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotAction {
    /// Write the slot's tokens to this file.
    Save(PathBuf),
    /// Read tokens from this file and decode them into the slot.
    Restore(PathBuf),
    /// Empty the slot's cells.
    Erase,
}

/// What `/slots` shows of one slot.
#[derive(Clone, Debug, Default)]
pub struct SlotView {
    /// Serving a request now.
    pub is_processing: bool,
    /// Tokens in its cells.
    pub n_past: usize,
    /// Tokens generated for the current (or last) request.
    pub n_decoded: usize,
    /// Requests this slot has taken.
    pub n_tasks: u64,
    /// The settings of the current (or last) request.
    pub params: Option<GenParams>,
}

/// The slots' state, shared with the HTTP side (`/slots`).
pub type SlotsView = Arc<Mutex<Vec<SlotView>>>;

/// How the decode thread runs.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Slots.
    pub n_slots: usize,
    /// Cells one slot may use (its context).
    pub n_slot_ctx: usize,
    /// Let requests join while others run.
    pub cont_batching: bool,
    /// Where `/slots` reads the slots' state.
    pub view: SlotsView,
}

/// The expert cache's (hits, misses) so far; `None` without a cache.
fn cache_counts(ctx: &Context) -> Option<(u64, u64)> {
    ctx.moe_cache_stats().map(|s| {
        let t = s.total();
        (t.hits(), t.misses())
    })
}

/// End a slot's request with an error event (a constraint that failed).
fn fail_slot(s: &mut Slot, metrics: &Metrics, msg: String) {
    if let Some(a) = s.active.take() {
        let _ = a.job.events.send(Event::Error(msg));
        metrics.requests_failed.fetch_add(1, Relaxed);
    }
}

struct Active {
    job: Job,
    /// Tokens to decode before sampling: the prompt, or after a context
    /// shift the kept tokens.
    feed: Vec<i32>,
    /// Next index of `feed` to decode.
    prompt_pos: usize,
    /// When the slot took the request, and when the first token came.
    t_start: Instant,
    t_first: Option<Instant>,
    /// The expert cache's (hits, misses) when it took the slot.
    cache0: Option<(u64, u64)>,
    /// Prompt tokens decoded (not cached).
    prompt_n: usize,
    /// The context shifted.
    shifted: bool,
    cached: usize,
    sampler: Sampler,
    /// The sampled token not yet decoded.
    pending: Option<i32>,
    n_gen: usize,
    bytes: Vec<u8>,
    sent: usize,
    /// A further choice waiting for this slot's prompt to be decoded (it
    /// then shares its cells and samples from its last row).
    follow: Option<usize>,
    /// The draft tokens in the batch being decoded after `pending`, each
    /// with its batch index (its logits row), not yet checked.
    guesses: Vec<(i32, usize)>,
    /// Draft tokens sent to the target for this request, and of those
    /// the tokens sampled agreed with.
    draft_n: usize,
    draft_n_accepted: usize,
}

struct Slot {
    seq: SeqId,
    /// Tokens in this slot's cells, in position order.
    cache: Vec<i32>,
    active: Option<Active>,
    /// Requests taken.
    n_tasks: u64,
    /// What drafts this slot's next tokens (speculative decoding), if the
    /// server speculates.
    draft: Option<Box<dyn DraftSource + Send>>,
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Copy the slots' state to the view `/slots` reads.
fn publish(view: &SlotsView, slots: &[Slot]) {
    let Ok(mut v) = view.lock() else { return };
    v.resize_with(slots.len(), SlotView::default);
    for (s, out) in slots.iter().zip(v.iter_mut()) {
        out.is_processing = s.active.is_some();
        out.n_past = s.cache.len();
        out.n_tasks = s.n_tasks;
        if let Some(a) = &s.active {
            out.n_decoded = a.n_gen;
            if out.params.as_ref() != Some(&a.job.params) {
                out.params = Some(a.job.params.clone());
            }
        }
    }
}

/// The file a slot is saved to: its tokens as JSON.
#[derive(serde::Serialize, serde::Deserialize)]
struct SlotFile {
    /// What the file is.
    format: String,
    /// Vocabulary size of the model that wrote it.
    n_vocab: usize,
    /// The slot's tokens, in position order.
    tokens: Vec<i32>,
}

const SLOT_FILE_FORMAT: &str = "ggml-rs llama-server slot tokens v1";

/// Run a slot action (the slot must be idle) and answer it.
fn slot_task(
    ctx: &mut Context,
    slots: &mut [Slot],
    t: SlotTask,
    n_ubatch: usize,
    n_slot_ctx: usize,
) {
    let r = (|| -> Result<usize, String> {
        let n_slots = slots.len();
        let s = slots
            .get_mut(t.id)
            .ok_or_else(|| format!("no slot {}: the server has {n_slots} slots", t.id))?;
        if s.active.is_some() {
            return Err(format!("slot {} is busy with a request", t.id));
        }
        match &t.action {
            SlotAction::Erase => {
                let n = s.cache.len();
                ctx.seq_rm(s.seq, 0, -1);
                s.cache.clear();
                Ok(n)
            }
            SlotAction::Save(path) => {
                let f = SlotFile {
                    format: SLOT_FILE_FORMAT.into(),
                    n_vocab: ctx.model().hparams.n_vocab,
                    tokens: s.cache.clone(),
                };
                let text = serde_json::to_string(&f).map_err(|e| e.to_string())?;
                std::fs::write(path, text)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                Ok(s.cache.len())
            }
            SlotAction::Restore(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let f: SlotFile = serde_json::from_str(&text)
                    .map_err(|e| format!("{} is not a saved slot: {e}", path.display()))?;
                let n_vocab = ctx.model().hparams.n_vocab;
                if f.format != SLOT_FILE_FORMAT || f.n_vocab != n_vocab {
                    return Err(format!(
                        "{} is not a slot saved by this model (format '{}', vocabulary {} where the model has {n_vocab})",
                        path.display(),
                        f.format,
                        f.n_vocab
                    ));
                }
                if let Some(bad) = f.tokens.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
                    return Err(format!(
                        "{}: token {bad} is out of the vocabulary",
                        path.display()
                    ));
                }
                if f.tokens.len() >= n_slot_ctx {
                    return Err(format!(
                        "{}: {} tokens do not fit a slot of {n_slot_ctx}",
                        path.display(),
                        f.tokens.len()
                    ));
                }
                // the file holds tokens: their cells are computed again
                ctx.seq_rm(s.seq, 0, -1);
                s.cache.clear();
                let mut batch = Batch::new();
                for chunk in f.tokens.chunks(n_ubatch.max(1)) {
                    batch.clear();
                    for &tok in chunk {
                        batch.add(tok, s.cache.len() as i32, s.seq, false);
                        s.cache.push(tok);
                    }
                    if let Err(e) = ctx.decode_batch(&batch) {
                        ctx.seq_rm(s.seq, 0, -1);
                        s.cache.clear();
                        return Err(format!("decoding the restored tokens failed: {e}"));
                    }
                }
                Ok(s.cache.len())
            }
        }
    })();
    let _ = t.reply.send(r);
}

/// Decode a prompt in an idle slot with every row's hidden state kept,
/// answer them, and leave the slot empty.
fn embed_task(ctx: &mut Context, s: &mut Slot, t: EmbedTask, n_ubatch: usize) {
    let n_ub = n_ubatch.max(1);
    ctx.seq_rm(s.seq, 0, -1);
    s.cache.clear();
    ctx.set_embeddings(true);
    let mut rows = Vec::with_capacity(t.tokens.len());
    let mut batch = Batch::new();
    let mut r = Ok(());
    'chunks: for (k, chunk) in t.tokens.chunks(n_ub).enumerate() {
        batch.clear();
        for (i, &tok) in chunk.iter().enumerate() {
            batch.add(tok, (k * n_ub + i) as i32, s.seq, true);
        }
        if let Err(e) = ctx.decode_batch(&batch) {
            r = Err(format!("decoding the input failed: {e}"));
            break;
        }
        for j in 0..chunk.len() {
            match ctx.batch_embeddings(j) {
                Some(e) => rows.push(e.to_vec()),
                None => {
                    r = Err("the context returned no hidden state".into());
                    break 'chunks;
                }
            }
        }
    }
    ctx.set_embeddings(false);
    ctx.seq_rm(s.seq, 0, -1);
    let _ = t.reply.send(r.map(|()| rows));
}

fn common_prefix(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Run the decode loop until the job channel closes.
///
/// `drafts`: speculative decoding's draft source of each slot, in slot
/// order (empty: no speculation). A generating slot's pending token then
/// goes into the batch with the tokens its source guesses follow it; each
/// guess the sampled token agrees with is taken from its own logits row,
/// and the cells of the guesses not taken are removed.
pub fn run(
    mut ctx: Context,
    mut rx: mpsc::Receiver<Task>,
    metrics: Arc<Metrics>,
    cfg: EngineConfig,
    drafts: Vec<Box<dyn DraftSource + Send>>,
) {
    let model = Arc::clone(ctx.model());
    let mut drafts = drafts.into_iter();
    let mut slots: Vec<Slot> = (0..cfg.n_slots)
        .map(|i| Slot {
            seq: i as SeqId,
            cache: Vec::new(),
            active: None,
            n_tasks: 0,
            draft: drafts.next(),
        })
        .collect();
    let n_vocab = model.hparams.n_vocab;
    metrics
        .spec_on
        .store(slots.iter().any(|s| s.draft.is_some()), Relaxed);
    let n_ubatch = ctx.params().n_ubatch;
    metrics.n_slots.store(cfg.n_slots as u64, Relaxed);
    metrics.kv_size.store(ctx.n_ctx() as u64, Relaxed);
    metrics.update_from_context(&ctx);
    let mut seed_counter: u64 = 0;
    let mut batch = Batch::new();
    // a request of several choices waiting for enough idle slots (it keeps
    // its place: later requests wait behind it)
    let mut held: Option<Job> = None;
    // prompts to embed, waiting for an idle slot
    let mut embeds: std::collections::VecDeque<EmbedTask> = Default::default();
    loop {
        // leave: requests whose client went away
        for s in &mut slots {
            if s.active.as_ref().is_some_and(|a| a.job.events.is_closed()) {
                s.active = None;
                metrics.requests_cancelled.fetch_add(1, Relaxed);
            }
        }
        // a further choice whose prompt slot left before decoding the
        // prompt decodes the prompt itself
        for i in 0..slots.len() {
            let Some(p) = slots[i].active.as_ref().and_then(|a| a.follow) else {
                continue;
            };
            if slots[p].active.is_none() {
                if let Some(a) = slots[i].active.as_mut() {
                    a.follow = None;
                    a.prompt_pos = 0;
                }
            }
        }
        // embeddings: in an idle slot, between decodes
        while !embeds.is_empty() {
            let Some(si) = slots.iter().rposition(|s| s.active.is_none()) else {
                break;
            };
            if let Some(t) = embeds.pop_front() {
                embed_task(&mut ctx, &mut slots[si], t, n_ubatch);
            }
        }
        // join: idle slots take queued requests
        if let Some(job) = held.take() {
            held = assign(&mut ctx, &mut slots, job, &metrics, &mut seed_counter);
        }
        let any_active = slots.iter().any(|s| s.active.is_some());
        if !any_active && held.is_none() {
            publish(&cfg.view, &slots);
            metrics.slots_busy.store(0, Relaxed);
            metrics.queued.store(rx.len() as u64, Relaxed);
            match rx.blocking_recv() {
                Some(Task::Generate(job)) => {
                    held = assign(&mut ctx, &mut slots, *job, &metrics, &mut seed_counter)
                }
                Some(Task::Slot(t)) => {
                    slot_task(&mut ctx, &mut slots, t, n_ubatch, cfg.n_slot_ctx);
                    publish(&cfg.view, &slots);
                }
                Some(Task::Embed(t)) => embeds.push_back(t),
                None => return,
            }
        }
        if cfg.cont_batching || !any_active {
            while held.is_none() && slots.iter().any(|s| s.active.is_none()) {
                match rx.try_recv() {
                    Ok(Task::Generate(job)) => {
                        held = assign(&mut ctx, &mut slots, *job, &metrics, &mut seed_counter)
                    }
                    Ok(Task::Slot(t)) => {
                        slot_task(&mut ctx, &mut slots, t, n_ubatch, cfg.n_slot_ctx)
                    }
                    Ok(Task::Embed(t)) => embeds.push_back(t),
                    Err(_) => break,
                }
            }
        }
        let busy = slots.iter().filter(|s| s.active.is_some()).count();
        publish(&cfg.view, &slots);
        metrics.slots_busy.store(busy as u64, Relaxed);
        metrics.queued.store(rx.len() as u64, Relaxed);
        if busy == 0 {
            continue;
        }

        // one batch: generating slots first, then prompt tokens up to a ubatch
        batch.clear();
        let mut rows: Vec<(usize, usize)> = Vec::new(); // (slot, batch index)
        let mut generating = Vec::new();
        for (si, s) in slots.iter_mut().enumerate() {
            if let Some(t) = s.active.as_mut().and_then(|a| a.pending.take()) {
                rows.push((si, batch.len()));
                generating.push(si);
                batch.add(t, s.cache.len() as i32, s.seq, true);
                s.cache.push(t);
            }
        }
        let mut n_prompt = 0;
        for (si, s) in slots.iter_mut().enumerate() {
            let room = n_ubatch.saturating_sub(batch.len());
            let Some(a) = s.active.as_mut() else { continue };
            if a.prompt_pos >= a.feed.len() || room == 0 {
                continue;
            }
            let k = room.min(a.feed.len() - a.prompt_pos);
            if a.t_first.is_none() {
                a.prompt_n += k;
            }
            for &t in &a.feed[a.prompt_pos..a.prompt_pos + k] {
                a.prompt_pos += 1;
                let last = a.prompt_pos == a.feed.len();
                if last {
                    rows.push((si, batch.len()));
                }
                batch.add(t, s.cache.len() as i32, s.seq, last);
                s.cache.push(t);
            }
            n_prompt += k;
        }
        // speculation: the guesses that follow each generating slot's token
        let (mut n_drafted, mut n_verify_tokens) = (0, 0);
        let n_batch = ctx.params().n_batch;
        for &si in &generating {
            let room = n_batch.saturating_sub(batch.len());
            let n = draft_into(&mut slots[si], &mut batch, room, cfg.n_slot_ctx, n_vocab);
            if n > 0 {
                n_drafted += n;
                n_verify_tokens += n + 1;
                metrics.drafts.fetch_add(1, Relaxed);
            }
        }
        if batch.is_empty() {
            continue;
        }
        let bytes0 = ctx.stats().h2d_bytes_experts;
        let t0 = Instant::now();
        let r = ctx.decode_batch(&batch);
        let us = t0.elapsed().as_micros() as u64;
        if n_drafted > 0 {
            metrics.draft_tokens.fetch_add(n_drafted as u64, Relaxed);
            metrics.verify_decodes.fetch_add(1, Relaxed);
            metrics
                .verify_tokens
                .fetch_add(n_verify_tokens as u64, Relaxed);
            metrics.verify_expert_bytes.fetch_add(
                ctx.stats().h2d_bytes_experts.saturating_sub(bytes0),
                Relaxed,
            );
        }
        metrics.decodes.fetch_add(1, Relaxed);
        metrics.busy_slots_sum.fetch_add(busy as u64, Relaxed);
        if n_prompt > 0 {
            metrics.prompt_us.fetch_add(us, Relaxed);
        } else {
            metrics.predicted_us.fetch_add(us, Relaxed);
        }
        metrics.prompt_tokens.fetch_add(n_prompt as u64, Relaxed);
        if let Err(e) = r {
            // the batch's cells were freed: every slot in it starts over
            let msg = format!("decode failed: {e}");
            for s in &mut slots {
                let in_batch = batch.seq_id.contains(&s.seq);
                if in_batch {
                    ctx.seq_rm(s.seq, 0, -1);
                    s.cache.clear();
                    if let Some(a) = s.active.take() {
                        let _ = a.job.events.send(Event::Error(msg.clone()));
                        metrics.requests_failed.fetch_add(1, Relaxed);
                    }
                }
            }
            metrics
                .kv_used
                .store(ctx.kv_cache().used_cells() as u64, Relaxed);
            continue;
        }
        // further choices whose prompt was just decoded: share its cells,
        // sample from its last row
        let mut joined = Vec::new();
        for &(si, j) in &rows {
            for (fi, f) in slots.iter().enumerate() {
                if f.active.as_ref().and_then(|a| a.follow) == Some(si) {
                    joined.push((fi, si, j));
                }
            }
        }
        for &(fi, si, j) in &joined {
            ctx.seq_cp(slots[si].seq, slots[fi].seq, 0, -1);
            slots[fi].cache = slots[si].cache.clone();
            if let Some(a) = slots[fi].active.as_mut() {
                a.follow = None;
            }
            rows.push((fi, j));
        }
        // sample each output row
        for &(si, j) in &rows {
            let s = &mut slots[si];
            let guesses = s
                .active
                .as_mut()
                .map(|a| std::mem::take(&mut a.guesses))
                .unwrap_or_default();
            // the guesses' cells stay until checked; the slot's tokens are
            // those taken
            s.cache.truncate(s.cache.len() - guesses.len());
            let mut guessed = guesses.iter();
            let mut next = guessed.next();
            let mut tok = take_row(
                &mut ctx,
                s,
                si,
                j,
                next.map(|g| g.0),
                &model,
                &metrics,
                cfg.n_slot_ctx,
            );
            // each guess the sampled token agrees with is the slot's next
            // token, already decoded: its row gives the token after it
            while let Some(&(g, jg)) = next {
                let Some(a) = s
                    .active
                    .as_mut()
                    .filter(|a| tok == Some(g) && a.pending == Some(g))
                else {
                    break;
                };
                a.pending = None;
                s.cache.push(g);
                next = guessed.next();
                tok = take_row(
                    &mut ctx,
                    s,
                    si,
                    jg,
                    next.map(|g| g.0),
                    &model,
                    &metrics,
                    cfg.n_slot_ctx,
                );
            }
            if !guesses.is_empty() {
                // the guesses not taken leave the cache
                ctx.seq_rm(s.seq, s.cache.len() as i32, -1);
            }
        }
        metrics
            .kv_used
            .store(ctx.kv_cache().used_cells() as u64, Relaxed);
        metrics.update_from_context(&ctx);
    }
}

/// Add to `batch` the tokens slot `s`'s draft source guesses follow its
/// pending token (the last of its cache, just added): at most the
/// request's `speculative.n_max`, the tokens it still wants after the
/// next one, the cells left in its context and `room` in the batch; none
/// when fewer than `speculative.n_min` can be drafted or are guessed.
/// Returns how many were added.
fn draft_into(
    s: &mut Slot,
    batch: &mut Batch,
    room: usize,
    n_slot_ctx: usize,
    n_vocab: usize,
) -> usize {
    let (Some(src), Some(a)) = (s.draft.as_mut(), s.active.as_mut()) else {
        return 0;
    };
    let Some((&last, history)) = s.cache.split_last() else {
        return 0;
    };
    let p = &a.job.params;
    let n_max = p
        .spec_n_max
        .min(a.job.max_tokens.saturating_sub(a.n_gen + 1))
        .min(n_slot_ctx.saturating_sub(s.cache.len() + 1))
        .min(room);
    if n_max == 0 || n_max < p.spec_n_min {
        return 0;
    }
    let mut d = match src.propose(history, last, n_max) {
        Ok(d) => d,
        Err(e) => {
            // the draft failed: this token goes without guesses
            eprintln!("llama-server: speculative: the draft failed: {e}");
            return 0;
        }
    };
    d.truncate(n_max);
    // a draft vocabulary may be larger than the target's (by up to 128)
    if let Some(k) = d.iter().position(|&t| t < 0 || t as usize >= n_vocab) {
        d.truncate(k);
    }
    if d.len() < p.spec_n_min.max(1) {
        return 0;
    }
    for &g in &d {
        a.guesses.push((g, batch.len()));
        batch.add(g, s.cache.len() as i32, s.seq, true);
        s.cache.push(g);
    }
    a.draft_n += d.len();
    d.len()
}

/// Sample row `j` of the last batch for slot `si` (`s`) and take the
/// token: send it, or end the request (end of generation, stop string,
/// limit), or shift the context; a slot that goes on generating has the
/// token as its `pending` one. `guess` is the draft token the row's
/// token was guessed to be (the row then follows that guess in the
/// batch), counted accepted when the token is it. Returns the token
/// sampled (`None`: the row or the request was gone, or its constraint
/// failed).
#[allow(clippy::too_many_arguments)]
fn take_row(
    ctx: &mut Context,
    s: &mut Slot,
    si: usize,
    j: usize,
    guess: Option<i32>,
    model: &llama::Model,
    metrics: &Metrics,
    n_slot_ctx: usize,
) -> Option<i32> {
    let speculating = s.draft.is_some();
    let logits = ctx.batch_logits(j)?;
    let a = s.active.as_mut()?;
    // a constrained request samples among the tokens its grammar allows
    let masked;
    let logits = match a
        .job
        .params
        .constraint
        .as_mut()
        .map(|c| c.mask_logits(logits))
    {
        None => logits,
        Some(Ok(m)) => {
            masked = m;
            &masked[..]
        }
        Some(Err(e)) => {
            fail_slot(s, metrics, e);
            return None;
        }
    };
    let (tok, logprobs) = match a.job.params.logprobs {
        None => (a.sampler.sample(logits), None),
        Some(n) if a.job.params.post_sampling_probs => {
            let (t, dist) = a.sampler.sample_with_probs(logits);
            let mut l = post_sampling_logprobs(&dist, t, n);
            // as llama.cpp: n alternatives even when the chain
            // kept fewer (greedy), the dropped ones at probability 0
            // (log 0 written as the most negative f32: JSON has no -inf)
            if l.top.len() < n {
                for (alt, _) in token_logprobs(logits, t, n).top {
                    if l.top.len() < n && !l.top.iter().any(|x| x.0 == alt) {
                        l.top.push((alt, f32::MIN));
                    }
                }
            }
            (t, Some(l))
        }
        Some(n) => {
            let t = a.sampler.sample(logits);
            (t, Some(token_logprobs(logits, t, n)))
        }
    };
    a.sampler.accept(tok);
    if guess == Some(tok) {
        a.draft_n_accepted += 1;
        metrics.draft_accepted.fetch_add(1, Relaxed);
    }
    let mut grammar_done = false;
    if let Some(c) = a.job.params.constraint.as_mut() {
        if !model.tokenizer.is_eog(tok) {
            if let Err(e) = c.commit(tok) {
                fail_slot(s, metrics, e);
                return None;
            }
            grammar_done = c.is_finished();
        }
    }
    let now = Instant::now();
    let t_first = *a.t_first.get_or_insert(now);
    // (finish_reason, stop_type, stopping word, stopped at the context's end)
    let mut finish: Option<(&'static str, &'static str, String, bool)> = None;
    if a.job.max_tokens == 0 {
        finish = Some(("length", "limit", String::new(), false));
    } else if model.tokenizer.is_eog(tok) && !a.job.params.ignore_eos {
        finish = Some(("stop", "eos", String::new(), false));
    } else {
        a.n_gen += 1;
        metrics.predicted_tokens.fetch_add(1, Relaxed);
        a.bytes
            .extend_from_slice(&model.tokenizer.token_to_piece(tok, false));
        let valid = match std::str::from_utf8(&a.bytes) {
            Ok(t) => t,
            Err(e) => std::str::from_utf8(&a.bytes[..e.valid_up_to()]).unwrap_or(""),
        };
        let stops = &a.job.params.stop;
        let (end, stopped) = match find_stop(valid, stops) {
            Some(i) => (i, true),
            None => (safe_len(valid, stops), false),
        };
        let text = valid.get(a.sent..end.max(a.sent)).unwrap_or("").to_string();
        let word = if stopped {
            stops
                .iter()
                .filter(|w| !w.is_empty())
                .find(|w| valid[end..].starts_with(w.as_str()))
                .cloned()
                .unwrap_or_default()
        } else {
            String::new()
        };
        a.sent = end.max(a.sent);
        let timings = Timings {
            prompt_n: a.prompt_n,
            prompt_ms: ms(t_first - a.t_start),
            predicted_n: a.n_gen,
            predicted_ms: ms(now - t_first),
            expert_cache: None,
            draft: speculating.then_some((a.draft_n, a.draft_n_accepted)),
        };
        let _ = a.job.events.send(Event::Token {
            id: tok,
            text,
            logprobs,
            timings,
        });
        if stopped {
            finish = Some(("stop", "word", word, false));
        } else if grammar_done {
            // the grammar allows nothing but the end of generation
            finish = Some(("stop", "eos", String::new(), false));
        } else if a.n_gen >= a.job.max_tokens {
            finish = Some(("length", "limit", String::new(), false));
        } else if s.cache.len() + 1 >= n_slot_ctx {
            if a.job.ctx_shift {
                // keep n_keep tokens, drop half of the rest, and
                // decode what is kept (and the new token) again
                let n = s.cache.len();
                let n_keep = match a.job.params.n_keep {
                    k if k < 0 => a.job.prompt.len(),
                    k => k as usize,
                }
                .min(n.saturating_sub(2));
                let n_discard = (n - n_keep) / 2;
                let mut feed = s.cache[..n_keep].to_vec();
                feed.extend_from_slice(&s.cache[n_keep + n_discard..]);
                feed.push(tok);
                ctx.seq_rm(s.seq, 0, -1);
                s.cache.clear();
                a.feed = feed;
                a.prompt_pos = 0;
                a.shifted = true;
            } else {
                finish = Some(("length", "limit", String::new(), true));
            }
        } else {
            a.pending = Some(tok);
        }
    }
    if let Some((reason, stop_type, word, at_end)) = finish {
        if let Some(a) = s.active.take() {
            // release what was held back (a stop string's possible
            // start that never completed, a cut UTF-8 sequence)
            let valid = String::from_utf8_lossy(&a.bytes);
            let end = find_stop(&valid, &a.job.params.stop).unwrap_or(valid.len());
            if end > a.sent {
                let rest = valid.get(a.sent..end).unwrap_or("").to_string();
                let _ = a.job.events.send(Event::Text(rest));
            }
            let _ = a.job.events.send(Event::Done(Usage {
                finish_reason: reason,
                stop_type,
                stopping_word: word,
                truncated: a.job.prompt_truncated || a.shifted || at_end,
                id_slot: si,
                timings: Timings {
                    prompt_n: a.prompt_n,
                    prompt_ms: ms(t_first - a.t_start),
                    predicted_n: a.n_gen,
                    predicted_ms: ms(now - t_first),
                    expert_cache: match (a.cache0, cache_counts(ctx)) {
                        (Some((h0, m0)), Some((h, m))) => {
                            Some((h.saturating_sub(h0), m.saturating_sub(m0)))
                        }
                        _ => None,
                    },
                    draft: speculating.then_some((a.draft_n, a.draft_n_accepted)),
                },
                prompt_tokens: a.job.prompt.len(),
                cached_tokens: a.cached,
                completion_tokens: a.n_gen,
            }));
        }
    }
    Some(tok)
}

/// Give a job the idle slot with the longest cached common prefix (and
/// its further choices other idle slots); the job back when there are not
/// enough idle slots yet.
fn assign(
    ctx: &mut Context,
    slots: &mut [Slot],
    mut job: Job,
    metrics: &Metrics,
    seeds: &mut u64,
) -> Option<Job> {
    if job.events.is_closed() {
        // its client left while it waited
        metrics.requests_cancelled.fetch_add(1, Relaxed);
        return None;
    }
    let cache0 = cache_counts(ctx);
    let need = 1 + job.more_choices.len();
    if need > slots.len() {
        let msg = format!(
            "{need} choices need {need} slots; the server has {}",
            slots.len()
        );
        for e in std::iter::once(&job.events).chain(&job.more_choices) {
            let _ = e.send(Event::Error(msg.clone()));
        }
        metrics.requests_failed.fetch_add(1, Relaxed);
        return None;
    }
    if let Some(id) = job.params.id_slot {
        if id >= slots.len() {
            let msg = format!(
                "'id_slot' is {id}: the server has {} slots (0..{})",
                slots.len(),
                slots.len()
            );
            let _ = job.events.send(Event::Error(msg));
            metrics.requests_failed.fetch_add(1, Relaxed);
            return None;
        }
        if slots[id].active.is_some() {
            return Some(job);
        }
    }
    if slots.iter().filter(|s| s.active.is_none()).count() < need {
        return Some(job);
    }
    let best = match job.params.id_slot {
        Some(id) => id,
        None => slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.active.is_none())
            .max_by_key(|(i, s)| {
                (
                    common_prefix(&s.cache, &job.prompt),
                    usize::MAX - s.cache.len(),
                    usize::MAX - i,
                )
            })
            .map(|(i, _)| i)?,
    };
    let more = std::mem::take(&mut job.more_choices);
    let s = &mut slots[best];
    s.n_tasks += 1;
    // keep the common prefix; at least the last prompt token is decoded
    let keep = if job.params.cache_prompt {
        common_prefix(&s.cache, &job.prompt).min(job.prompt.len() - 1)
    } else {
        0
    };
    ctx.seq_rm(s.seq, keep as i32, -1);
    s.cache.truncate(keep);
    metrics.prompt_tokens_cached.fetch_add(keep as u64, Relaxed);
    let p = &job.params;
    let seed = p.seed.unwrap_or_else(|| {
        *seeds += 1;
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        t ^ seeds.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    });
    let sampler = |seed: u64| {
        Sampler::new(SamplerParams {
            temp: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            repeat_penalty: p.repeat_penalty,
            repeat_last_n: p.repeat_last_n,
            seed,
        })
    };
    let first = sampler(seed);
    // further choices: idle slots of their own, emptied; choice k draws
    // with seed + k
    let idle: Vec<usize> = (0..slots.len())
        .filter(|&i| i != best && slots[i].active.is_none())
        .collect();
    for (k, (events, fi)) in more.into_iter().zip(idle).enumerate() {
        ctx.seq_rm(slots[fi].seq, 0, -1);
        slots[fi].cache.clear();
        slots[fi].n_tasks += 1;
        slots[fi].active = Some(Active {
            job: Job {
                prompt: job.prompt.clone(),
                params: job.params.clone(),
                max_tokens: job.max_tokens,
                events,
                prompt_truncated: job.prompt_truncated,
                ctx_shift: job.ctx_shift,
                more_choices: Vec::new(),
            },
            feed: job.prompt.clone(),
            prompt_pos: job.prompt.len(),
            t_start: Instant::now(),
            t_first: None,
            cache0,
            prompt_n: 0,
            shifted: false,
            cached: 0,
            sampler: sampler(seed.wrapping_add(k as u64 + 1)),
            pending: None,
            n_gen: 0,
            bytes: Vec::new(),
            sent: 0,
            follow: Some(best),
            guesses: Vec::new(),
            draft_n: 0,
            draft_n_accepted: 0,
        });
    }
    slots[best].active = Some(Active {
        feed: job.prompt.clone(),
        prompt_pos: keep,
        t_start: Instant::now(),
        t_first: None,
        cache0,
        prompt_n: 0,
        shifted: false,
        job,
        cached: keep,
        sampler: first,
        pending: None,
        n_gen: 0,
        bytes: Vec::new(),
        sent: 0,
        follow: None,
        guesses: Vec::new(),
        draft_n: 0,
        draft_n_accepted: 0,
    });
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_log_softmax() {
        let l = [1.0f32, 3.0, 2.0, 3.0];
        let t = token_logprobs(&l, 2, 2);
        let z: f64 = l.iter().map(|&x| f64::from(x).exp()).sum();
        assert!((f64::from(t.logprob) - (2.0 - z.ln())).abs() < 1e-6);
        // best first, ties to the lower id
        assert_eq!(t.top.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 3]);
        assert!(token_logprobs(&l, 0, 0).top.is_empty());
        assert_eq!(token_logprobs(&l, 0, 10).top.len(), 4);
    }

    #[test]
    fn post_sampling_logprobs_list_only_kept_tokens() {
        let d = [(3, 0.5f32), (1, 0.3), (2, 0.2)];
        let t = post_sampling_logprobs(&d, 1, 5);
        assert!((t.logprob - 0.3f32.ln()).abs() < 1e-7);
        assert_eq!(t.top.iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 1, 2]);
        assert_eq!(post_sampling_logprobs(&d, 3, 1).top.len(), 1);
        // greedy: the chosen token, probability 1
        let g = post_sampling_logprobs(&[(7, 1.0)], 7, 3);
        assert_eq!((g.logprob, g.top), (0.0, vec![(7, 0.0)]));
    }
}
