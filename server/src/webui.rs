//! The chat page served at `/` (off with `--no-webui`): one
//! self-contained HTML file with its CSS and JavaScript inline
//! (`webui/index.html`, compiled into the binary), no build step and no
//! network beyond this server. It streams answers from
//! `/v1/chat/completions`, renders them as markdown (HTML escaped first),
//! stops a generation by aborting its request, and shows the last
//! answer's speed and expert-cache hit rate from the final chunk's
//! `timings`.

use axum::response::{Html, IntoResponse, Response};

/// The page.
pub const INDEX_HTML: &str = include_str!("webui/index.html");

/// `GET /`: the page, not cached by the browser (it changes with the binary).
pub fn page() -> Response {
    ([("cache-control", "no-cache")], Html(INDEX_HTML)).into_response()
}
