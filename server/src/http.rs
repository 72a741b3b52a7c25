//! The generation endpoints: OpenAI's (`/v1/completions`,
//! `/v1/chat/completions`) and llama.cpp's native ones (`/completion`,
//! `/infill`, answered as [`crate::native`] writes them), `/tokenize`,
//! `/detokenize`, `/health`, `/models` and `/metrics`; a generation is
//! checked, queued for the decode thread, and its events turned into the
//! answer (JSON, or server-sent events). The request preamble (API key,
//! JSON body) is [`crate::extract`]'s; the router, [`crate::routes`]'.

use std::convert::Infallible;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::answer::{
    detokenize_special, logprobs_json, timings_json, Answer, Collected, Kind, SYSTEM_FINGERPRINT,
};
use crate::constraint;
use crate::engine::{Event, Job, Task, Timings, TokenLogprobs, Usage};
use crate::error::ApiError;
use crate::extract::{fail, respond, ApiKey, JsonBody, Rejected};
use crate::json::type_name;
use crate::native;
use crate::prompt::{prompt_tokens, tokenize_prompt, too_long, truncate_prompt};
use crate::request::{parse_messages, parse_prompts, GenParams};
use crate::state::{AppState, Shared};
use crate::tools::{self, ToolFormat};

/// llama.cpp's model name of an OpenAI answer when neither the request
/// nor `--alias` names one (`DEFAULT_OAICOMPAT_MODEL`).
pub const DEFAULT_OAICOMPAT_MODEL: &str = "gpt-3.5-turbo";

/// Add these routes.
pub fn routes(r: Router<Shared>) -> Router<Shared> {
    r.route("/completion", post(native_completion))
        .route("/infill", post(infill))
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/completions", post(completions))
        // llama.cpp: `/completions` is its native endpoint, `/v1/completions` OpenAI's
        .route("/completions", post(native_completion))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/metrics", get(metrics))
        .route("/", get(webui))
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn webui(State(st): State<Shared>) -> Response {
    if st.webui {
        crate::webui::page()
    } else {
        ApiError::not_found().into_response()
    }
}

async fn health() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

async fn models(State(st): State<Shared>) -> Response {
    let hp = &st.model.hparams;
    Json(json!({
        "object": "list",
        "data": [{
            "id": st.model_id,
            "object": "model",
            "created": st.created,
            "owned_by": "llamacpp",
            "meta": {
                "n_vocab": hp.n_vocab,
                "n_ctx_train": hp.n_ctx_train,
                "n_embd": hp.n_embd,
                "n_ctx_slot": st.n_slot_ctx,
            }
        }]
    }))
    .into_response()
}

/// `/metrics` (a wrong key: 401, not counted as a failed request).
async fn metrics(State(st): State<Shared>, key: Result<ApiKey, Rejected>) -> Response {
    if let Err(r) = key {
        return ApiError::from(r).into_response();
    }
    (
        [("content-type", "text/plain; version=0.0.4")],
        st.metrics.render(),
    )
        .into_response()
}

async fn tokenize(State(st): State<Shared>, _: ApiKey, JsonBody(m): JsonBody) -> Response {
    respond(&st, tokenized(&st, &m))
}

/// `/tokenize`'s answer: the tokens of `content`, with their text under
/// `with_pieces`.
fn tokenized(st: &AppState, m: &Map<String, Value>) -> Result<Json<Value>, ApiError> {
    let content = match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "'content' must be a string, not {}",
                type_name(v)
            )))
        }
        None => return Err(ApiError::bad_request("'content' is required")),
    };
    let add_special = m
        .get("add_special")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let with_pieces = m
        .get("with_pieces")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let toks = st
        .model
        .tokenizer
        .tokenize(&content, add_special, true)
        .map_err(|e| ApiError::bad_request(format!("cannot tokenize: {e}")))?;
    if !with_pieces {
        return Ok(Json(json!({ "tokens": toks })));
    }
    // each token with its text: a string when it is valid UTF-8, else its bytes
    let pieces: Vec<Value> = toks
        .iter()
        .map(|&t| {
            let b = st.model.tokenizer.token_to_piece(t, true);
            let piece = match String::from_utf8(b) {
                Ok(s) => json!(s),
                Err(e) => json!(e.into_bytes()),
            };
            json!({"id": t, "piece": piece})
        })
        .collect();
    Ok(Json(json!({ "tokens": pieces })))
}

