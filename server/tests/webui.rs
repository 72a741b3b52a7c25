//! The chat page at `/`: served (and hidden by `--no-webui`), the
//! `timings` it reads, and the page in a real browser: headless Chromium
//! (Debian's `chromium`, installed with apt-get when missing and possible;
//! the browser test is skipped with the reason otherwise), driven over the
//! DevTools protocol, loads `/`, sends a message, sees the streamed answer
//! (the same text a plain greedy request gets), stops a long generation,
//! and saves a screenshot to /tmp/webui.png.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

use common::{post, request, start};

#[test]
fn page_is_served_and_no_webui_hides_it() {
    let s = start(&[]);
    let r = request(&s, "GET", "/", None);
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("text/html")),
        "{:?}",
        r.headers
    );
    assert!(r.body.contains("function renderMarkdown"));
    // self-contained: nothing fetched from elsewhere
    for bad in ["http://", "https://", "<script src", "<link "] {
        let outside = r
            .body
            .match_indices(bad)
            .filter(|(i, _)| !r.body[*i..].starts_with("https?:"))
            .count();
        assert_eq!(outside, 0, "the page refers to {bad}");
    }
    drop(s);
    let s = start(&["--no-webui"]);
    assert_eq!(request(&s, "GET", "/", None).status, 404);
    assert_eq!(request(&s, "GET", "/health", None).status, 200);
}

#[test]
fn answers_carry_timings() {
    let s = start(&[]);
    let r = post(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let t = &r.json()["timings"];
    assert_eq!(t["predicted_n"], json!(8), "{t}");
    assert!(
        t["predicted_per_second"].as_f64().is_some_and(|x| x > 0.0),
        "{t}"
    );
    // no expert cache on the CPU: null, not made up
    assert!(t["expert_cache"].is_null(), "{t}");
    // streamed: in the last chunk, with usage
    let r = post(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": true}),
    );
    let last = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .rfind(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap_or_default())
        .unwrap_or_default();
    assert_eq!(last["timings"]["predicted_n"], json!(8), "{last}");
    assert_eq!(last["usage"]["completion_tokens"], json!(8), "{last}");
}

#[test]
fn expert_cache_hit_rate_on_a_simulated_device() {
    // SIM0: the simulated device; the cache's hits and misses are counted
    // by the real cache logic
    let s = start(&["--device", "SIM0", "-ngl", "99", "--cpu-moe"]);
    let r = post(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let c = &r.json()["timings"]["expert_cache"];
    let (h, m) = (c["hits"].as_u64(), c["misses"].as_u64());
    assert!(h.is_some() && m.is_some(), "{c}");
    let rate = c["hit_rate"].as_f64().unwrap_or(-1.0);
    assert!((0.0..=1.0).contains(&rate), "{c}");
}

// ---- the browser ----

/// Chromium's binary, installed with apt-get when missing; `Err` says why
/// there is none.
fn chromium() -> Result<String, String> {
    let find = || {
        ["chromium", "chromium-browser"].into_iter().find(|b| {
            Command::new(b)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    };
    if let Some(b) = find() {
        return Ok(b.to_string());
    }
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    eprintln!("webui: chromium not found; trying apt-get install chromium");
    if !apt(&["update", "-qq"]) || !apt(&["install", "-y", "-qq", "chromium"]) {
        return Err("chromium is not installed and apt-get could not install it".into());
    }
    find()
        .map(str::to_string)
        .ok_or_else(|| "apt-get installed chromium but it does not run".into())
}

/// A headless Chromium, killed on drop (its profile removed).
struct Browser {
    child: Child,
    profile: std::path::PathBuf,
    devtools: String,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn launch(bin: &str) -> Result<Browser, String> {
    let profile = std::env::temp_dir().join(format!("webui-test-chromium-{}", std::process::id()));
    let mut child = Command::new(bin)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1100,760",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {bin}: {e}"))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("DevTools listening on ") {
                let _ = tx.send(url.trim().to_string());
            }
        }
    });
    let mut b = Browser {
        child,
        profile,
        devtools: String::new(),
    };
    let ws = rx
        .recv_timeout(Duration::from_secs(60))
        .map_err(|_| "chromium did not print its DevTools address within 60 s".to_string())?;
    // ws://127.0.0.1:PORT/devtools/browser/ID -> 127.0.0.1:PORT
    b.devtools = ws
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    Ok(b)
}

/// A DevTools session on one page.
struct Page {
    ws: WebSocket<TcpStream>,
    next_id: u64,
}

impl Page {
    fn open(b: &Browser) -> Page {
        let list = http_get(&b.devtools, "/json/list");
        let targets: Value = serde_json::from_str(&list).expect("DevTools /json/list");
        let url = targets
            .as_array()
            .and_then(|a| a.iter().find(|t| t["type"] == "page"))
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target")
            .to_string();
        let tcp = TcpStream::connect(&b.devtools).expect("connect to DevTools");
        tcp.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let (ws, _) = tungstenite::client(url.as_str(), tcp).expect("DevTools websocket");
        Page { ws, next_id: 1 }
    }

