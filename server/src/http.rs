//! The HTTP side: routes, API key check, body limits, CORS, and turning
//! the decode thread's events into answers (JSON or server-sent events):
//! OpenAI's (`/v1/completions`, `/v1/chat/completions`) and llama.cpp's
//! native ones (`/completion`, [`crate::native`]). The server endpoints
//! (`/props`, `/slots`, `/apply-template`, ...) are in [`crate::endpoints`].

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use llama::Model;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::chat_fallback::ChatRender;
use crate::constraint::{self, Grammars};
use crate::engine::{Event, Job, SlotsView, Task, Timings, TokenLogprobs, Usage};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::native;
use crate::request::{
    parse_messages, parse_object, parse_params_with, parse_prompts, Defaults, GenParams, Piece,
};
use crate::tools::{self, ToolFormat};

/// llama.cpp's model name of an OpenAI answer when neither the request
/// nor `--alias` names one (`DEFAULT_OAICOMPAT_MODEL`).
pub const DEFAULT_OAICOMPAT_MODEL: &str = "gpt-3.5-turbo";

/// `system_fingerprint` of OpenAI answers: `b` (llama.cpp's build-number
/// prefix) and this build's version.
pub const SYSTEM_FINGERPRINT: &str = concat!("b", env!("CARGO_PKG_VERSION"), "-ggml-rs");

/// Largest request body accepted (bytes); past it, 413.
pub const BODY_LIMIT: usize = 4 << 20;

/// What every handler shares.
pub struct AppState {
    /// Queue of the decode thread.
    pub jobs: mpsc::Sender<Task>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The model (tokenizer, hparams).
    pub model: Arc<Model>,
    /// The model's name in the API.
    pub model_id: String,
    /// Other names a request may use for the model (the `-m` path).
    pub model_aliases: Vec<String>,
    /// `--api-key`.
    pub api_key: Option<String>,
    /// Cells of one slot.
    pub n_slot_ctx: usize,
    /// Slots (`-np`): the most choices (`n`) one request may ask for.
    pub n_slots: usize,
    /// `-n`: max_tokens of a request that sets none (`None`: up to the slot's context).
    pub default_max_tokens: Option<usize>,
    /// `--timeout`.
    pub timeout: Duration,
    /// Renders chat messages (the ChatML fallback until `llama::chat` is merged).
    pub chat_render: ChatRender,
    /// Bytes of the longest token's text (bounds the tokens of a prompt from below).
    pub max_token_bytes: usize,
    /// Unix time the server started (`created` of /v1/models).
    pub created: u64,
    /// `--alias` given: OpenAI answers name the model by it.
    pub has_alias: bool,
    /// The model file (`/props` `model_path`).
    pub model_path: String,
    /// The chat template's text (`/props`, tool call format).
    pub chat_template: String,
    /// Generation defaults (the sampling flags; `POST /props` may change them).
    pub defaults: RwLock<Defaults>,
    /// Context shift on (`--no-context-shift` turns it off).
    pub ctx_shift: bool,
    /// `--slots`: `/slots` served.
    pub slots_enabled: bool,
    /// `--slot-save-path`.
    pub slot_save_path: Option<PathBuf>,
    /// `--props`: `POST /props` allowed.
    pub props_enabled: bool,
    /// The web UI at `/` (off with `--no-webui`).
    pub webui: bool,
    /// `--verbose`.
    pub verbose: bool,
    /// `--embedding`.
    pub embedding: bool,
    /// `--pooling`.
    pub pooling: crate::args::Pooling,
    /// `--reranking`.
    pub reranking: bool,
    /// The slots' state (`/slots`).
    pub view: SlotsView,
    /// Compiles `grammar` / `json_schema` / `response_format` for the vocabulary.
    pub grammars: Arc<Grammars>,
}

impl AppState {
    /// The request's parameters with the server's defaults.
    pub fn params(&self, m: &Map<String, Value>) -> Result<GenParams, ApiError> {
        let d = self
            .defaults
            .read()
            .map_err(|_| ApiError::internal("the defaults lock is poisoned"))?;
        parse_params_with(m, &d)
    }

    /// `n_predict` of a request: its limit and the server's `-n`, the
    /// smaller; `None`: no limit but the context.
    pub fn n_predict(&self, p: &GenParams) -> Option<usize> {
        match (p.max_tokens, self.default_max_tokens) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

type Shared = Arc<AppState>;

/// The router of every endpoint.
pub fn router(state: Shared) -> Router {
    crate::endpoints::routes(Router::new())
        .route("/completion", post(native_completion))
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
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn(crate::cors::cors))
        .with_state(state)
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(crate) fn check_key(st: &AppState, h: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &st.api_key else {
        return Ok(());
    };
    let got = h
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()));
    if got == Some(key.as_str()) {
        Ok(())
    } else {
        Err(ApiError::unauthorized())
    }
}

