//! One TCP connection to a worker: framing, timeouts, the link counters,
//! and every way the worker can fail, each turned into an error that names
//! the worker and the command.
//!
//! Requests and their replies go under one lock, so the devices of one
//! worker (and several threads) share the connection safely. Commands
//! without a reply are written and forgotten: the socket's order is what
//! orders them before the next command, and the first reply read after
//! them is where their failure (the worker closes the socket on any error)
//! shows. After a fault the connection is dead: every later command fails
//! at once with the first fault's message, never by reading a stream out of
//! step.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use ggml_core::{BackendError, LinkCounters};
use parking_lot::Mutex;

use crate::proto::Cmd;

/// How long a reply (or a write the worker does not drain) may take before
/// the worker counts as stalled, unless `GGML_RPC_TIMEOUT` (seconds) says
/// otherwise. A graph compute counts against the read that follows it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The environment variable that sets the timeout, in seconds.
pub const TIMEOUT_ENV: &str = "GGML_RPC_TIMEOUT";

/// The timeout `GGML_RPC_TIMEOUT` asks for ([`DEFAULT_TIMEOUT`] when unset);
/// a value that is not a positive number of seconds is an error naming it.
pub fn timeout_from_env() -> Result<Duration, String> {
    match std::env::var(TIMEOUT_ENV) {
        Err(_) => Ok(DEFAULT_TIMEOUT),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
            _ => Err(format!(
                "{TIMEOUT_ENV}={v}: give the RPC timeout in seconds, a number > 0"
            )),
        },
    }
}

/// What went wrong talking to a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Nothing listens there (connection refused, host unreachable, name
    /// not resolved).
    Gone(String),
    /// The worker closed the connection (it does on any request it cannot
    /// serve, and when it is stopped).
    Closed,
    /// The connection was reset (the worker's process died).
    Reset(String),
    /// No reply, or no progress on a write, within the timeout.
    Stalled(Duration),
    /// The reply ended early or had another size than the command's.
    ShortReply(String),
    /// A reply that is well framed but says no (out of memory, ...).
    Refused(String),
    /// The connection failed earlier; this command was not sent.
    Dead(String),
}

impl Fault {
    fn text(&self) -> String {
        match self {
            Fault::Gone(e) => format!("the worker is gone: {e}"),
            Fault::Closed => "the worker closed the connection (it does on a request it cannot serve, or it was stopped)".into(),
            Fault::Reset(e) => format!("the connection was reset, the worker is gone ({e})"),
            Fault::Stalled(t) => format!(
                "no reply within {:.1} s: the worker stalled ({TIMEOUT_ENV} sets the timeout)",
                t.as_secs_f64()
            ),
            Fault::ShortReply(e) => format!("short reply: {e}"),
            Fault::Refused(e) => e.clone(),
            Fault::Dead(first) => format!("not sent: the connection failed earlier ({first})"),
        }
    }
}

/// A fault with the worker and the command it happened on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    /// `RPC0 (host:port)`, or the endpoint before the devices are named.
    pub worker: String,
    /// The command.
    pub cmd: Cmd,
    /// What happened.
    pub fault: Fault,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RPC worker {}: {}: {}",
            self.worker,
            self.cmd,
            self.fault.text()
        )
    }
}

impl std::error::Error for RpcError {}

impl From<RpcError> for BackendError {
    fn from(e: RpcError) -> BackendError {
        match e.fault {
            Fault::Refused(_) if e.cmd == Cmd::AllocBuffer => {
                BackendError::OutOfMemory(e.to_string())
            }
            _ => BackendError::Device(e.to_string()),
        }
    }
}

/// The connection to one worker (`host:port`).
pub struct Conn {
    endpoint: String,
    label: Mutex<String>,
    timeout: Duration,
    io: Mutex<Io>,
    counters: Arc<LinkCounters>,
}

struct Io {
    stream: Option<TcpStream>,
    /// The first fault's text, once the connection is dead.
    dead: Option<String>,
    /// Per device of the worker: the last graph sent, for GRAPH_RECOMPUTE
    /// (cleared where the worker drops its stored graphs).
    last_graph: Vec<Option<Vec<u8>>>,
}

