//! What the end-to-end tests of the constrained decoding, the web UI and
//! the `openai` client share: a `llama-server` on a free loopback port
//! (killed on drop) and a plain HTTP/1.1 client over `TcpStream`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// A running server, killed on drop.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `llama-server` on the embedded default model with `extra` flags.
pub fn start(extra: &[&str]) -> Server {
    start_with_env(extra, &[])
}

/// [`start`] with environment variables set for the server.
pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_llama-server"))
        .args(["--host", "127.0.0.1", "--port", "0", "-t", "2"])
        .args(extra)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start llama-server");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("server listening on ") {
                let _ = tx.send(url.to_string());
            }
        }
    });
    let base = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("server did not print 'server listening on' within 120 s");
    let addr = base
        .strip_prefix("http://")
        .expect("http:// address")
        .to_string();
    Server { child, base, addr }
}

/// An HTTP response: status, headers (lower-case names), body.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request (`Connection: close`), the whole answer read (chunked
/// bodies decoded).
pub fn request(s: &Server, method: &str, path: &str, body: Option<&Value>) -> Response {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    request_raw(s, method, path, body.as_bytes(), &[])
}

/// One request of any body bytes, with extra headers (`("X-Api-Key",
/// "k")`), answered as [`request`]'s.
pub fn request_raw(
    s: &Server,
    method: &str,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> Response {
    let mut c = TcpStream::connect(&s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        s.addr,
        body.len()
    );
    let mut req = head.into_bytes();
    req.extend_from_slice(body);
    // the server may answer (413) before reading a large body to its end
    let _ = c.write_all(&req);
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).expect("read");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = std::str::from_utf8(&b[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 || b.len() < eol + 2 + size {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[(eol + 4 + size).min(b.len())..];
    }
}

/// POST JSON.
pub fn post(s: &Server, path: &str, body: &Value) -> Response {
    request(s, "POST", path, Some(body))
}

/// python3 and a directory holding the `openai` package (and `pydantic`,
/// its dependency): `pip install --target target/py-openai openai` on
/// first use; `Err` says why there is none (then the caller skips).
pub fn python_with_openai() -> Result<(&'static str, std::path::PathBuf), String> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/py-openai");
    let py = "python3";
    if Command::new(py).arg("--version").output().is_err() {
        return Err("no python3".into());
    }
    if !dir.join("openai").is_dir() {
        let st = Command::new(py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--target",
            ])
            .arg(&dir)
            .arg("openai")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(st, Ok(s) if s.success()) || !dir.join("openai").is_dir() {
            return Err(format!(
                "`pip install --target {} openai` failed (no package index?)",
                dir.display()
            ));
        }
    }
    Ok((py, dir))
}
