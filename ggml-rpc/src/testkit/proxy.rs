//! [`FaultProxy`]: a TCP proxy between a client and a worker (fake or
//! stock) that understands the framing, forwards request by request, and
//! injects a fault when told: the worker gone, the socket closed, a stall,
//! a short reply. The fault can be armed while a connection runs, so a
//! test can fail a worker in the middle of a generation. It counts what
//! crosses it (bytes and messages each way, round trips), whichever client
//! speaks through it: `examples/rpc-count-proxy.rs` measures llama.cpp's
//! own client that way.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;

use crate::proto::Cmd;

/// What the proxy does to the next request of a kind (`None`: any).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyFault {
    /// Close both sockets and stop listening: the worker's host is gone.
    Gone(Option<Cmd>),
    /// Close the client's socket instead of forwarding.
    Close(Option<Cmd>),
    /// Forward nothing more, answer nothing, keep the socket open.
    Stall(Option<Cmd>),
    /// Forward the request; of its reply send the length and half the
    /// bytes, then close.
    ShortReply(Option<Cmd>),
}

impl ProxyFault {
    fn cmd(&self) -> Option<Cmd> {
        match *self {
            ProxyFault::Gone(c)
            | ProxyFault::Close(c)
            | ProxyFault::Stall(c)
            | ProxyFault::ShortReply(c) => c,
        }
    }
}

struct Shared {
    counts: ggml_core::LinkCounters,
    target: String,
    fault: Mutex<Option<ProxyFault>>,
    stop: AtomicBool,
    socks: Mutex<Vec<TcpStream>>,
}

/// A proxy on a free port of 127.0.0.1 forwarding to `target`.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listen and forward every connection to `target` (`host:port`).
    pub fn start(target: &str) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            counts: ggml_core::LinkCounters::default(),
            target: target.to_string(),
            fault: Mutex::new(None),
            stop: AtomicBool::new(false),
            socks: Mutex::new(Vec::new()),
        });
        let sh = Arc::clone(&shared);
        thread::spawn(move || {
            while !sh.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((c, _)) => {
                        let _ = c.set_nonblocking(false);
                        let sh2 = Arc::clone(&sh);
                        thread::spawn(move || relay(c, sh2));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => break,
                }
            }
        });
        Ok(FaultProxy { addr, shared })
    }

    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// What crossed so far, as the client's link counters would have it:
    /// requests sent, replies received, round trips (all connections).
    pub fn counts(&self) -> ggml_core::LinkCounts {
        self.shared.counts.snapshot()
    }

    /// Arm a fault for the next matching request (once).
    pub fn arm(&self, f: ProxyFault) {
        *self.shared.fault.lock() = Some(f);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        gone(&self.shared);
    }
}

fn gone(sh: &Shared) {
    sh.stop.store(true, Ordering::Relaxed);
    for s in sh.socks.lock().drain(..) {
        let _ = s.shutdown(Shutdown::Both);
    }
}

fn read_n(s: &mut TcpStream, n: usize) -> Option<Vec<u8>> {
    let mut v = vec![0u8; n];
    s.read_exact(&mut v).ok()?;
    Some(v)
}

fn relay(mut c: TcpStream, sh: Arc<Shared>) {
    let Ok(mut w) = TcpStream::connect(&sh.target) else {
        return;
    };
    for s in [&c, &w] {
        let _ = s.set_nodelay(true);
        if let Ok(k) = s.try_clone() {
            sh.socks.lock().push(k);
        }
    }
    let close = |c: &TcpStream, w: &TcpStream| {
        let _ = c.shutdown(Shutdown::Both);
        let _ = w.shutdown(Shutdown::Both);
    };
    loop {
        let Some(head) = read_n(&mut c, 9) else {
            return close(&c, &w);
        };
        let len = u64::from_le_bytes(head[1..].try_into().unwrap_or_default()) as usize;
        let Some(body) = read_n(&mut c, len) else {
            return close(&c, &w);
        };
        let cmd = Cmd::from_u8(head[0]);
        let fault = {
            let mut f = sh.fault.lock();
            match *f {
                Some(x) if x.cmd().is_none() || x.cmd() == cmd => f.take(),
                _ => None,
            }
        };
        match fault {
            Some(ProxyFault::Gone(_)) => {
                gone(&sh);
                return close(&c, &w);
            }
            Some(ProxyFault::Close(_)) => return close(&c, &w),
            Some(ProxyFault::Stall(_)) => {
                while !sh.stop.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_millis(20));
                }
                return close(&c, &w);
            }
            _ => {}
        }
        if w.write_all(&head).and_then(|_| w.write_all(&body)).is_err() {
            return close(&c, &w);
        }
        sh.counts.add_sent(9 + len as u64);
        if !cmd.is_some_and(Cmd::has_reply) {
            continue;
        }
        let Some(rh) = read_n(&mut w, 8) else {
            return close(&c, &w);
        };
        let rlen = u64::from_le_bytes(rh[..].try_into().unwrap_or_default()) as usize;
        let Some(rb) = read_n(&mut w, rlen) else {
            return close(&c, &w);
        };
        if let Some(ProxyFault::ShortReply(_)) = fault {
            let _ = c.write_all(&rh);
            let _ = c.write_all(&rb[..rb.len() / 2]);
            return close(&c, &w);
        }
        if c.write_all(&rh).and_then(|_| c.write_all(&rb)).is_err() {
            return close(&c, &w);
        }
        sh.counts.add_received(8 + rlen as u64);
        sh.counts.add_round_trip();
    }
}
