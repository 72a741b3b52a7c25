//! llama.cpp's server endpoints besides generation: `GET /props` (and
//! `POST /props` with `--props`), `/slots` (with `--slots`) and
//! `/slots/{id}?action=save|restore|erase` (with `--slot-save-path`),
//! `/apply-template`, and the embeddings (`/embedding`, `/v1/embeddings`,
//! with `--embedding`): the last hidden states of the prompt's tokens
//! (the final norm's output), pooled by `--pooling`.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use crate::answer::SYSTEM_FINGERPRINT;
use crate::args::Pooling;
use crate::engine::{EmbedTask, SlotAction, SlotTask, Task};
use crate::error::ApiError;
use crate::extract::{fail, respond, ApiKey, JsonBody, Rejected};
use crate::json::parse_object;
use crate::native::params_json;
use crate::prompt::prompt_tokens;
use crate::request::{parse_messages, parse_params_with, parse_prompts, Defaults};
use crate::state::{AppState, Shared};

/// Add these routes.
pub fn routes(r: Router<Shared>) -> Router<Shared> {
    r.route("/props", get(props).post(set_props))
        .route("/slots", get(slots))
        .route("/slots/{id}", post(slot_action))
        .route("/apply-template", post(apply_template))
        .route("/embedding", post(embeddings))
        .route("/embeddings", post(embeddings))
        .route("/v1/embeddings", post(embeddings_oai))
        .route("/rerank", post(rerank))
        .route("/reranking", post(rerank))
        .route("/v1/rerank", post(rerank))
        .route("/v1/reranking", post(rerank))
}

/// 501, llama.cpp's `not_supported_error`.
fn not_supported(msg: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::NOT_IMPLEMENTED, msg, "not_supported_error")
}

/// The defaults as a request's parameters.
fn default_params(st: &AppState) -> Result<crate::request::GenParams, ApiError> {
    st.params(&Map::new())
}

/// One slot as `/slots` and `/props` show it.
fn slot_json(st: &AppState, id: usize) -> Result<Value, ApiError> {
    let view = st
        .view
        .lock()
        .map_err(|_| ApiError::internal("the slots lock is poisoned"))?;
    let v = view.get(id).cloned().unwrap_or_default();
    let p = match v.params {
        Some(p) => p,
        None => default_params(st)?,
    };
    let n_predict = st.n_predict(&p).map_or(-1, |n| n as i64);
    Ok(json!({
        "id": id,
        "id_task": v.n_tasks as i64 - 1,
        "n_ctx": st.n_slot_ctx,
        "speculative": st.speculative,
        "is_processing": v.is_processing,
        "params": params_json(&p, n_predict),
        "prompt": "",
        "next_token": {
            "has_next_token": v.is_processing,
            "n_remain": -1,
            "n_decoded": v.n_decoded,
        },
        "n_past": v.n_past,
    }))
}

async fn props(State(st): State<Shared>, _: ApiKey) -> Response {
    respond(&st, props_json(&st))
}

/// `GET /props`'s answer.
fn props_json(st: &AppState) -> Result<Json<Value>, ApiError> {
    let mut d = slot_json(st, 0)?;
    // the defaults, not slot 0's last request
    let p = default_params(st)?;
    d["params"] = params_json(&p, st.n_predict(&p).map_or(-1, |n| n as i64));
    d["id_task"] = json!(-1);
    d["is_processing"] = json!(false);
    Ok(Json(json!({
        "default_generation_settings": d,
        "total_slots": st.n_slots,
        "model_path": st.model_path,
        "chat_template": st.chat_template,
        "build_info": SYSTEM_FINGERPRINT,
        "modalities": {"vision": false},
    })))
}

/// `POST /props` (with `--props`): new generation defaults, given as a
/// request's fields (`temperature`, `top_k`, `seed`, ...) at the top level
/// or under `default_generation_settings.params`.
async fn set_props(
    State(st): State<Shared>,
    _: ApiKey,
    body: Result<JsonBody, Rejected>,
) -> Response {
    respond(&st, new_defaults(&st, body))
}