/// Split `host:port`; the port must be a number of 1..=65535.
pub fn parse_endpoint(endpoint: &str) -> Result<(String, u16), String> {
    let e = endpoint.trim();
    let Some((host, port)) = e.rsplit_once(':') else {
        return Err(format!("RPC endpoint '{endpoint}': give host:port"));
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("RPC endpoint '{endpoint}': the host is empty"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok((host.to_string(), p)),
        _ => Err(format!(
            "RPC endpoint '{endpoint}': the port '{port}' is not a number of 1..65535"
        )),
    }
}

fn io_fault(e: &std::io::Error, timeout: Duration) -> Fault {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => Fault::Stalled(timeout),
        ErrorKind::UnexpectedEof => Fault::Closed,
        ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted => {
            Fault::Reset(e.to_string())
        }
        _ => Fault::Reset(e.to_string()),
    }
}

impl Conn {
    /// Connect to `endpoint` (`host:port`) with `timeout` for the connect,
    /// every reply and every write. Nothing is sent yet.
    pub fn connect(endpoint: &str, timeout: Duration) -> Result<Conn, RpcError> {
        let err = |fault| RpcError {
            worker: endpoint.to_string(),
            cmd: Cmd::Hello,
            fault,
        };
        let (host, port) = parse_endpoint(endpoint).map_err(|e| err(Fault::Gone(e)))?;
        let addrs: Vec<_> = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| err(Fault::Gone(format!("cannot resolve '{host}': {e}"))))?
            .collect();
        let mut last = format!("'{host}' resolves to no address");
        let mut stream = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = format!("cannot connect to {a}: {e}"),
            }
        }
        let Some(s) = stream else {
            return Err(err(Fault::Gone(last)));
        };
        let setup = |s: &TcpStream| -> std::io::Result<()> {
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))
        };
        setup(&s).map_err(|e| err(Fault::Reset(e.to_string())))?;
        Ok(Conn {
            endpoint: endpoint.trim().to_string(),
            label: Mutex::new(endpoint.trim().to_string()),
            timeout,
            io: Mutex::new(Io {
                stream: Some(s),
                dead: None,
                last_graph: Vec::new(),
            }),
            counters: Arc::new(LinkCounters::default()),
        })
    }

    /// The endpoint as given (`host:port`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Whether a fault ended the connection.
    pub fn is_dead(&self) -> bool {
        self.io.lock().dead.is_some()
    }

    /// The timeout of replies and writes.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Name the worker in errors (`RPC0 (host:port)`, or `RPC0,RPC1 (...)`).
    pub fn set_label(&self, label: String) {
        *self.label.lock() = label;
    }

    fn err(&self, cmd: Cmd, fault: Fault) -> RpcError {
        RpcError {
            worker: self.label.lock().clone(),
            cmd,
            fault,
        }
    }

    /// The link's counters (every device of this worker shares them).
    pub fn counters(&self) -> &Arc<LinkCounters> {
        &self.counters
    }

    /// Send a command without a reply.
    pub fn send(&self, cmd: Cmd, parts: &[&[u8]]) -> Result<(), RpcError> {
        let mut io = self.io.lock();
        self.write_request(&mut io, cmd, parts)
    }

    /// Send a command and read its reply, which must be `reply_len` bytes.
    pub fn call(&self, cmd: Cmd, parts: &[&[u8]], reply_len: usize) -> Result<Vec<u8>, RpcError> {
        let mut out = vec![0u8; reply_len];
        self.call_into(cmd, parts, &mut out)?;
        Ok(out)
    }

    /// Send a command and read its reply, exactly `out.len()` bytes, into
    /// `out`.
    pub fn call_into(&self, cmd: Cmd, parts: &[&[u8]], out: &mut [u8]) -> Result<(), RpcError> {
        let mut io = self.io.lock();
        self.write_request(&mut io, cmd, parts)?;
        self.counters.add_round_trip();
        let r = self.read_reply(&mut io, cmd, out);
        if let Err(e) = &r {
            self.kill(&mut io, e);
        }
        r
    }

    /// GRAPH_COMPUTE of `payload` on `device`, or GRAPH_RECOMPUTE when it
    /// is the graph this device computed last (the worker keeps it).
    /// Returns whether it was a recompute.
    pub fn graph_compute(&self, device: u32, payload: Vec<u8>) -> Result<bool, RpcError> {
        let mut io = self.io.lock();
        let d = device as usize;
        if io.last_graph.len() <= d {
            io.last_graph.resize(d + 1, None);
        }
        if io.last_graph[d].as_deref() == Some(payload.as_slice()) {
            self.write_request(&mut io, Cmd::GraphRecompute, &[&device.to_le_bytes()])?;
            return Ok(true);
        }
        self.write_request(&mut io, Cmd::GraphCompute, &[&payload])?;
        io.last_graph[d] = Some(payload);
        Ok(false)
    }

    /// Forget the stored graphs: the worker drops them on FREE_BUFFER.
    pub fn free_buffer(&self, remote: u64) -> Result<(), RpcError> {
        let mut io = self.io.lock();
        io.last_graph.iter_mut().for_each(|g| *g = None);
        self.write_request(&mut io, Cmd::FreeBuffer, &[&remote.to_le_bytes()])
    }

    fn kill(&self, io: &mut Io, e: &RpcError) {
        if io.dead.is_none() {
            io.dead = Some(format!("{}: {}", e.cmd, e.fault.text()));
        }
        if let Some(s) = io.stream.take() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn write_request(&self, io: &mut Io, cmd: Cmd, parts: &[&[u8]]) -> Result<(), RpcError> {
        if let Some(first) = &io.dead {
            return Err(self.err(cmd, Fault::Dead(first.clone())));
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut head = [0u8; 9];
        head[0] = cmd as u8;
        head[1..].copy_from_slice(&(len as u64).to_le_bytes());
        let timeout = self.timeout;
        let r = match io.stream.as_mut() {
            None => Err(Fault::Dead("no connection".into())),
            Some(s) => {
                // small requests go out as one segment
                let res = if len <= 4096 {
                    let mut one = Vec::with_capacity(9 + len);
                    one.extend_from_slice(&head);
                    parts.iter().for_each(|p| one.extend_from_slice(p));
                    s.write_all(&one)
                } else {
                    s.write_all(&head)
                        .and_then(|_| parts.iter().try_for_each(|p| s.write_all(p)))
                };
                res.map_err(|e| io_fault(&e, timeout))
            }
        };
        match r {
            Ok(()) => {
                self.counters.add_sent(9 + len as u64);
                Ok(())
            }
            Err(f) => {
                let e = self.err(cmd, f);
                self.kill(io, &e);
                Err(e)
            }
        }
    }

    fn read_reply(&self, io: &mut Io, cmd: Cmd, out: &mut [u8]) -> Result<(), RpcError> {
        let timeout = self.timeout;
        let Some(s) = io.stream.as_mut() else {
            return Err(self.err(cmd, Fault::Dead("no connection".into())));
        };
        let mut head = [0u8; 8];
        let got = read_full(s, &mut head).map_err(|e| self.err(cmd, io_fault(&e, timeout)))?;
        if got == 0 {
            return Err(self.err(cmd, Fault::Closed));
        }
        if got < 8 {
            return Err(self.err(
                cmd,
                Fault::ShortReply(format!(
                    "the reply's length field ended after {got} of 8 bytes"
                )),
            ));
        }
        let len = u64::from_le_bytes(head);
        if len != out.len() as u64 {
            return Err(self.err(
                cmd,
                Fault::ShortReply(format!(
                    "a reply of {len} bytes where {} were expected",
                    out.len()
                )),
            ));
        }
        let got = read_full(s, out).map_err(|e| self.err(cmd, io_fault(&e, timeout)))?;
        if got < out.len() {
            return Err(self.err(
                cmd,
                Fault::ShortReply(format!(
                    "{got} of {} bytes, then the worker closed the connection",
                    out.len()
                )),
            ));
        }
        self.counters.add_received(8 + len);
        Ok(())
    }

    /// A reply that is well framed but refuses (ALLOC_BUFFER out of memory):
    /// an error of `cmd` with `why`.
    pub fn refused(&self, cmd: Cmd, why: String) -> RpcError {
        self.err(cmd, Fault::Refused(why))
    }
}

/// Read until `buf` is full or the stream ends; the bytes read.
fn read_full(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match s.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_or_say_why_not() {
        assert_eq!(
            parse_endpoint("127.0.0.1:50052"),
            Ok(("127.0.0.1".into(), 50052))
        );
        assert_eq!(parse_endpoint("[::1]:7"), Ok(("::1".into(), 7)));
        assert!(parse_endpoint("localhost")
            .unwrap_err()
            .contains("host:port"));
        assert!(parse_endpoint(":5").unwrap_err().contains("host is empty"));
        assert!(parse_endpoint("h:0").unwrap_err().contains("port '0'"));
        assert!(parse_endpoint("h:x").unwrap_err().contains("port 'x'"));
    }

    #[test]
    fn nothing_listening_is_gone_by_name() {
        // a port just released: nothing listens there
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let e = Conn::connect(&addr.to_string(), Duration::from_secs(2))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&addr.to_string()) && e.contains("HELLO") && e.contains("gone"),
            "{e}"
        );
    }
}