async fn detokenize(State(st): State<Shared>, _: ApiKey, JsonBody(m): JsonBody) -> Response {
    respond(&st, detokenized(&st, &m))
}

/// `/detokenize`'s answer: the text of `tokens`.
fn detokenized(st: &AppState, m: &Map<String, Value>) -> Result<Json<Value>, ApiError> {
    let toks = token_list(m.get("tokens"), "tokens")?;
    let text = st
        .model
        .tokenizer
        .detokenize_lossy(&toks, false, false)
        .map_err(|e| ApiError::bad_request(format!("cannot detokenize: {e}")))?;
    Ok(Json(json!({ "content": text })))
}

fn token_list(v: Option<&Value>, key: &str) -> Result<Vec<i32>, ApiError> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| {
                t.as_i64()
                    .and_then(|x| i32::try_from(x).ok())
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("'{key}' must hold token ids, found {t}"))
                    })
            })
            .collect(),
        Some(v) => Err(ApiError::bad_request(format!(
            "'{key}' must be an array of token ids, not {}",
            type_name(v)
        ))),
        None => Err(ApiError::bad_request(format!("'{key}' is required"))),
    }
}

/// The model name of an OpenAI answer: the request's, else `--alias`,
/// else llama.cpp's default.
fn answer_model(st: &AppState, p: &GenParams) -> String {
    match &p.model {
        Some(m) if !m.is_empty() => m.clone(),
        _ if st.has_alias => st.model_id.clone(),
        _ => DEFAULT_OAICOMPAT_MODEL.to_string(),
    }
}

fn request_id(st: &AppState, kind: Kind) -> String {
    format!(
        "{}-{:x}",
        if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        },
        st.metrics.requests_total.load(Relaxed) + 1
    )
}

async fn completions(State(st): State<Shared>, _: ApiKey, JsonBody(m): JsonBody) -> Response {
    prompt_generation(st, &m, Kind::Completion).await
}

async fn native_completion(State(st): State<Shared>, _: ApiKey, JsonBody(m): JsonBody) -> Response {
    prompt_generation(st, &m, Kind::Native).await
}

/// The prompts' tokens and the parameters of a `/v1/completions` or
/// `/completion` request.
fn prompt_request(
    st: &AppState,
    m: &Map<String, Value>,
) -> Result<(Vec<Vec<i32>>, GenParams), ApiError> {
    let mut params = st.params(m)?;
    params.constraint = constraint::from_request(&st.grammars, m)?;
    let prompts = parse_prompts(m, "prompt")?
        .iter()
        .map(|p| prompt_tokens(st, p))
        .collect::<Result<Vec<_>, _>>()?;
    if prompts.len() > 1 && params.stream {
        return Err(ApiError::bad_request(
            "several prompts are not streamed; send one request per prompt to stream",
        ));
    }
    Ok((prompts, params))
}

