//! The request preamble of every endpoint that has one (the `--api-key`
//! check, then the JSON body), as the `extract` module's axum extractors
//! answer it: llama.cpp's error JSON (`{"error": {"code", "message",
//! "type"}}`) with 401 for a missing or wrong key (checked before the
//! body), 400 for a body that is not one JSON object, 413 past the body
//! limit; a check of the server's flags (`--props`, `--embedding`,
//! `--reranking`) comes before the body; each such answer is one failed
//! request in `/metrics`, except `/metrics`' own 401.

mod common;

use common::{request_raw, start, Response, Server};
use serde_json::{json, Value};

const KEY: &str = "sk-preamble";

/// The POST endpoints that check the key, then read a JSON body.
const JSON_POSTS: [&str; 14] = [
    "/completion",
    "/completions",
    "/v1/completions",
    "/infill",
    "/v1/chat/completions",
    "/chat/completions",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/props",
    "/embedding",
    "/embeddings",
    "/v1/embeddings",
    "/rerank",
];

/// llama.cpp's error JSON.
fn error(code: u16, message: &str, kind: &str) -> Value {
    json!({"error": {"code": code, "message": message, "type": kind}})
}

fn unauthorized() -> Value {
    error(
        401,
        "invalid API key (send 'Authorization: Bearer KEY' with the --api-key of the server)",
        "authentication_error",
    )
}

fn bad_request(message: &str) -> Value {
    error(400, message, "invalid_request_error")
}

/// One request with `Authorization: Bearer KEY` where a key is given.
fn send(s: &Server, method: &str, path: &str, body: &[u8], key: Option<&str>) -> Response {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| ("Authorization", a))
        .into_iter()
        .collect();
    request_raw(s, method, path, body, &headers)
}

/// Status and JSON body of a request.
fn call(s: &Server, method: &str, path: &str, body: &[u8], key: Option<&str>) -> (u16, Value) {
    let r = send(s, method, path, body, key);
    (r.status, r.json())
}

/// `llamacpp:requests_failed_total` of `/metrics`.
fn failed(s: &Server, key: Option<&str>) -> u64 {
    let r = send(s, "GET", "/metrics", b"", key);
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .lines()
        .find_map(|l| l.strip_prefix("llamacpp:requests_failed_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("no requests_failed_total in {}", r.body))
}

#[test]
fn key_then_body_with_llama_cpp_errors() {
    let s = start(&[
        "--api-key",
        KEY,
        "--props",
        "--embedding",
        "--pooling",
        "mean",
        "--reranking",
        "--slots",
        "--slot-save-path",
        std::env::temp_dir().to_str().unwrap_or("/tmp"),
    ]);
    let mut n_failed = 0;
    let big = format!("{{\"prompt\": \"{}\"}}", "a".repeat(4 << 20));
    for path in JSON_POSTS {
        // the key first: 401 whatever the body
        for (body, key) in [
            (&b"{not json"[..], None),
            (b"{not json", Some("sk-wrong")),
            (b"{}", None),
        ] {
            assert_eq!(
                call(&s, "POST", path, body, key),
                (401, unauthorized()),
                "{path} {key:?}"
            );
            n_failed += 1;
        }
        // then the body: one JSON object
        let cases: [(&[u8], u16, Value); 5] = [
            (
                b"{not json",
                400,
                bad_request(
                    "request body is not valid JSON: key must be a string at line 1 column 2",
                ),
            ),
            (
                b"",
                400,
                bad_request(
                    "request body is not valid JSON: EOF while parsing a value at line 1 column 0",
                ),
            ),
            (
                b"[1]",
                400,
                bad_request("request body must be a JSON object, not an array"),
            ),
            (
                b"\"x\"",
                400,
                bad_request("request body must be a JSON object, not a string"),
            ),
            (
                big.as_bytes(),
                413,
                error(
                    413,
                    "request body larger than 4194304 bytes",
                    "invalid_request_error",
                ),
            ),
        ];
        for (body, code, want) in cases {
            assert_eq!(
                call(&s, "POST", path, body, Some(KEY)),
                (code, want),
                "{path} {}",
                String::from_utf8_lossy(&body[..body.len().min(20)])
            );
            n_failed += 1;
        }
    }
    // the endpoints without a JSON body check the key too
    for (method, path) in [
        ("GET", "/props"),
        ("GET", "/slots"),
        ("POST", "/slots/0?action=erase"),
    ] {
        assert_eq!(
            call(&s, method, path, b"", Some("sk-wrong")),
            (401, unauthorized()),
            "{method} {path}"
        );
        n_failed += 1;
    }
    // and a good key passes: the endpoint's own answer
    let (code, v) = call(&s, "POST", "/tokenize", br#"{"content": "a"}"#, Some(KEY));
    assert_eq!(code, 200, "{v}");
    assert!(v["tokens"].is_array(), "{v}");
    let r = request_raw(
        &s,
        "POST",
        "/tokenize",
        br#"{"content": "a"}"#,
        &[("X-Api-Key", KEY)],
    );
    assert_eq!(r.status, 200, "X-Api-Key: {}", r.body);
    // every answer above is one failed request; /metrics' own 401 is not
    assert_eq!(failed(&s, Some(KEY)), n_failed);
    assert_eq!(
        call(&s, "GET", "/metrics", b"", None),
        (401, unauthorized())
    );
    assert_eq!(failed(&s, Some(KEY)), n_failed);
}

#[test]
fn flag_checks_come_before_the_body() {
    // no --api-key: every key passes; no --props / --embedding / --reranking
    let s = start(&[]);
    let not_supported = |message: &str| error(501, message, "not_supported_error");
    for (path, want) in [
        (
            "/props",
            not_supported("changing the server's properties is disabled; start it with --props"),
        ),
        (
            "/embedding",
            not_supported("this server does not serve embeddings; start it with --embedding"),
        ),
        (
            "/v1/embeddings",
            not_supported("this server does not serve embeddings; start it with --embedding"),
        ),
        (
            "/rerank",
            not_supported("this server does not rerank; start it with --reranking"),
        ),
    ] {
        for body in [&b"{not json"[..], b"[1]", b"{}"] {
            assert_eq!(
                call(&s, "POST", path, body, None),
                (501, want.clone()),
                "{path}"
            );
        }
    }
    // the others read the body at once
    assert_eq!(
        call(&s, "POST", "/detokenize", b"[1]", Some("any")),
        (
            400,
            bad_request("request body must be a JSON object, not an array")
        )
    );
    assert_eq!(failed(&s, None), 13);
}