/// Set the defaults of a `POST /props` request (its body checked after
/// `--props`).
fn new_defaults(st: &AppState, body: Result<JsonBody, Rejected>) -> Result<Json<Value>, ApiError> {
    if !st.props_enabled {
        return Err(not_supported(
            "changing the server's properties is disabled; start it with --props",
        ));
    }
    let JsonBody(m) = body?;
    let fields = match m.get("default_generation_settings") {
        Some(v) => v
            .get("params")
            .unwrap_or(v)
            .as_object()
            .cloned()
            .ok_or_else(|| {
                ApiError::bad_request("'default_generation_settings' must be an object")
            })?,
        None => m,
    };
    let mut d = st
        .defaults
        .write()
        .map_err(|_| ApiError::internal("the defaults lock is poisoned"))?;
    let p = parse_params_with(&fields, &d)?;
    *d = Defaults {
        temperature: p.temperature,
        top_k: p.top_k,
        top_p: p.top_p,
        min_p: p.min_p,
        seed: p.seed,
        repeat_penalty: p.repeat_penalty,
        repeat_last_n: p.repeat_last_n,
        n_keep: p.n_keep,
        spec_n_max: p.spec_n_max,
        spec_n_min: p.spec_n_min,
        spec_p_min: p.spec_p_min,
    };
    Ok(Json(json!({"success": true})))
}

async fn slots(State(st): State<Shared>, _: ApiKey) -> Response {
    respond(&st, slots_json(&st))
}

/// `/slots`' answer.
fn slots_json(st: &AppState) -> Result<Json<Value>, ApiError> {
    if !st.slots_enabled {
        return Err(not_supported(
            "this server does not serve /slots; start it with --slots",
        ));
    }
    let all = (0..st.n_slots)
        .map(|i| slot_json(st, i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(Value::Array(all)))
}

/// A file name for `--slot-save-path`: a plain name, no folders.
fn check_filename(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "invalid filename '{name}': a plain file name is needed (no folders, not starting with '.')"
        )))
    }
}

/// `/slots/{id}?action=save|restore|erase` (with `--slot-save-path`;
/// save and restore read `filename` from the body, which erase needs not
/// have).
async fn slot_action(
    State(st): State<Shared>,
    Path(id): Path<String>,
    _: ApiKey,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (id, action, name) = match slot_request(&st, &id, &uri, &body) {
        Ok(x) => x,
        Err(e) => return fail(&st, e),
    };
    let (tx, rx) = oneshot::channel();
    let t0 = Instant::now();
    let kind = action.clone();
    let task = Task::Slot(SlotTask {
        id,
        action,
        reply: tx,
    });
    let n = match run_task(&st, task, rx, "action").await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return fail(&st, ApiError::bad_request(e)),
        Err(e) => return fail(&st, e),
    };
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let v = match kind {
        SlotAction::Save(p) => json!({
            "id_slot": id, "filename": name, "n_saved": n,
            "n_written": std::fs::metadata(&p).map_or(0, |m| m.len()),
            "timings": {"save_ms": ms},
        }),
        SlotAction::Restore(p) => json!({
            "id_slot": id, "filename": name, "n_restored": n,
            "n_read": std::fs::metadata(&p).map_or(0, |m| m.len()),
            "timings": {"restore_ms": ms},
        }),
        SlotAction::Erase => json!({"id_slot": id, "n_erased": n}),
    };
    Json(v).into_response()
}

/// The slot, the action and its file name of a `/slots/{id}` request.
fn slot_request(
    st: &AppState,
    id: &str,
    uri: &Uri,
    body: &Result<Bytes, BytesRejection>,
) -> Result<(usize, SlotAction, Option<String>), ApiError> {
    let Some(dir) = &st.slot_save_path else {
        return Err(not_supported(
            "this server does not support slot actions; start it with --slot-save-path",
        ));
    };
    let id: usize = id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("slot id '{id}' is not a number")))?;
    if id >= st.n_slots {
        return Err(ApiError::bad_request(format!(
            "no slot {id}: the server has {} slots",
            st.n_slots
        )));
    }
    let action = uri
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("action="))
        .unwrap_or("");
    let file = || -> Result<(String, std::path::PathBuf), ApiError> {
        let m = match body {
            Ok(b) if b.is_empty() => Map::new(),
            Ok(b) => parse_object(b)?,
            Err(e) => {
                return Err(ApiError::bad_request(format!(
                    "cannot read the request body: {e}"
                )))
            }
        };
        let name = match m.get("filename") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(ApiError::bad_request("'filename' must be a string")),
            None => return Err(ApiError::bad_request("'filename' is required")),
        };
        check_filename(&name)?;
        Ok((name.clone(), dir.join(name)))
    };
    let (action, name) = match action {
        "save" => {
            let (n, p) = file()?;
            (SlotAction::Save(p), Some(n))
        }
        "restore" => {
            let (n, p) = file()?;
            (SlotAction::Restore(p), Some(n))
        }
        "erase" => (SlotAction::Erase, None),
        a => {
            return Err(ApiError::bad_request(format!(
                "invalid action '{a}': must be save, restore or erase"
            )))
        }
    };
    Ok((id, action, name))
}