/// `/v1/completions` (OpenAI) and `/completion` (llama.cpp): one or
/// several prompts.
async fn prompt_generation(st: Shared, m: &Map<String, Value>, kind: Kind) -> Response {
    let (prompts, params) = match prompt_request(&st, m) {
        Ok(x) => x,
        Err(e) => return fail(&st, e),
    };
    let model = match kind {
        Kind::Native => st.model_id.clone(),
        _ => answer_model(&st, &params),
    };
    if prompts.len() == 1 {
        let prompt = prompts.into_iter().next().unwrap_or_default();
        return generate(st, kind, model, prompt, params, None).await;
    }
    // several prompts: each its own request, answered together
    let mut subs = Vec::new();
    for prompt in prompts {
        match submit(&st, kind, model.clone(), prompt, &params, None) {
            Ok(s) => subs.push(s),
            Err(e) => return fail(&st, e),
        }
    }
    let mut results = Vec::new();
    for (a, mut rxs) in subs {
        match collect_choice(&st, &mut rxs[0]).await {
            Ok(c) => results.push((a, c)),
            Err(e) => return fail(&st, e),
        }
    }
    match kind {
        Kind::Native => Json(Value::Array(
            results
                .iter()
                .enumerate()
                .map(|(i, (a, c))| native::final_json(&st, a, c, i))
                .collect(),
        ))
        .into_response(),
        _ => {
            let Some((a0, _)) = results.first() else {
                return fail(&st, ApiError::bad_request("'prompt' holds no prompt"));
            };
            let a0 = a0.clone();
            let mut usage: Option<Usage> = None;
            let choices: Vec<Value> = results
                .iter()
                .enumerate()
                .map(|(i, (a, c))| {
                    match usage.as_mut() {
                        Some(t) => {
                            t.completion_tokens += c.usage.completion_tokens;
                            t.prompt_tokens += c.usage.prompt_tokens;
                        }
                        None => usage = Some(c.usage.clone()),
                    }
                    choice_json(&st, a, c, i)
                })
                .collect();
            oai_response(&st, &a0, choices, usage.as_ref())
        }
    }
}

/// `/infill` (llama.cpp's): fill in the middle. `input_prefix`,
/// `input_suffix`, `prompt` (the start of the middle) and `input_extra`
/// (`[{"filename", "text"}]`, context files) become
/// `[extra] FIM_PRE prefix FIM_SUF suffix FIM_MID prompt`, answered as
/// `/completion`. A model without fill-in-the-middle tokens gets a 501.
async fn infill(State(st): State<Shared>, _: ApiKey, JsonBody(m): JsonBody) -> Response {
    match infill_request(&st, &m) {
        Ok((toks, params)) => {
            let model = st.model_id.clone();
            generate(st, Kind::Native, model, toks, params, None).await
        }
        Err(e) => fail(&st, e),
    }
}

/// The prompt's tokens and the parameters of an `/infill` request.
fn infill_request(
    st: &AppState,
    m: &Map<String, Value>,
) -> Result<(Vec<i32>, GenParams), ApiError> {
    let text = |key: &str| -> Result<String, ApiError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(ApiError::bad_request(format!(
                "'{key}' must be a string, not {}",
                type_name(v)
            ))),
        }
    };
    let (prefix, suffix, prompt) = (
        text("input_prefix")?,
        text("input_suffix")?,
        text("prompt")?,
    );
    let mut extra = Vec::new();
    match m.get("input_extra") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for (i, c) in a.iter().enumerate() {
                let t = c.get("text").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::bad_request(format!("'input_extra[{i}]' needs a string 'text'"))
                })?;
                let f = match c.get("filename") {
                    None | Some(Value::Null) => "",
                    Some(Value::String(s)) => s.as_str(),
                    Some(_) => {
                        return Err(ApiError::bad_request(format!(
                            "'input_extra[{i}].filename' must be a string"
                        )))
                    }
                };
                extra.push((f.to_string(), t.to_string()));
            }
        }
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "'input_extra' must be an array of {{\"filename\", \"text\"}}, not {}",
                type_name(v)
            )))
        }
    }
    let sp = st.model.tokenizer.special_tokens();
    let (Some(pre), Some(suf), Some(mid)) = (sp.fim_pre, sp.fim_suf, sp.fim_mid) else {
        return Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "infill is not supported by this model: it has no fill-in-the-middle tokens (tokenizer.ggml.fim_pre / fim_suf / fim_mid_token_id)",
                "not_supported_error",
            ));
    };
    let mut params = st.params(m)?;
    params.constraint = constraint::from_request(&st.grammars, m)?;
    let mut toks = Vec::new();
    if let Some(b) = st.model.tokenizer.bos() {
        toks.push(b);
    }
    for (f, t) in &extra {
        match (sp.fim_rep, sp.fim_sep) {
            (Some(rep), Some(sep)) => {
                toks.push(rep);
                toks.extend(tokenize_prompt(st, f, false)?);
                toks.push(sep);
            }
            _ => toks.extend(tokenize_prompt(st, &format!("{f}\n"), false)?),
        }
        toks.extend(tokenize_prompt(st, t, false)?);
    }
    toks.push(pre);
    toks.extend(tokenize_prompt(st, &prefix, false)?);
    toks.push(suf);
    toks.extend(tokenize_prompt(st, &suffix, false)?);
    toks.push(mid);
    toks.extend(tokenize_prompt(st, &prompt, false)?);
    Ok((toks, params))
}