pub(crate) fn body_of(
    st: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Map<String, Value>, ApiError> {
    let b = body.map_err(|e| {
        let status = e.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                status,
                format!("request body larger than {} bytes", BODY_LIMIT),
                "invalid_request_error",
            )
        } else {
            ApiError::new(
                status,
                format!("cannot read the request body: {e}"),
                "invalid_request_error",
            )
        }
    })?;
    let _ = st;
    parse_object(&b)
}

pub(crate) fn fail(st: &AppState, e: ApiError) -> Response {
    st.metrics.requests_failed.fetch_add(1, Relaxed);
    e.into_response()
}

async fn not_found() -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no such endpoint",
        "invalid_request_error",
    )
    .into_response()
}

async fn webui(State(st): State<Shared>) -> Response {
    if st.webui {
        crate::webui::page()
    } else {
        not_found().await
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

async fn metrics(State(st): State<Shared>, h: HeaderMap) -> Response {
    if let Err(e) = check_key(&st, &h) {
        return e.into_response();
    }
    (
        [("content-type", "text/plain; version=0.0.4")],
        st.metrics.render(),
    )
        .into_response()
}

pub(crate) async fn tokenize(
    State(st): State<Shared>,
    h: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = (|| {
        check_key(&st, &h)?;
        let m = body_of(&st, body)?;
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "'content' must be a string, not {}",
                    crate::request::type_name(v)
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
    })();
    r.map_or_else(|e| fail(&st, e), IntoResponse::into_response)
}

async fn detokenize(
    State(st): State<Shared>,
    h: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = (|| {
        check_key(&st, &h)?;
        let m = body_of(&st, body)?;
        let toks = token_list(m.get("tokens"), "tokens")?;
        let text = st
            .model
            .tokenizer
            .detokenize_lossy(&toks, false, false)
            .map_err(|e| ApiError::bad_request(format!("cannot detokenize: {e}")))?;
        Ok(Json(json!({ "content": text })))
    })();
    r.map_or_else(|e| fail(&st, e), IntoResponse::into_response)
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
            crate::request::type_name(v)
        ))),
        None => Err(ApiError::bad_request(format!("'{key}' is required"))),
    }
}

/// Which endpoint a generation answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Completion,
    Chat,
    /// llama.cpp's `/completion`.
    Native,
}

/// What an answer carries besides the generated tokens.
#[derive(Clone)]
pub(crate) struct Answer {
    pub kind: Kind,
    pub id: String,
    /// The model name answered.
    pub model: String,
    /// The prompt's tokens (after truncation).
    pub prompt: Vec<i32>,
    /// `generation_settings.n_predict` (-1: none).
    pub n_predict: i64,
    /// The request's parameters.
    pub params: GenParams,
    /// The tool call format to parse the answer with (chat with tools).
    pub tools: Option<ToolFormat>,
}

/// The tokens of a prompt's pieces: text pieces tokenized (with BOS when
/// the text opens the prompt), token ids as given.
fn prompt_tokens(st: &AppState, pieces: &[Piece]) -> Result<Vec<i32>, ApiError> {
    let mut out = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Text(t) => out.extend(tokenize_prompt(st, t, i == 0)?),
            Piece::Token(t) => out.push(*t),
        }
    }
    Ok(out)
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

async fn completions(
    State(st): State<Shared>,
    h: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    prompt_generation(st, h, body, Kind::Completion).await
}

async fn native_completion(
    State(st): State<Shared>,
    h: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    prompt_generation(st, h, body, Kind::Native).await
}