async fn apply_template(State(st): State<Shared>, _: ApiKey, JsonBody(m): JsonBody) -> Response {
    respond(&st, templated(&st, &m))
}

/// `/apply-template`'s answer: the chat template applied to `messages`
/// (and `tools`).
fn templated(st: &AppState, m: &Map<String, Value>) -> Result<Json<Value>, ApiError> {
    let msgs = parse_messages(m)?;
    let tools = crate::tools::parse_tools(m)?;
    let prompt = (st.chat_render)(&msgs, tools.as_ref().map(|t| &t.tools), true)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Json(json!({ "prompt": prompt })))
}

async fn embeddings(
    State(st): State<Shared>,
    _: ApiKey,
    body: Result<JsonBody, Rejected>,
) -> Response {
    embed(st, body, false).await
}

async fn embeddings_oai(
    State(st): State<Shared>,
    _: ApiKey,
    body: Result<JsonBody, Rejected>,
) -> Response {
    embed(st, body, true).await
}

/// `/rerank` (with `--reranking`): `query` and `documents` are checked
/// (400 naming the field), then answered 501: ranking needs a model with a
/// classification head (llama.cpp's rank pooling), which the llama crate
/// does not load.
async fn rerank(State(st): State<Shared>, _: ApiKey, body: Result<JsonBody, Rejected>) -> Response {
    respond(&st, reranked(&st, body))
}

/// `/rerank`'s answer: its checks, then the 501.
fn reranked(st: &AppState, body: Result<JsonBody, Rejected>) -> Result<Response, ApiError> {
    if !st.reranking {
        return Err(not_supported(
            "this server does not rerank; start it with --reranking",
        ));
    }
    let JsonBody(m) = body?;
    if !m.get("query").is_some_and(Value::is_string) {
        return Err(ApiError::bad_request("'query' must be a string"));
    }
    let docs_key = if m.contains_key("texts") {
        "texts"
    } else {
        "documents"
    };
    match m.get(docs_key) {
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_string) => {}
        _ => {
            return Err(ApiError::bad_request(format!(
                "'{docs_key}' must be a non-empty array of strings"
            )))
        }
    }
    Err(not_supported(
            "reranking needs a model with a classification head (rank pooling), which this server does not load",
        ))
}

/// One vector of unit length (a zero vector stays zero).
fn normalized(v: &[f32]) -> Vec<f32> {
    let n = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if n == 0.0 {
        v.to_vec()
    } else {
        v.iter().map(|&x| (f64::from(x) / n) as f32).collect()
    }
}

/// Pool the rows of one prompt (`None` pooling: every row, as is; else one
/// vector of unit length, as llama.cpp's default normalization).
pub fn pool(rows: &[Vec<f32>], pooling: Pooling) -> Vec<Vec<f32>> {
    let Some(first) = rows.first() else {
        return Vec::new();
    };
    let v = match pooling {
        Pooling::None => return rows.to_vec(),
        Pooling::Cls => first.clone(),
        Pooling::Last => rows[rows.len() - 1].clone(),
        Pooling::Mean => {
            let mut m = vec![0.0f64; first.len()];
            for r in rows {
                for (a, &x) in m.iter_mut().zip(r) {
                    *a += f64::from(x);
                }
            }
            m.iter().map(|&a| (a / rows.len() as f64) as f32).collect()
        }
    };
    vec![normalized(&v)]
}