async fn chat_completions(State(st): State<Shared>, _: ApiKey, JsonBody(m): JsonBody) -> Response {
    match chat_request(&st, &m) {
        Ok((prompt, params, format)) => {
            let model = answer_model(&st, &params);
            generate(st, Kind::Chat, model, prompt, params, format).await
        }
        Err(e) => fail(&st, e),
    }
}

/// The prompt's tokens, the parameters and the tool call format of a
/// `/v1/chat/completions` request.
fn chat_request(
    st: &AppState,
    m: &Map<String, Value>,
) -> Result<(Vec<i32>, GenParams, Option<ToolFormat>), ApiError> {
    let mut params = st.params(m)?;
    params.constraint = constraint::from_request(&st.grammars, m)?;
    let mut msgs = parse_messages(m)?;
    let tools = tools::parse_tools(m)?;
    if tools.is_some() && params.stream {
        return Err(ApiError::bad_request(
            "tool calls are not streamed: send 'stream': false with 'tools'",
        ));
    }
    let use_tools = tools
        .as_ref()
        .filter(|t| t.choice != tools::ToolChoice::None);
    let generic =
        use_tools.is_some() && ToolFormat::detect(&st.chat_template) == ToolFormat::Generic;
    if let (true, Some(t)) = (generic, use_tools) {
        // a template without a tool format: the tools and llama.cpp's
        // generic JSON answer format described in a system message
        tools::describe_generic(&mut msgs, t);
    }
    let text = (st.chat_render)(&msgs, use_tools.map(|t| &t.tools), true)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let prompt = tokenize_prompt(st, &text, true)?;
    // the format the answer is parsed in; `tool_choice: required` (or a
    // named function) is enforced by constraining the output to
    // `tools::required_call(format, tools)`, unless the request gave its
    // own grammar or schema
    let format = use_tools.map(|_| ToolFormat::detect(&st.chat_template));
    if let (Some(f), Some(t), None) = (format, use_tools, &params.constraint) {
        if let Some(call) = tools::required_call(f, t) {
            let spec = match call {
                tools::RequiredCall::JsonSchema(s) => constraint::ConstraintSpec::JsonSchema(s),
                tools::RequiredCall::Lark(g) => constraint::ConstraintSpec::Lark(g),
            };
            params.constraint = Some(st.grammars.compile(&spec)?);
        }
    }
    Ok((prompt, params, format))
}