    /// Send a command; its result (events in between are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"id": id, "method": method, "params": params});
        self.ws
            .send(Message::text(msg.to_string()))
            .expect("send to DevTools");
        loop {
            let m = self.ws.read().expect("read from DevTools");
            let Message::Text(t) = m else { continue };
            let v: Value = serde_json::from_str(t.as_str()).unwrap_or_default();
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Evaluate a JavaScript expression (promises awaited); its value.
    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// Evaluate `expr` until it is neither null nor false (or panic after `secs`).
    fn wait_for(&mut self, expr: &str, secs: u64) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.eval(expr);
            if !v.is_null() && v != json!(false) {
                return v;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "timed out waiting for {expr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// GET from DevTools' HTTP endpoint (which keeps the connection open:
/// the body is read by its Content-Length).
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(&c, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("send");
    let mut r = BufReader::new(c);
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).expect("read a header");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).expect("read the body");
    String::from_utf8_lossy(&body).into_owned()
}

#[test]
fn chromium_chats_streams_and_stops() {
    let bin = match chromium() {
        Ok(b) => b,
        Err(why) => {
            eprintln!("SKIPPED chromium_chats_streams_and_stops: {why}");
            return;
        }
    };
    let s = start(&["--device", "SIM0", "-ngl", "99", "--cpu-moe"]);
    let browser = match launch(&bin) {
        Ok(b) => b,
        Err(why) => {
            eprintln!("SKIPPED chromium_chats_streams_and_stops: {why}");
            return;
        }
    };
    let mut page = Page::open(&browser);
    page.call("Page.enable", json!({}));
    page.call("Page.navigate", json!({"url": format!("{}/", s.base)}));
    page.wait_for(
        "document.readyState === 'complete' && !!document.getElementById('send')",
        30,
    );

    // the markdown renderer escapes HTML first
    let html = page.eval(
        "renderMarkdown('<img src=x onerror=alert(1)> **bold** `<b>` [l](javascript:alert(1))\\n\\n```\\n<script>\\n```')",
    );
    let html = html.as_str().unwrap_or_default();
    assert!(
        !html.contains("<img") && !html.contains("<script"),
        "{html}"
    );
    assert!(html.contains("&lt;img src=x"), "{html}");
    assert!(html.contains("<strong>bold</strong>"), "{html}");
    assert!(html.contains("<code>&lt;b&gt;</code>"), "{html}");
    assert!(!html.contains("href=\"javascript"), "{html}");
    assert!(
        html.contains("<pre><code>&lt;script&gt;</code></pre>"),
        "{html}"
    );

    // a message, greedy, answered by streaming
    let ask = "Tell me a story about a cat.";
    page.eval(&format!(
        "document.getElementById('temp').value = '0';
         document.getElementById('maxTokens').value = '48';
         document.getElementById('input').value = {};
         document.getElementById('form').requestSubmit(); true",
        json!(ask)
    ));
    let done = page.wait_for(
        "(function(){var m = document.querySelector('.msg.assistant[data-done]');
          return m && {done: m.getAttribute('data-done'), chunks: +m.getAttribute('data-chunks'),
                       text: m.querySelector('.body').innerText,
                       stats: document.getElementById('stats').textContent}; })()",
        120,
    );
    assert_eq!(done["done"], json!("yes"), "{done}");
    assert!(
        done["chunks"].as_u64().is_some_and(|c| c > 1),
        "the answer came in one piece: {done}"
    );
    // the same answer as a plain greedy request (markdown aside: compare
    // words)
    let r = post(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": ask}], "max_tokens": 48, "temperature": 0}),
    );
    let want = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let words = |t: &str| {
        t.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(!want.trim().is_empty());
    assert_eq!(
        words(done["text"].as_str().unwrap_or_default()),
        words(&want),
        "{done}"
    );
    let stats = done["stats"].as_str().unwrap_or_default();
    assert!(stats.contains("tokens/s"), "{stats}");
    assert!(stats.contains("expert cache hit rate"), "{stats}");
    let shot = page.call("Page.captureScreenshot", json!({"format": "png"}));
    let png = data_encoding::BASE64
        .decode(shot["data"].as_str().unwrap_or_default().as_bytes())
        .expect("base64 screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    std::fs::write("/tmp/webui.png", &png).expect("write /tmp/webui.png");
    eprintln!("webui: screenshot in /tmp/webui.png; stats: {stats}");

    // a long generation, stopped once text has arrived
    page.eval(
        "document.getElementById('temp').value = '0.8';
         document.getElementById('maxTokens').value = '900';
         document.getElementById('input').value = 'Go on, at length.';
         document.getElementById('form').requestSubmit(); true",
    );
    page.wait_for(
        "(function(){var m = document.querySelectorAll('.msg.assistant'); m = m[m.length - 1];
          return m.querySelector('.body').textContent.length > 0; })()",
        60,
    );
    page.eval("document.getElementById('stop').click(); true");
    let stopped = page.wait_for(
        "(function(){var m = document.querySelectorAll('.msg.assistant'); m = m[m.length - 1];
          return m.getAttribute('data-done'); })()",
        30,
    );
    assert_eq!(stopped, json!("stopped"));
    assert_eq!(
        page.eval("document.getElementById('send').disabled"),
        json!(false)
    );
    // the server is free again: a request is answered
    let r = post(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    );
    assert_eq!(r.status, 200);
}
