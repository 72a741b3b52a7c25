//! The HTTP side: routes, API key check, body limits, and turning the
//! decode thread's events into OpenAI responses (JSON or server-sent
//! events).

use std::convert::Infallible;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
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
use crate::engine::{Event, Job, TokenLogprobs, Usage};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::request::{parse_messages, parse_object, parse_params, parse_prompt, GenParams, Prompt};

/// Largest request body accepted (bytes); past it, 413.
pub const BODY_LIMIT: usize = 4 << 20;

/// What every handler shares.
pub struct AppState {
    /// Queue of the decode thread.
    pub jobs: mpsc::Sender<Job>,
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
    /// Compiles `grammar` / `json_schema` / `response_format` for the vocabulary.
    pub grammars: Arc<Grammars>,
    /// Serve the chat page at `/` (off with `--no-webui`).
    pub webui: bool,
}

type Shared = Arc<AppState>;

/// The router of every endpoint.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/metrics", get(metrics))
        .route("/", get(webui))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn check_key(st: &AppState, h: &HeaderMap) -> Result<(), ApiError> {
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

fn body_of(
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

fn fail(st: &AppState, e: ApiError) -> Response {
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

async fn tokenize(
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
        let toks = st
            .model
            .tokenizer
            .tokenize(&content, add_special, true)
            .map_err(|e| ApiError::bad_request(format!("cannot tokenize: {e}")))?;
        Ok(Json(json!({ "tokens": toks })))
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
enum Kind {
    Completion,
    Chat,
}

async fn completions(
    State(st): State<Shared>,
    h: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let prep = (|| {
        check_key(&st, &h)?;
        let m = body_of(&st, body)?;
        let mut params = parse_params(&m)?;
        check_model(&st, &params)?;
        params.constraint = constraint::from_request(&st.grammars, &m)?;
        let prompt = match parse_prompt(&m)? {
            Prompt::Text(t) => tokenize_prompt(&st, &t, true)?,
            Prompt::Tokens(t) => t,
        };
        Ok((prompt, params))
    })();
    match prep {
        Ok((prompt, params)) => generate(st, Kind::Completion, prompt, params).await,
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
        let mut params = parse_params(&m)?;
        check_model(&st, &params)?;
        params.constraint = constraint::from_request(&st.grammars, &m)?;
        let msgs = parse_messages(&m)?;
        let text =
            (st.chat_render)(&msgs, true).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let prompt = tokenize_prompt(&st, &text, true)?;
        Ok((prompt, params))
    })();
    match prep {
        Ok((prompt, params)) => generate(st, Kind::Chat, prompt, params).await,
        Err(e) => fail(&st, e),
    }
}

fn check_model(st: &AppState, p: &GenParams) -> Result<(), ApiError> {
    match &p.model {
        None => Ok(()),
        Some(m) if m.is_empty() || *m == st.model_id || st.model_aliases.contains(m) => Ok(()),
        Some(m) => {
            let mut e = ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "the model '{m}' does not exist (this server serves '{}')",
                    st.model_id
                ),
                "invalid_request_error",
            );
            e.code = Some("model_not_found");
            Err(e)
        }
    }
}

fn too_long(n: String, slot: usize) -> ApiError {
    let mut e = ApiError::bad_request(format!(
        "the prompt is {n} tokens, more than a slot's context of {slot} tokens (-c / -np)"
    ));
    e.kind = "exceed_context_size_error";
    e
}

fn tokenize_prompt(st: &AppState, text: &str, add_special: bool) -> Result<Vec<i32>, ApiError> {
    // a prompt of more bytes than a slot's worth of the longest tokens
    // cannot fit: refuse it before tokenizing
    if text.len() > st.n_slot_ctx.saturating_mul(st.max_token_bytes.max(1)) {
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

async fn generate(st: Shared, kind: Kind, prompt: Vec<i32>, params: GenParams) -> Response {
    if prompt.is_empty() {
        return fail(&st, ApiError::bad_request("the prompt is empty"));
    }
    if prompt.len() >= st.n_slot_ctx {
        return fail(&st, too_long(prompt.len().to_string(), st.n_slot_ctx));
    }
    let n_vocab = st.model.hparams.n_vocab;
    if let Some(bad) = prompt.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
        return fail(
            &st,
            ApiError::bad_request(format!(
                "prompt token id {bad} is out of range (vocabulary of {n_vocab})"
            )),
        );
    }
    let room = st.n_slot_ctx - prompt.len();
    let max_tokens = params
        .max_tokens
        .or(st.default_max_tokens)
        .unwrap_or(room)
        .min(room);
    if params.n > st.n_slots {
        return fail(
            &st,
            ApiError::bad_request(format!(
                "'n' is {}: more choices than the server's {} slots (-np)",
                params.n, st.n_slots
            )),
        );
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let (more_tx, more_rx): (Vec<_>, Vec<_>) =
        (1..params.n).map(|_| mpsc::unbounded_channel()).unzip();
    let stream = params.stream;
    let job = Job {
        prompt,
        params: params.clone(),
        max_tokens,
        events: tx,
        more_choices: more_tx,
    };
    if let Err(e) = st.jobs.try_send(job) {
        let e = match e {
            mpsc::error::TrySendError::Full(_) => {
                ApiError::unavailable("every slot is busy and the queue is full; retry later")
            }
            mpsc::error::TrySendError::Closed(_) => {
                ApiError::internal("the decode thread has stopped")
            }
        };
        return fail(&st, e);
    }
    st.metrics.requests_total.fetch_add(1, Relaxed);
    if max_tokens == 0 {
        // nothing to generate: still a valid request
    }
    let id = format!(
        "{}-{:x}",
        if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        },
        st.metrics.requests_total.load(Relaxed)
    );
    if stream {
        stream_response(st, kind, id, params, rx).into_response()
    } else {
        let mut rxs = vec![rx];
        rxs.extend(more_rx);
        collect_response(st, kind, id, params, rxs).await
    }
}

/// llama.cpp's `timings` of a finished request, and the expert cache's
/// hits, misses and hit rate while it ran (`expert_cache`: null without
/// a cache); the web page shows the speed and hit rate from it.
fn timings_json(u: &Usage) -> Value {
    let t = &u.timings;
    let ms = |us: u64| us as f64 / 1e3;
    let per_s = |n: usize, us: u64| {
        if us == 0 {
            0.0
        } else {
            n as f64 * 1e6 / us as f64
        }
    };
    let prompt_n = u.prompt_tokens - u.cached_tokens.min(u.prompt_tokens);
    json!({
        "prompt_n": prompt_n,
        "prompt_ms": ms(t.prompt_us),
        "prompt_per_second": per_s(prompt_n, t.prompt_us),
        "predicted_n": u.completion_tokens,
        "predicted_ms": ms(t.predicted_us),
        "predicted_per_second": per_s(u.completion_tokens.saturating_sub(1), t.predicted_us),
        "expert_cache": t.expert_cache.map(|(h, m)| json!({
            "hits": h,
            "misses": m,
            "hit_rate": if h + m == 0 { 0.0 } else { h as f64 / (h + m) as f64 },
        })),
    })
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

/// One choice of a plain (not streamed) answer: its JSON and usage.
async fn collect_choice(
    st: &AppState,
    kind: Kind,
    p: &GenParams,
    index: usize,
    rx: &mut mpsc::UnboundedReceiver<Event>,
) -> Result<(Value, Usage), ApiError> {
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
                let mut choice = match kind {
                    Kind::Completion => {
                        json!({"index": index, "text": text, "logprobs": null, "finish_reason": u.finish_reason})
                    }
                    Kind::Chat => {
                        json!({"index": index, "message": {"role": "assistant", "content": text}, "finish_reason": u.finish_reason})
                    }
                };
                if p.return_tokens {
                    choice["tokens"] = json!(tokens);
                }
                if p.logprobs.is_some() {
                    // offsets past a cut stop string stay within the text
                    for l in &mut lps {
                        l.2 = l.2.min(text.len());
                    }
                    choice["logprobs"] = logprobs_json(st, kind, p.post_sampling_probs, &lps);
                }
                return Ok((choice, u));
            }
        }
    }
}