/// Check a prompt, queue its job; the answer's description and the event
/// channels of its choices.
fn submit(
    st: &AppState,
    kind: Kind,
    model: String,
    mut prompt: Vec<i32>,
    params: &GenParams,
    tools: Option<ToolFormat>,
) -> Result<(Answer, Vec<mpsc::UnboundedReceiver<Event>>), ApiError> {
    if prompt.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    let n_vocab = st.model.hparams.n_vocab;
    if let Some(bad) = prompt.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
        return Err(ApiError::bad_request(format!(
            "prompt token id {bad} is out of range (vocabulary of {n_vocab})"
        )));
    }
    let mut truncated = false;
    if prompt.len() >= st.n_slot_ctx {
        if !st.ctx_shift {
            let mut e = ApiError::bad_request(format!(
                "the request exceeds the available context size, try increasing it (the prompt is {} tokens, a slot's context {} tokens; -c / -np)",
                prompt.len(),
                st.n_slot_ctx
            ));
            e.kind = "exceed_context_size_error";
            return Err(e);
        }
        if st.n_slot_ctx < 8 {
            return Err(too_long(prompt.len().to_string(), st.n_slot_ctx));
        }
        prompt = truncate_prompt(&prompt, st.n_slot_ctx, params.n_keep);
        truncated = true;
    }
    if let Some(id) = params.id_slot.filter(|&i| i >= st.n_slots) {
        return Err(ApiError::bad_request(format!(
            "'id_slot' is {id}: the server has {} slots (0..{})",
            st.n_slots,
            st.n_slots - 1
        )));
    }
    if params.n > st.n_slots {
        return Err(ApiError::bad_request(format!(
            "'n' is {}: more choices than the server's {} slots (-np)",
            params.n, st.n_slots
        )));
    }
    let limit = st.n_predict(params);
    let (tx, rx) = mpsc::unbounded_channel();
    let (more_tx, more_rx): (Vec<_>, Vec<_>) =
        (1..params.n).map(|_| mpsc::unbounded_channel()).unzip();
    let job = Job {
        prompt: prompt.clone(),
        params: params.clone(),
        max_tokens: limit.unwrap_or(usize::MAX),
        events: tx,
        prompt_truncated: truncated,
        // with a limit, a full context shifts; without one, it ends the generation
        ctx_shift: st.ctx_shift && limit.is_some(),
        more_choices: more_tx,
    };
    let id = request_id(st, kind);
    if let Err(e) = st.jobs.try_send(Task::Generate(Box::new(job))) {
        return Err(match e {
            mpsc::error::TrySendError::Full(_) => {
                ApiError::unavailable("every slot is busy and the queue is full; retry later")
            }
            mpsc::error::TrySendError::Closed(_) => {
                ApiError::internal("the decode thread has stopped")
            }
        });
    }
    st.metrics.requests_total.fetch_add(1, Relaxed);
    let mut rxs = vec![rx];
    rxs.extend(more_rx);
    let answer = Answer {
        kind,
        id,
        model,
        prompt,
        n_predict: limit.map_or(-1, |n| n as i64),
        params: params.clone(),
        tools,
    };
    Ok((answer, rxs))
}

async fn generate(
    st: Shared,
    kind: Kind,
    model: String,
    prompt: Vec<i32>,
    params: GenParams,
    tools: Option<ToolFormat>,
) -> Response {
    let (a, mut rxs) = match submit(&st, kind, model, prompt, &params, tools) {
        Ok(x) => x,
        Err(e) => return fail(&st, e),
    };
    if params.stream {
        let rx = rxs.remove(0);
        return stream_response(st, a, rx).into_response();
    }
    let mut choices = Vec::with_capacity(rxs.len());
    let mut usage: Option<Usage> = None;
    let mut first: Option<Collected> = None;
    for (i, rx) in rxs.iter_mut().enumerate() {
        match collect_choice(&st, rx).await {
            Ok(c) => {
                choices.push(choice_json(&st, &a, &c, i));
                match usage.as_mut() {
                    Some(t) => t.completion_tokens += c.usage.completion_tokens,
                    None => usage = Some(c.usage.clone()),
                }
                if first.is_none() {
                    first = Some(c);
                }
            }
            Err(e) => return fail(&st, e),
        }
    }
    if kind == Kind::Native {
        return match first {
            Some(c) => Json(native::final_json(&st, &a, &c, 0)).into_response(),
            None => fail(&st, ApiError::internal("no choice was generated")),
        };
    }
    oai_response(&st, &a, choices, usage.as_ref())
}

