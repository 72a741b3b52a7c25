//! CORS as llama.cpp's server answers it: every answer to a request with
//! an `Origin` carries `Access-Control-Allow-Origin` (that origin) and
//! `Access-Control-Allow-Credentials: true`; a preflight `OPTIONS` to any
//! path gets 200 with `Access-Control-Allow-Methods: GET, POST` and
//! `Access-Control-Allow-Headers: *`, before any API key check.
//! (Written out here rather than with tower-http, whose CORS layer refuses
//! credentials together with the `*` headers llama.cpp sends.)

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

/// The middleware (`axum::middleware::from_fn(cors)`).
pub async fn cors(req: Request, next: Next) -> Response {
    let origin = req.headers().get("origin").cloned();
    let mut res = if req.method() == Method::OPTIONS {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::OK;
        let h = r.headers_mut();
        h.insert(
            "access-control-allow-methods",
            HeaderValue::from_static("GET, POST"),
        );
        h.insert(
            "access-control-allow-headers",
            HeaderValue::from_static("*"),
        );
        r
    } else {
        next.run(req).await
    };
    let h = res.headers_mut();
    h.insert(
        "access-control-allow-origin",
        origin.unwrap_or_else(|| HeaderValue::from_static("*")),
    );
    h.insert(
        "access-control-allow-credentials",
        HeaderValue::from_static("true"),
    );
    res
}
