//! OpenAI-style JSON errors: `{"error": {"code", "message", "type"}}` with
//! the HTTP status they travel with.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error answered to a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable message naming the problem.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// OpenAI's error code string, when one applies (no error sets one now:
    /// any `model` name is accepted, so `model_not_found` is gone).
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400: a malformed request or a bad field.
    pub fn bad_request(msg: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, msg, "invalid_request_error")
    }

    /// An error of any status and type.
    pub fn new(status: StatusCode, msg: impl Into<String>, kind: &'static str) -> ApiError {
        ApiError {
            status,
            message: msg.into(),
            kind,
            code: None,
        }
    }

    /// 401: a missing or wrong API key.
    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid API key (send 'Authorization: Bearer KEY' with the --api-key of the server)",
            "authentication_error",
        )
    }

    /// 404: no endpoint at the path (the router's fallback).
    pub fn not_found() -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no such endpoint",
            "invalid_request_error",
        )
    }

    /// 503: every slot busy and the queue full.
    pub fn unavailable(msg: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, msg, "unavailable_error")
    }

    /// 500: the server failed.
    pub fn internal(msg: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, msg, "server_error")
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        let mut e = serde_json::json!({
            "code": self.status.as_u16(),
            "message": self.message,
            "type": self.kind,
        });
        if let Some(c) = self.code {
            e["code_name"] = c.into();
        }
        serde_json::json!({ "error": e })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}