/// An OpenAI answer of choices.
fn oai_response(st: &AppState, a: &Answer, choices: Vec<Value>, usage: Option<&Usage>) -> Response {
    let Some(u) = usage else {
        return fail(st, ApiError::internal("no choice was generated"));
    };
    let mut v = json!({
        "id": a.id,
        "object": if a.kind == Kind::Chat { "chat.completion" } else { "text_completion" },
        "created": now_s(),
        "model": a.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": choices,
        "usage": usage_json(u),
        "timings": timings_json(&u.timings),
    });
    if st.verbose {
        v["__verbose"] = json!({"prompt": detokenize_special(st, &a.prompt)});
    }
    Json(v).into_response()
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

/// Wait for one choice's events to the end.
async fn collect_choice(
    st: &AppState,
    rx: &mut mpsc::UnboundedReceiver<Event>,
) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut tokens = Vec::new();
    let mut lps: Vec<(i32, TokenLogprobs, usize)> = Vec::new();
    // byte offset of the next token's text: the pieces before it
    let mut offset = 0usize;
    loop {
        let ev = match tokio::time::timeout(st.timeout, rx.recv()).await {
            Ok(Some(ev)) => ev,
            Ok(None) => return Err(ApiError::internal("the decode thread dropped the request")),
            Err(_) => {
                return Err(ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "no token within --timeout",
                    "timeout_error",
                ))
            }
        };
        match ev {
            Event::Token {
                id,
                text: t,
                logprobs,
                ..
            } => {
                tokens.push(id);
                if let Some(l) = logprobs {
                    lps.push((id, l, offset));
                }
                offset += st.model.tokenizer.token_to_piece(id, false).len();
                text.push_str(&t);
            }
            Event::Text(t) => text.push_str(&t),
            Event::Error(e) => return Err(ApiError::internal(e)),
            Event::Done(u) => {
                // offsets past a cut stop string stay within the text
                for l in &mut lps {
                    l.2 = l.2.min(text.len());
                }
                return Ok(Collected {
                    text,
                    tokens,
                    lps,
                    usage: u,
                });
            }
        }
    }
}

/// The OpenAI JSON of one choice.
fn choice_json(st: &AppState, a: &Answer, c: &Collected, index: usize) -> Value {
    let p = &a.params;
    let u = &c.usage;
    let mut choice = match a.kind {
        Kind::Completion | Kind::Native => {
            json!({"index": index, "text": c.text, "logprobs": null, "finish_reason": u.finish_reason})
        }
        Kind::Chat => {
            let mut msg = json!({"role": "assistant", "content": c.text});
            let mut finish = u.finish_reason;
            if let Some(f) = a.tools {
                let parsed = tools::parse_output(f, &c.text);
                if !parsed.calls.is_empty() {
                    msg["tool_calls"] = tools::tool_calls_json(&parsed.calls, &a.id);
                    finish = "tool_calls";
                }
                msg["content"] = if parsed.content.trim().is_empty() && !parsed.calls.is_empty() {
                    Value::Null
                } else {
                    json!(parsed.content)
                };
                if let Some(r) = parsed.reasoning {
                    msg["reasoning_content"] = json!(r);
                }
            }
            json!({"index": index, "message": msg, "finish_reason": finish})
        }
    };
    if p.return_tokens {
        choice["tokens"] = json!(c.tokens);
    }
    if p.logprobs.is_some() {
        choice["logprobs"] = logprobs_json(st, a.kind, p.post_sampling_probs, &c.lps);
    }
    choice
}

struct StreamState {
    st: Shared,
    a: Answer,
    rx: mpsc::UnboundedReceiver<Event>,
    started: bool,
    send_done: bool,
    done: bool,
    /// Byte offset of the next token's text (`text_offset`).
    offset: usize,
    /// Native: text released at the end, sent with the last chunk.
    held: String,
    /// The timings so far.
    timings: Timings,
}

