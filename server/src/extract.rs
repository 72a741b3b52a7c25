//! The request preamble as axum extractors: [`ApiKey`] (the `--api-key`
//! check, 401) and [`JsonBody`] (the body as one JSON object: 413 past
//! [`BODY_LIMIT`], 400 for what is not an object), whose rejections are
//! llama.cpp's JSON errors, counted as failed requests; [`respond`] and
//! [`fail`] answer a handler's result the same way. A handler that checks
//! something before the body (`--props`, `--embedding`) takes
//! `Result<JsonBody, Rejected>` and reads it after its check.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::json::parse_object;
use crate::metrics::Metrics;
use crate::state::{AppState, Shared};

/// Largest request body accepted (bytes); past it, 413.
pub const BODY_LIMIT: usize = 4 << 20;

/// A request's error before its handler ran: answered as the error's JSON,
/// and counted as a failed request when answered.
#[derive(Debug)]
pub struct Rejected {
    error: ApiError,
    metrics: Arc<Metrics>,
}

impl Rejected {
    fn new(st: &AppState, error: ApiError) -> Rejected {
        Rejected {
            error,
            metrics: Arc::clone(&st.metrics),
        }
    }
}

impl From<Rejected> for ApiError {
    /// The error, for a handler that answers it itself (and counts it).
    fn from(r: Rejected) -> ApiError {
        r.error
    }
}

impl IntoResponse for Rejected {
    fn into_response(self) -> Response {
        self.metrics.requests_failed.fetch_add(1, Relaxed);
        self.error.into_response()
    }
}

/// The `--api-key` check (`Authorization: Bearer KEY`, or `X-Api-Key`).
pub fn check_key(st: &AppState, h: &HeaderMap) -> Result<(), ApiError> {
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

/// A request with the server's API key (every request, without
/// `--api-key`); else 401.
#[derive(Debug, Clone, Copy)]
pub struct ApiKey;

impl FromRequestParts<Shared> for ApiKey {
    type Rejection = Rejected;

    async fn from_request_parts(parts: &mut Parts, st: &Shared) -> Result<ApiKey, Rejected> {
        check_key(st, &parts.headers)
            .map(|()| ApiKey)
            .map_err(|e| Rejected::new(st, e))
    }
}

/// The request body, one JSON object; else 413 (larger than
/// [`BODY_LIMIT`]) or 400 naming the problem.
#[derive(Debug, Clone)]
pub struct JsonBody(pub Map<String, Value>);

impl FromRequest<Shared> for JsonBody {
    type Rejection = Rejected;

    async fn from_request(req: Request, st: &Shared) -> Result<JsonBody, Rejected> {
        let b = Bytes::from_request(req, st).await.map_err(|e| {
            let status = e.status();
            let msg = if status == StatusCode::PAYLOAD_TOO_LARGE {
                format!("request body larger than {BODY_LIMIT} bytes")
            } else {
                format!("cannot read the request body: {e}")
            };
            Rejected::new(st, ApiError::new(status, msg, "invalid_request_error"))
        })?;
        parse_object(&b)
            .map(JsonBody)
            .map_err(|e| Rejected::new(st, e))
    }
}

/// Answer `e`, counted as a failed request.
pub fn fail(st: &AppState, e: ApiError) -> Response {
    st.metrics.requests_failed.fetch_add(1, Relaxed);
    e.into_response()
}

/// Answer a handler's result: the answer, or its error counted as a failed
/// request.
pub fn respond<T: IntoResponse>(st: &AppState, r: Result<T, ApiError>) -> Response {
    r.map_or_else(|e| fail(st, e), IntoResponse::into_response)
}