/// `/v1/completions` (OpenAI) and `/completion` (llama.cpp): one or
/// several prompts.
async fn prompt_generation(
    st: Shared,
    h: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    kind: Kind,
) -> Response {
    let prep = (|| {
        check_key(&st, &h)?;
        let m = body_of(&st, body)?;
        let mut params = st.params(&m)?;
        params.constraint = constraint::from_request(&st.grammars, &m)?;
        let prompts = parse_prompts(&m, "prompt")?
            .iter()
            .map(|p| prompt_tokens(&st, p))
            .collect::<Result<Vec<_>, _>>()?;
        if prompts.len() > 1 && params.stream {
            return Err(ApiError::bad_request(
                "several prompts are not streamed; send one request per prompt to stream",
            ));
        }
        Ok((prompts, params))
    })();
    let (prompts, params) = match prep {
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
async fn infill(
    State(st): State<Shared>,
    h: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let prep = (|| {
        check_key(&st, &h)?;
        let m = body_of(&st, body)?;
        let text = |key: &str| -> Result<String, ApiError> {
            match m.get(key) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(v) => Err(ApiError::bad_request(format!(
                    "'{key}' must be a string, not {}",
                    crate::request::type_name(v)
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
                    crate::request::type_name(v)
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
        let mut params = st.params(&m)?;
        params.constraint = constraint::from_request(&st.grammars, &m)?;
        let mut toks = Vec::new();
        if let Some(b) = st.model.tokenizer.bos() {
            toks.push(b);
        }
        for (f, t) in &extra {
            match (sp.fim_rep, sp.fim_sep) {
                (Some(rep), Some(sep)) => {
                    toks.push(rep);
                    toks.extend(tokenize_prompt(&st, f, false)?);
                    toks.push(sep);
                }
                _ => toks.extend(tokenize_prompt(&st, &format!("{f}\n"), false)?),
            }
            toks.extend(tokenize_prompt(&st, t, false)?);
        }
        toks.push(pre);
        toks.extend(tokenize_prompt(&st, &prefix, false)?);
        toks.push(suf);
        toks.extend(tokenize_prompt(&st, &suffix, false)?);
        toks.push(mid);
        toks.extend(tokenize_prompt(&st, &prompt, false)?);
        Ok((toks, params))
    })();
    match prep {
        Ok((toks, params)) => {
            let model = st.model_id.clone();
            generate(st, Kind::Native, model, toks, params, None).await
        }
        Err(e) => fail(&st, e),
    }
}

async fn chat_completions(
    State(st): State<Shared>,
    h: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let prep = (|| {
        check_key(&st, &h)?;
        let m = body_of(&st, body)?;
        let mut params = st.params(&m)?;
        params.constraint = constraint::from_request(&st.grammars, &m)?;
        let mut msgs = parse_messages(&m)?;
        let tools = tools::parse_tools(&m)?;
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
        let prompt = tokenize_prompt(&st, &text, true)?;
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
    })();
    match prep {
        Ok((prompt, params, format)) => {
            let model = answer_model(&st, &params);
            generate(st, Kind::Chat, model, prompt, params, format).await
        }
        Err(e) => fail(&st, e),
    }
}

fn too_long(n: String, slot: usize) -> ApiError {
    let mut e = ApiError::bad_request(format!(
        "the prompt is {n} tokens, more than a slot's context of {slot} tokens (-c / -np)"
    ));
    e.kind = "exceed_context_size_error";
    e
}

pub(crate) fn tokenize_prompt(
    st: &AppState,
    text: &str,
    add_special: bool,
) -> Result<Vec<i32>, ApiError> {
    // a prompt of more bytes than a slot's worth of the longest tokens
    // cannot fit (even truncated, it would be mostly thrown away): refuse
    // it before tokenizing
    let cap = if st.ctx_shift { 64 } else { 1 };
    if text.len()
        > st.n_slot_ctx
            .saturating_mul(st.max_token_bytes.max(1))
            .saturating_mul(cap)
    {
        return Err(too_long(
            format!(
                "{} bytes, so at least {}",
                text.len(),
                text.len() / st.max_token_bytes.max(1)
            ),
            st.n_slot_ctx,
        ));
    }
    st.model
        .tokenizer
        .tokenize(text, add_special, true)
        .map_err(|e| ApiError::bad_request(format!("cannot tokenize the prompt: {e}")))
}

/// llama.cpp's prompt truncation: keep `n_keep` tokens and drop whole
/// blocks of half the rest of the context from after them until the
/// prompt fits.
pub fn truncate_prompt(prompt: &[i32], n_ctx: usize, n_keep: i64) -> Vec<i32> {
    let n_keep = if n_keep < 0 {
        prompt.len()
    } else {
        n_keep as usize
    }
    .min(n_ctx.saturating_sub(4));
    let n_left = n_ctx - n_keep;
    let n_block = (n_left / 2).max(1);
    let erased = (prompt.len() - n_keep - n_block) / n_block;
    let mut out = prompt[..n_keep].to_vec();
    out.extend_from_slice(&prompt[(n_keep + erased * n_block).min(prompt.len())..]);
    out
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

/// A prompt's text with its special tokens (`__verbose`, `prompt`).
pub(crate) fn detokenize_special(st: &AppState, toks: &[i32]) -> String {
    st.model
        .tokenizer
        .detokenize_lossy(toks, false, true)
        .unwrap_or_default()
}

/// llama.cpp's `timings` object.
pub(crate) fn timings_json(t: &Timings) -> Value {
    let per = |n: usize, ms: f64| if n == 0 { 0.0 } else { ms / n as f64 };
    let rate = |n: usize, ms: f64| if ms <= 0.0 { 0.0 } else { 1e3 * n as f64 / ms };
    let mut v = json!({
        "prompt_n": t.prompt_n,
        "prompt_ms": t.prompt_ms,
        "prompt_per_token_ms": per(t.prompt_n, t.prompt_ms),
        "prompt_per_second": rate(t.prompt_n, t.prompt_ms),
        "predicted_n": t.predicted_n,
        "predicted_ms": t.predicted_ms,
        "predicted_per_token_ms": per(t.predicted_n, t.predicted_ms),
        "predicted_per_second": rate(t.predicted_n, t.predicted_ms),
    });
    // the expert cache while the request ran (the web page shows its hit
    // rate); only in a finished request's timings
    if let Some((h, m)) = t.expert_cache {
        v["expert_cache"] = json!({
            "hits": h,
            "misses": m,
            "hit_rate": if h + m == 0 { 0.0 } else { h as f64 / (h + m) as f64 },
        });
    }
    v
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

/// One finished choice.
pub(crate) struct Collected {
    pub text: String,
    pub tokens: Vec<i32>,
    /// (id, log-probabilities, byte offset of its text)
    pub lps: Vec<(i32, TokenLogprobs, usize)>,
    pub usage: Usage,
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

pub(crate) fn piece(st: &AppState, id: i32) -> (String, Vec<u8>) {
    let b = st.model.tokenizer.token_to_piece(id, false);
    (String::from_utf8_lossy(&b).into_owned(), b)
}

/// OpenAI's `logprobs` object of the tokens `lps` (id, log-probabilities,
/// byte offset of the token's text in the completion):
/// - completions: OpenAI's `tokens` / `token_logprobs` / `top_logprobs`
///   (one `{text: logprob}` map per token) / `text_offset` arrays, and
///   llama.cpp's `content` list (`id`, `token`, `bytes`, `logprob`,
///   `top_logprobs`; with `post_sampling_probs`, llama.cpp's `prob` and
///   `top_probs` there, linear probabilities);
/// - chat: OpenAI's `content` list (`token`, `logprob`, `bytes`,
///   `top_logprobs`) and `refusal: null`.
pub(crate) fn logprobs_json(
    st: &AppState,
    kind: Kind,
    post: bool,
    lps: &[(i32, TokenLogprobs, usize)],
) -> Value {
    let entry = |id: i32, lp: f32, with_id: bool| {
        let (t, b) = piece(st, id);
        let mut e = json!({"token": t, "bytes": b});
        if with_id {
            e["id"] = json!(id);
        }
        if with_id && post {
            e["prob"] = json!(lp.exp());
        } else {
            e["logprob"] = json!(lp);
        }
        e
    };
    let content = |with_id: bool| -> Vec<Value> {
        lps.iter()
            .map(|(id, l, _)| {
                let mut e = entry(*id, l.logprob, with_id);
                let top: Vec<Value> = l.top.iter().map(|&(a, p)| entry(a, p, with_id)).collect();
                e[if with_id && post {
                    "top_probs"
                } else {
                    "top_logprobs"
                }] = json!(top);
                e
            })
            .collect()
    };
    match kind {
        Kind::Completion | Kind::Native => {
            let tops: Vec<Value> = lps
                .iter()
                .map(|(_, l, _)| {
                    let m: Map<String, Value> = l
                        .top
                        .iter()
                        .map(|&(t, p)| (piece(st, t).0, json!(p)))
                        .collect();
                    Value::Object(m)
                })
                .collect();
            json!({
                "tokens": lps.iter().map(|(id, _, _)| piece(st, *id).0).collect::<Vec<_>>(),
                "token_logprobs": lps.iter().map(|(_, l, _)| l.logprob).collect::<Vec<_>>(),
                "top_logprobs": tops,
                "text_offset": lps.iter().map(|(_, _, o)| *o).collect::<Vec<_>>(),
                "content": content(true),
            })
        }
        Kind::Chat => json!({ "content": content(false), "refusal": null }),
    }
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