/// Standard base64 of the little-endian bytes of `v` (`encoding_format: base64`).
pub fn base64_f32(v: &[f32]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `/embedding`, `/embeddings` (llama.cpp's: a list of `{index,
/// embedding}`, the embedding a list of vectors) and `/v1/embeddings`
/// (OpenAI's; pooling `none` is refused there, as llama.cpp).
async fn embed(st: Shared, body: Result<JsonBody, Rejected>, oai: bool) -> Response {
    let (prompts, base64) = match embed_request(&st, body, oai) {
        Ok(x) => x,
        Err(e) => return fail(&st, e),
    };
    let mut results = Vec::with_capacity(prompts.len());
    for toks in &prompts {
        let (tx, rx) = oneshot::channel();
        let task = Task::Embed(EmbedTask {
            tokens: toks.clone(),
            reply: tx,
        });
        match run_task(&st, task, rx, "request").await {
            Ok(Ok(rows)) => results.push(pool(&rows, st.pooling)),
            Ok(Err(e)) => return fail(&st, ApiError::internal(e)),
            Err(e) => return fail(&st, e),
        }
    }
    let n_tokens: usize = prompts.iter().map(Vec::len).sum();
    if !oai {
        let v: Vec<Value> = results
            .iter()
            .enumerate()
            .map(|(i, e)| json!({"index": i, "embedding": e}))
            .collect();
        return Json(Value::Array(v)).into_response();
    }
    let data: Vec<Value> = results
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let v = e.first().map(Vec::as_slice).unwrap_or_default();
            let emb = if base64 {
                json!(base64_f32(v))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": emb})
        })
        .collect();
    Json(json!({
        "object": "list",
        "model": st.model_id,
        "data": data,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    }))
    .into_response()
}

/// The inputs' tokens and `encoding_format: base64` of an embeddings
/// request (its body checked after `--embedding` and `--pooling`).
fn embed_request(
    st: &AppState,
    body: Result<JsonBody, Rejected>,
    oai: bool,
) -> Result<(Vec<Vec<i32>>, bool), ApiError> {
    if !st.embedding {
        return Err(not_supported(
            "this server does not serve embeddings; start it with --embedding",
        ));
    }
    if oai && st.pooling == Pooling::None {
        return Err(ApiError::bad_request(
                "pooling type 'none' is not OpenAI-compatible; start the server with --pooling mean, cls or last",
            ));
    }
    let JsonBody(m) = body?;
    let key = if m.contains_key("input") {
        "input"
    } else {
        "content"
    };
    let base64 = match m.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "float" => false,
        Some(Value::String(s)) if s == "base64" => true,
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "'encoding_format' is {v}: must be float or base64"
            )))
        }
    };
    let prompts = parse_prompts(&m, key)?;
    let mut all = Vec::new();
    for p in &prompts {
        let toks = prompt_tokens(st, p)?;
        let n_vocab = st.model.hparams.n_vocab;
        if let Some(bad) = toks.iter().find(|&&t| t < 0 || t as usize >= n_vocab) {
            return Err(ApiError::bad_request(format!(
                "input token id {bad} is out of range (vocabulary of {n_vocab})"
            )));
        }
        if toks.is_empty() {
            return Err(ApiError::bad_request("the input is empty (no token)"));
        }
        if toks.len() > st.n_slot_ctx {
            return Err(ApiError::bad_request(format!(
                    "the input is too large to process: {} tokens, more than a slot's context of {} tokens (-c / -np)",
                    toks.len(),
                    st.n_slot_ctx
                )));
        }
        all.push(toks);
    }
    Ok((all, base64))
}

/// Hand `task` to the decode thread and wait for its reply on `rx`, at most
/// `--timeout`: the task's own result, or the error to answer with (the
/// thread stopped, dropped the `what`, or did not answer in time).
async fn run_task<T>(
    st: &AppState,
    task: Task,
    rx: oneshot::Receiver<Result<T, String>>,
    what: &str,
) -> Result<Result<T, String>, ApiError> {
    if st.jobs.send(task).await.is_err() {
        return Err(ApiError::internal("the decode thread has stopped"));
    }
    match tokio::time::timeout(st.timeout, rx).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(_)) => Err(ApiError::internal(format!(
            "the decode thread dropped the {what}"
        ))),
        Err(_) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "no answer within --timeout",
            "timeout_error",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_and_base64() {
        let rows = vec![vec![3.0f32, 0.0], vec![0.0, 4.0]];
        assert_eq!(pool(&rows, Pooling::Cls), vec![vec![1.0, 0.0]]);
        assert_eq!(pool(&rows, Pooling::Last), vec![vec![0.0, 1.0]]);
        assert_eq!(pool(&rows, Pooling::Mean), vec![vec![0.6, 0.8]]);
        assert_eq!(pool(&rows, Pooling::None), rows);
        // 1.0f32 = 00 00 80 3f
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, 1.0]), "AACAPwAAgD8=");
    }

    #[test]
    fn slot_file_names() {
        assert!(check_filename("slot1.bin").is_ok());
        for bad in ["", "..", "../x", "a/b", ".hidden", "a\\b"] {
            let e = check_filename(bad).unwrap_err();
            assert!(e.message.contains("invalid filename"), "{bad}");
        }
    }
}
