//! llama.cpp's server endpoints besides generation: `GET /props` (and
//! `POST /props` with `--props`), `/slots` (with `--slots`) and
//! `/slots/{id}?action=save|restore|erase` (with `--slot-save-path`),
//! `/apply-template`, and the embedding endpoints' answer.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::engine::{SlotAction, SlotTask, Task};
use crate::error::ApiError;
use crate::http::{body_of, check_key, fail, AppState};
use crate::native::params_json;
use crate::request::{parse_messages, parse_params_with, Defaults};

type Shared = Arc<AppState>;

/// Add these routes.
pub fn routes(r: Router<Shared>) -> Router<Shared> {
    r.route("/props", get(props).post(set_props))
        .route("/slots", get(slots))
        .route("/slots/{id}", post(slot_action))
        .route("/apply-template", post(apply_template))
        .route("/embedding", post(embeddings))
        .route("/embeddings", post(embeddings))
        .route("/v1/embeddings", post(embeddings))
}

/// 501, llama.cpp's `not_supported_error`.
fn not_supported(msg: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::NOT_IMPLEMENTED, msg, "not_supported_error")
}

/// The defaults as a request's parameters.
fn default_params(st: &AppState) -> Result<crate::request::GenParams, ApiError> {
    st.params(&serde_json::Map::new())
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
        "speculative": false,
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

async fn props(State(st): State<Shared>, h: HeaderMap) -> Response {
    let r = (|| {
        check_key(&st, &h)?;
        let mut d = slot_json(&st, 0)?;
        // the defaults, not slot 0's last request
        let p = default_params(&st)?;
        d["params"] = params_json(&p, st.n_predict(&p).map_or(-1, |n| n as i64));
        d["id_task"] = json!(-1);
        d["is_processing"] = json!(false);
        Ok(Json(json!({
            "default_generation_settings": d,
            "total_slots": st.n_slots,
            "model_path": st.model_path,
            "chat_template": st.chat_template,
            "build_info": crate::http::SYSTEM_FINGERPRINT,
            "modalities": {"vision": false},
        })))
    })();
    r.map_or_else(|e| fail(&st, e), IntoResponse::into_response)
}

/// `POST /props` (with `--props`): new generation defaults, given as a
/// request's fields (`temperature`, `top_k`, `seed`, ...) at the top level
/// or under `default_generation_settings.params`.
async fn set_props(
    State(st): State<Shared>,
    h: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = (|| {
        check_key(&st, &h)?;
        if !st.props_enabled {
            return Err(not_supported(
                "changing the server's properties is disabled; start it with --props",
            ));
        }
        let m = body_of(&st, body)?;
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
        };
        Ok(Json(json!({"success": true})))
    })();
    r.map_or_else(|e| fail(&st, e), IntoResponse::into_response)
}

async fn slots(State(st): State<Shared>, h: HeaderMap) -> Response {
    let r = (|| {
        check_key(&st, &h)?;
        if !st.slots_enabled {
            return Err(not_supported(
                "this server does not serve /slots; start it with --slots",
            ));
        }
        let all = (0..st.n_slots)
            .map(|i| slot_json(&st, i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Json(Value::Array(all)))
    })();
    r.map_or_else(|e| fail(&st, e), IntoResponse::into_response)
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

async fn slot_action(
    State(st): State<Shared>,
    h: HeaderMap,
    Path(id): Path<String>,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let prep = (|| {
        check_key(&st, &h)?;
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
            let m = match &body {
                Ok(b) if b.is_empty() => serde_json::Map::new(),
                Ok(b) => crate::request::parse_object(b)?,
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
    })();
    let (id, action, name) = match prep {
        Ok(x) => x,
        Err(e) => return fail(&st, e),
    };
    let (tx, rx) = oneshot::channel();
    let t0 = Instant::now();
    let kind = action.clone();
    if st
        .jobs
        .send(Task::Slot(SlotTask {
            id,
            action,
            reply: tx,
        }))
        .await
        .is_err()
    {
        return fail(&st, ApiError::internal("the decode thread has stopped"));
    }
    let n = match tokio::time::timeout(st.timeout, rx).await {
        Ok(Ok(Ok(n))) => n,
        Ok(Ok(Err(e))) => return fail(&st, ApiError::bad_request(e)),
        Ok(Err(_)) => {
            return fail(
                &st,
                ApiError::internal("the decode thread dropped the action"),
            )
        }
        Err(_) => {
            return fail(
                &st,
                ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "no answer within --timeout",
                    "timeout_error",
                ),
            )
        }
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

async fn apply_template(
    State(st): State<Shared>,
    h: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = (|| {
        check_key(&st, &h)?;
        let m = body_of(&st, body)?;
        let msgs = parse_messages(&m)?;
        let tools = crate::tools::parse_tools(&m)?;
        let prompt = (st.chat_render)(&msgs, tools.as_ref().map(|t| &t.tools), true)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(Json(json!({ "prompt": prompt })))
    })();
    r.map_or_else(|e| fail(&st, e), IntoResponse::into_response)
}

async fn embeddings(State(st): State<Shared>, h: HeaderMap) -> Response {
    let r = (|| -> Result<Response, ApiError> {
        check_key(&st, &h)?;
        if !st.embedding {
            return Err(not_supported(
                "this server does not serve embeddings; start it with --embedding",
            ));
        }
        Err(not_supported(
            "embeddings need the model's last hidden states, which the llama crate's context does not return yet",
        ))
    })();
    r.unwrap_or_else(|e| fail(&st, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_file_names() {
        assert!(check_filename("slot1.bin").is_ok());
        for bad in ["", "..", "../x", "a/b", ".hidden", "a\\b"] {
            let e = check_filename(bad).unwrap_err();
            assert!(e.message.contains("invalid filename"), "{bad}");
        }
    }
}