/// A plain answer: every choice (`n` of them, each from its own channel;
/// the prompt counted once in `usage`, completion tokens summed).
async fn collect_response(
    st: Shared,
    kind: Kind,
    id: String,
    p: GenParams,
    mut rxs: Vec<mpsc::UnboundedReceiver<Event>>,
) -> Response {
    let mut choices = Vec::with_capacity(rxs.len());
    let mut usage: Option<Usage> = None;
    for (i, rx) in rxs.iter_mut().enumerate() {
        match collect_choice(&st, kind, &p, i, rx).await {
            Ok((c, u)) => {
                choices.push(c);
                match usage.as_mut() {
                    Some(t) => t.completion_tokens += u.completion_tokens,
                    None => usage = Some(u),
                }
            }
            Err(e) => return fail(&st, e),
        }
    }
    let Some(u) = usage else {
        return fail(&st, ApiError::internal("no choice was generated"));
    };
    Json(json!({
        "id": id,
        "object": if kind == Kind::Chat { "chat.completion" } else { "text_completion" },
        "created": now_s(),
        "model": st.model_id,
        "choices": choices,
        "usage": usage_json(&u),
        "timings": timings_json(&u),
    }))
    .into_response()
}

fn piece(st: &AppState, id: i32) -> (String, Vec<u8>) {
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
fn logprobs_json(
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
        Kind::Completion => {
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
    kind: Kind,
    id: String,
    p: GenParams,
    rx: mpsc::UnboundedReceiver<Event>,
    started: bool,
    send_done: bool,
    done: bool,
    /// Byte offset of the next token's text (`text_offset`).
    offset: usize,
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
        let mut choice = match self.kind {
            Kind::Completion => {
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
        if self.p.return_tokens {
            choice["tokens"] = json!(tokens);
        }
        if let (Some(l), [id]) = (lp, tokens) {
            choice["logprobs"] = logprobs_json(
                &self.st,
                self.kind,
                self.p.post_sampling_probs,
                &[(*id, l.clone(), self.offset)],
            );
        }
        let mut v = json!({
            "id": self.id,
            "object": if self.kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" },
            "created": now_s(),
            "model": self.st.model_id,
            "choices": [choice],
        });
        if let Some(u) = usage {
            v["usage"] = usage_json(u);
            v["timings"] = timings_json(u);
        }
        SseEvent::default().data(v.to_string())
    }
}

fn stream_response(
    st: Shared,
    kind: Kind,
    id: String,
    p: GenParams,
    rx: mpsc::UnboundedReceiver<Event>,
) -> impl IntoResponse {
    let s0 = StreamState {
        st,
        kind,
        id,
        p,
        rx,
        started: false,
        send_done: false,
        done: false,
        offset: 0,
    };
    let stream = futures_util::stream::unfold(s0, |mut s| async move {
        if s.done {
            return None;
        }
        if s.send_done {
            s.done = true;
            return Some((Ok::<_, Infallible>(SseEvent::default().data("[DONE]")), s));
        }
        loop {
            let ev = match tokio::time::timeout(s.st.timeout, s.rx.recv()).await {
                Ok(Some(ev)) => ev,
                Ok(None) => Event::Error("the decode thread dropped the request".into()),
                Err(_) => Event::Error("no token within --timeout".into()),
            };
            let out = match ev {
                Event::Token { id, text, logprobs } => {
                    if text.is_empty() && !s.p.return_tokens && logprobs.is_none() && s.started {
                        continue;
                    }
                    let c = s.chunk(Some(&text), &[id], logprobs.as_ref(), None, None);
                    s.offset += s.st.model.tokenizer.token_to_piece(id, false).len();
                    s.started = true;
                    c
                }
                Event::Text(t) => {
                    let c = s.chunk(Some(&t), &[], None, None, None);
                    s.started = true;
                    c
                }
                Event::Done(u) => {
                    s.send_done = true;
                    s.chunk(None, &[], None, Some(u.finish_reason), Some(&u))
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