impl StreamState {
    fn chunk(
        &self,
        text: Option<&str>,
        tokens: &[i32],
        lp: Option<&TokenLogprobs>,
        finish: Option<&str>,
        usage: Option<&Usage>,
    ) -> SseEvent {
        let p = &self.a.params;
        let mut choice = match self.a.kind {
            Kind::Completion | Kind::Native => {
                json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
            }
            Kind::Chat => {
                let delta = match (self.started, text) {
                    (false, t) => json!({"role": "assistant", "content": t.unwrap_or("")}),
                    (true, Some(t)) => json!({"content": t}),
                    (true, None) => json!({}),
                };
                json!({"index": 0, "delta": delta, "finish_reason": finish})
            }
        };
        if p.return_tokens {
            choice["tokens"] = json!(tokens);
        }
        if let (Some(l), [id]) = (lp, tokens) {
            choice["logprobs"] = logprobs_json(
                &self.st,
                self.a.kind,
                p.post_sampling_probs,
                &[(*id, l.clone(), self.offset)],
            );
        }
        let mut v = json!({
            "id": self.a.id,
            "object": if self.a.kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" },
            "created": now_s(),
            "model": self.a.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [choice],
        });
        if let Some(u) = usage {
            v["usage"] = usage_json(u);
            v["timings"] = timings_json(&u.timings);
        } else if p.timings_per_token {
            v["timings"] = timings_json(&self.timings);
        }
        SseEvent::default().data(v.to_string())
    }
}

fn stream_response(st: Shared, a: Answer, rx: mpsc::UnboundedReceiver<Event>) -> impl IntoResponse {
    let s0 = StreamState {
        st,
        a,
        rx,
        started: false,
        send_done: false,
        done: false,
        offset: 0,
        held: String::new(),
        timings: Timings::default(),
    };
    let stream = futures_util::stream::unfold(s0, |mut s| async move {
        if s.done {
            return None;
        }
        if s.send_done {
            s.done = true;
            return Some((Ok::<_, Infallible>(SseEvent::default().data("[DONE]")), s));
        }
        let native = s.a.kind == Kind::Native;
        loop {
            let ev = match tokio::time::timeout(s.st.timeout, s.rx.recv()).await {
                Ok(Some(ev)) => ev,
                Ok(None) => Event::Error("the decode thread dropped the request".into()),
                Err(_) => Event::Error("no token within --timeout".into()),
            };
            let out = match ev {
                Event::Token {
                    id,
                    text,
                    logprobs,
                    timings,
                } => {
                    s.timings = timings;
                    let c = if native {
                        native::stream_chunk(&s.st, &s.a, &text, id, logprobs.as_ref(), &timings)
                    } else {
                        if text.is_empty()
                            && !s.a.params.return_tokens
                            && logprobs.is_none()
                            && s.started
                        {
                            continue;
                        }
                        s.chunk(Some(&text), &[id], logprobs.as_ref(), None, None)
                    };
                    s.offset += s.st.model.tokenizer.token_to_piece(id, false).len();
                    s.started = true;
                    c
                }
                Event::Text(t) if native => {
                    s.held.push_str(&t);
                    continue;
                }
                Event::Text(t) => {
                    let c = s.chunk(Some(&t), &[], None, None, None);
                    s.started = true;
                    c
                }
                Event::Done(u) => {
                    s.timings = u.timings;
                    if native {
                        // llama.cpp's native stream ends without [DONE]
                        s.done = true;
                        let c = Collected {
                            text: std::mem::take(&mut s.held),
                            tokens: Vec::new(),
                            lps: Vec::new(),
                            usage: u,
                        };
                        let mut v = native::final_json(&s.st, &s.a, &c, 0);
                        if let Some(o) = v.as_object_mut() {
                            o.remove("completion_probabilities");
                        }
                        SseEvent::default().data(v.to_string())
                    } else {
                        s.send_done = true;
                        s.chunk(None, &[], None, Some(u.finish_reason), Some(&u))
                    }
                }
                Event::Error(e) => {
                    s.done = true;
                    s.st.metrics.requests_failed.fetch_add(1, Relaxed);
                    SseEvent::default().data(ApiError::internal(e).body().to_string())
                }
            };
            return Some((Ok::<_, Infallible>(out), s));
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
