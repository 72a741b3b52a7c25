//! Replicas behind an existing router: two `llama-server` replicas on the
//! embedded default model behind LiteLLM's proxy (PyPI `litellm[proxy]`,
//! `server/scripts/litellm-venv.sh`; skipped, saying so, where it is not
//! installed: `LITELLM=/path/to/litellm` or `~/.cache/litellm-venv`). 50
//! requests from 8 clients (completions and chat, streamed and not) are all
//! answered, both replicas serve some (their `/metrics`), `/v1/models`
//! lists the routed model, and a bad request's error comes back through
//! the proxy as a 400.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{start, Server};
use serde_json::{json, Value};

fn litellm() -> Result<std::path::PathBuf, String> {
    if let Some(p) = std::env::var_os("LITELLM").filter(|p| !p.is_empty()) {
        return Ok(p.into());
    }
    let p = std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
        .join(".cache/litellm-venv/bin/litellm");
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "LiteLLM is not installed ({} absent): run server/scripts/litellm-venv.sh, or set LITELLM",
            p.display()
        ))
    }
}

struct Proxy(Child, String);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The two-replica configuration of docs/server.md.
fn config(replicas: &[&Server]) -> String {
    let mut s = String::from("model_list:\n");
    for r in replicas {
        s.push_str(&format!(
            "  - model_name: default\n    litellm_params:\n      model: openai/default\n      api_base: {}/v1\n      api_key: none\n",
            r.base
        ));
    }
    s.push_str("router_settings:\n  routing_strategy: simple-shuffle\n  num_retries: 0\n");
    s
}

fn start_proxy(bin: &std::path::Path, cfg: &std::path::Path) -> Proxy {
    let port = free_port();
    let mut child = Command::new(bin)
        .args(["--config"])
        .arg(cfg)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("LITELLM_LOG", "ERROR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start litellm");
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || for _ in BufReader::new(err).lines() {});
    let proxy = Proxy(child, format!("http://127.0.0.1:{port}"));
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(120) {
        if curl("GET", &format!("{}/health/liveliness", proxy.1), None).0 == 200 {
            return proxy;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    drop(proxy);
    panic!("litellm did not start within 120 s");
}

/// (status, body) of a request through curl.
fn curl(method: &str, url: &str, body: Option<&Value>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args([
        "-s",
        "--max-time",
        "120",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ]);
    if let Some(b) = body {
        c.args(["-H", "Content-Type: application/json", "-d", &b.to_string()]);
    }
    let out = c.arg(url).output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    match text.rsplit_once('\n') {
        Some((b, code)) => (code.trim().parse().unwrap_or(0), b.to_string()),
        None => (0, text),
    }
}

fn requests_total(s: &Server) -> u64 {
    let (_, m) = curl("GET", &format!("{}/metrics", s.base), None);
    m.lines()
        .find_map(|l| l.strip_prefix("llamacpp:requests_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

#[test]
fn two_replicas_behind_litellm() {
    let bin = match litellm() {
        Ok(b) => b,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let (a, b) = (start(&[]), start(&[]));
    let dir = std::env::temp_dir().join(format!("litellm-router-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, config(&[&a, &b])).unwrap();
    let proxy = start_proxy(&bin, &cfg);
    let base = proxy.1.clone();

    let (st, models) = curl("GET", &format!("{base}/v1/models"), None);
    assert_eq!(st, 200, "{models}");
    assert!(models.contains("\"default\""), "{models}");

    let before = (requests_total(&a), requests_total(&b));
    let next = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (next, answered, base) = (Arc::clone(&next), Arc::clone(&answered), base.clone());
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= 50 {
                    return;
                }
                let stream = i % 2 == 1;
                let (path, body) = if i % 4 < 2 {
                    (
                        "/v1/completions",
                        json!({"model": "default", "prompt": format!("Story {i}:"), "max_tokens": 8, "temperature": 0, "stream": stream}),
                    )
                } else {
                    (
                        "/v1/chat/completions",
                        json!({"model": "default", "messages": [{"role": "user", "content": format!("Say {i}")}], "max_tokens": 8, "temperature": 0, "stream": stream}),
                    )
                };
                let (st, text) = curl("POST", &format!("{base}{path}"), Some(&body));
                assert_eq!(st, 200, "request {i} ({path}, stream {stream}): {text}");
                if stream {
                    assert!(text.contains("data: ") && text.trim_end().ends_with("data: [DONE]"), "request {i}: {text}");
                } else {
                    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
                    let c = &v["choices"][0];
                    assert!(c["text"].is_string() || c["message"]["content"].is_string(), "request {i}: {text}");
                }
                answered.fetch_add(1, Ordering::Relaxed);
            })
        })
        .collect();
    for c in clients {
        c.join().expect("a client failed");
    }
    assert_eq!(answered.load(Ordering::Relaxed), 50);
    let (na, nb) = (requests_total(&a) - before.0, requests_total(&b) - before.1);
    println!("replica A served {na}, replica B {nb} of 50 requests");
    assert!(na >= 5 && nb >= 5 && na + nb >= 50, "spread: {na} + {nb}");

    // a bad request's error comes back through the proxy
    let (st, text) = curl(
        "POST",
        &format!("{base}/v1/completions"),
        Some(&json!({"model": "default", "prompt": "x", "max_tokens": "many"})),
    );
    assert_eq!(st, 400, "{text}");
    assert!(text.contains("max_tokens"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
