//! [`FakeWorker`]: an in-process server of protocol 7.0.0 that keeps its
//! buffers in host memory and computes graphs with this engine's CPU
//! backend, reading the ops back from their ggml ordinals ([`opmap::decode`]).
//! It behaves as `ggml-rpc-server -d CPU` does where a client can tell:
//! the same framing, replies and checks, a closed connection on anything
//! it cannot serve. On top, it answers HELLO with any version and injects
//! faults ([`FakeFault`]), and counts the commands it served.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ggml_core::cpu::HostBuffer;
use ggml_core::tensor::{Tensor, TensorData, TensorFlags};
use ggml_core::{BackendStream, Buffer, BufferUsage, CpuBackend, Graph, TensorId};
use parking_lot::Mutex;

use crate::graph_wire::{deserialize, tensor_type};
use crate::opmap;
use crate::ordinals::flag;
use crate::proto::{Cmd, Version, CONN_CAPS_SIZE, MAX_DIMS, VERSION};
use crate::wire::{Reader, RpcTensor};

/// A fault the fake worker injects the `nth` time (counting from 1) it
/// receives `cmd`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeFault {
    /// Close the connection instead of serving it.
    Close(Cmd, u64),
    /// Stop answering: hold the connection open, read nothing more, reply
    /// nothing (until the worker is dropped or 10 minutes pass).
    Stall(Cmd, u64),
    /// Send the reply's length, half of the reply, and close.
    ShortReply(Cmd, u64),
    /// Die: close every connection and stop listening (a killed process).
    Die(Cmd, u64),
}

impl FakeFault {
    fn at(&self) -> (Cmd, u64) {
        match *self {
            FakeFault::Close(c, n)
            | FakeFault::Stall(c, n)
            | FakeFault::ShortReply(c, n)
            | FakeFault::Die(c, n) => (c, n),
        }
    }
}

/// How the fake worker behaves.
#[derive(Clone, Debug)]
pub struct FakeOptions {
    /// The version HELLO reports.
    pub version: Version,
    /// Devices it has.
    pub devices: u32,
    /// `(free, total)` bytes each device reports; allocations beyond
    /// `total` get ALLOC_BUFFER's "no" (a null handle).
    pub memory: (u64, u64),
    /// Each device's buffer alignment.
    pub alignment: u64,
    /// Keep SET_TENSOR data sent with the cache flag, and serve
    /// SET_TENSOR_HASH from it (`ggml-rpc-server -c`).
    pub cache: bool,
    /// A fault to inject.
    pub fault: Option<FakeFault>,
    /// Threads of its CPU backend.
    pub n_threads: usize,
}

impl Default for FakeOptions {
    fn default() -> Self {
        FakeOptions {
            version: VERSION,
            devices: 1,
            memory: (8 << 30, 8 << 30),
            alignment: 32,
            cache: false,
            fault: None,
            n_threads: 1,
        }
    }
}

struct Shared {
    opts: FakeOptions,
    stop: AtomicBool,
    counts: Mutex<HashMap<Cmd, u64>>,
    conns: Mutex<Vec<TcpStream>>,
    cache: Mutex<HashMap<u64, Vec<u8>>>,
    served: AtomicU64,
}

/// A fake `ggml-rpc-server` on `127.0.0.1`, serving until dropped or
/// killed.
pub struct FakeWorker {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeWorker {
    /// Listen on a free port of 127.0.0.1 and serve each connection on a
    /// thread of its own.
    pub fn start(opts: FakeOptions) -> std::io::Result<FakeWorker> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            opts,
            stop: AtomicBool::new(false),
            counts: Mutex::new(HashMap::new()),
            conns: Mutex::new(Vec::new()),
            cache: Mutex::new(HashMap::new()),
            served: AtomicU64::new(0),
        });
        let sh = Arc::clone(&shared);
        thread::spawn(move || {
            while !sh.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_nodelay(true);
                        if let Ok(c) = s.try_clone() {
                            sh.conns.lock().push(c);
                        }
                        let sh2 = Arc::clone(&sh);
                        thread::spawn(move || serve(s, sh2));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => break,
                }
            }
            // the listener drops here: new connections are refused
        });
        Ok(FakeWorker { addr, shared })
    }

    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// How many times it received `cmd` (all connections).
    pub fn count(&self, cmd: Cmd) -> u64 {
        self.shared.counts.lock().get(&cmd).copied().unwrap_or(0)
    }

    /// The data it keeps for SET_TENSOR_HASH (with `cache`): hash and size.
    pub fn cached(&self) -> Vec<(u64, usize)> {
        let mut v: Vec<_> = self
            .shared
            .cache
            .lock()
            .iter()
            .map(|(h, d)| (*h, d.len()))
            .collect();
        v.sort_unstable();
        v
    }

    /// Die as a killed process does: every connection closed, nothing
    /// listening any more.
    pub fn kill(&self) {
        kill(&self.shared);
    }

    /// Commands served (all connections).
    pub fn served(&self) -> u64 {
        self.shared.served.load(Ordering::Relaxed)
    }
}

impl Drop for FakeWorker {
    fn drop(&mut self) {
        kill(&self.shared);
    }
}

fn kill(sh: &Shared) {
    sh.stop.store(true, Ordering::Relaxed);
    for c in sh.conns.lock().drain(..) {
        let _ = c.shutdown(Shutdown::Both);
    }
}

/// One remote buffer: host memory at a fake remote address.
struct FakeBuf {
    base: u64,
    mem: Arc<dyn Buffer>,
}

/// The state of one client connection (ggml's `rpc_server`).
struct Session {
    sh: Arc<Shared>,
    bufs: HashMap<u64, FakeBuf>,
    next_handle: u64,
    next_base: u64,
    used: u64,
    cpu: CpuBackend,
    stored: Vec<Option<(Graph, Vec<TensorId>)>>,
}

/// Why a request ends the connection.
type Fail = String;

fn read_exact_or_eof(s: &mut TcpStream, buf: &mut [u8]) -> Result<bool, ()> {
    let mut n = 0;
    while n < buf.len() {
        match s.read(&mut buf[n..]) {
            Ok(0) => return if n == 0 { Ok(false) } else { Err(()) },
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Err(()),
        }
    }
    Ok(true)
}

fn send_reply(s: &mut TcpStream, payload: &[u8]) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    s.write_all(&out)
}

fn serve(mut s: TcpStream, sh: Arc<Shared>) {
    serve_session(&mut s, sh);
    // the listener keeps a clone of the socket: close it for real
    let _ = s.shutdown(Shutdown::Both);
}

fn serve_session(s: &mut TcpStream, sh: Arc<Shared>) {
    let mut sess = Session {
        cpu: CpuBackend::new(sh.opts.n_threads.max(1)),
        stored: (0..sh.opts.devices).map(|_| None).collect(),
        sh,
        bufs: HashMap::new(),
        next_handle: 1,
        next_base: 0x1000_0000,
        used: 0,
    };
    loop {
        let mut head = [0u8; 9];
        match read_exact_or_eof(s, &mut head) {
            Ok(true) => {}
            _ => return,
        }
        let Some(cmd) = Cmd::from_u8(head[0]) else {
            return;
        };
        let len = u64::from_le_bytes(head[1..].try_into().unwrap_or_default());
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        if len > 1 << 34 {
            return;
        }
        let mut payload = vec![0u8; len];
        if read_exact_or_eof(s, &mut payload) != Ok(true) && len > 0 {
            return;
        }
        let nth = {
            let mut c = sess.sh.counts.lock();
            let e = c.entry(cmd).or_insert(0);
            *e += 1;
            *e
        };
        let fault = sess.sh.opts.fault.filter(|f| f.at() == (cmd, nth));
        match fault {
            Some(FakeFault::Close(..)) => return,
            Some(FakeFault::Die(..)) => {
                kill(&sess.sh);
                return;
            }
            Some(FakeFault::Stall(..)) => {
                let t0 = Instant::now();
                while !sess.sh.stop.load(Ordering::Relaxed)
                    && t0.elapsed() < Duration::from_secs(600)
                {
                    thread::sleep(Duration::from_millis(20));
                }
                return;
            }
            _ => {}
        }
        let reply = match sess.handle(cmd, &payload) {
            Ok(r) => r,
            Err(_why) => return,
        };
        sess.sh.served.fetch_add(1, Ordering::Relaxed);
        if let Some(r) = reply {
            if let Some(FakeFault::ShortReply(..)) = fault {
                let mut out = (r.len() as u64).to_le_bytes().to_vec();
                out.extend_from_slice(&r[..r.len() / 2]);
                let _ = s.write_all(&out);
                return;
            }
            if send_reply(s, &r).is_err() {
                return;
            }
        } else if let Some(FakeFault::ShortReply(..)) = fault {
            return;
        }
    }
}

fn tensor_of(t: &RpcTensor) -> Result<Tensor, Fail> {
    let ty = tensor_type(t).map_err(|e| e.0)?;
    let mut ne = [1i64; MAX_DIMS];
    let mut nb = [0usize; MAX_DIMS];
    for d in 0..MAX_DIMS {
        ne[d] = i64::from(t.ne[d]);
        nb[d] = t.nb[d] as usize;
    }
    let mut x = Tensor::new(ty, ne);
    x.nb = nb;
    x.name = t.name_str();
    x.flags = TensorFlags {
        input: t.flags & flag::INPUT != 0,
        output: t.flags & flag::OUTPUT != 0,
        ..TensorFlags::default()
    };
    Ok(x)
}

impl Session {
    fn u32_arg(p: &[u8]) -> Result<u32, Fail> {
        Reader::new(p).u32().map_err(|e| e.0)
    }

    /// The buffer and offset of a tensor's `[data + offset, + len)`, which
    /// must lie in one of this session's buffers.
    fn locate(&self, t: &RpcTensor, offset: u64, len: u64) -> Result<TensorData, Fail> {
        let b = self
            .bufs
            .get(&t.buffer)
            .ok_or_else(|| format!("unknown buffer {:#x}", t.buffer))?;
        let size = b.mem.size() as u64;
        let start = t
            .data
            .checked_sub(b.base)
            .and_then(|o| o.checked_add(offset))
            .ok_or("data before the buffer")?;
        if start.checked_add(len).is_none_or(|e| e > size) {
            return Err("range past the buffer".into());
        }
        // the tensor itself must lie in the buffer (ggml asserts it)
        let nbytes = tensor_of(t)?.nbytes() as u64;
        if (t.data - b.base)
            .checked_add(nbytes)
            .is_none_or(|e| e > size)
        {
            return Err("tensor past the buffer".into());
        }
        Ok(TensorData {
            buffer: Arc::clone(&b.mem),
            offset: start as usize,
        })
    }

    fn handle(&mut self, cmd: Cmd, p: &[u8]) -> Result<Option<Vec<u8>>, Fail> {
        let o = &self.sh.opts;
        let dev_ok = |d: u32| {
            if d < o.devices {
                Ok(())
            } else {
                Err("no such device".to_string())
            }
        };
        Ok(match cmd {
            Cmd::Hello => {
                if p.len() != CONN_CAPS_SIZE {
                    return Err("HELLO size".into());
                }
                let mut r = vec![o.version.major, o.version.minor, o.version.patch, 0];
                r.extend_from_slice(&[0u8; CONN_CAPS_SIZE]);
                Some(r)
            }
            Cmd::DeviceCount => Some(o.devices.to_le_bytes().to_vec()),
            Cmd::GetAlignment => {
                dev_ok(Self::u32_arg(p)?)?;
                Some(o.alignment.to_le_bytes().to_vec())
            }
            Cmd::GetMaxSize => {
                dev_ok(Self::u32_arg(p)?)?;
                Some(u64::MAX.to_le_bytes().to_vec())
            }
            Cmd::GetDeviceMemory => {
                dev_ok(Self::u32_arg(p)?)?;
                let mut r = o.memory.0.saturating_sub(self.used).to_le_bytes().to_vec();
                r.extend_from_slice(&o.memory.1.to_le_bytes());
                Some(r)
            }
            Cmd::AllocBuffer => {
                let mut r = Reader::new(p);
                let dev = r.u32().map_err(|e| e.0)?;
                let size = r.u64().map_err(|e| e.0)?;
                dev_ok(dev)?;
                let mut out = vec![0u8; 16];
                if self.used.saturating_add(size) <= o.memory.1 {
                    if let Ok(mem) = HostBuffer::new(size as usize, BufferUsage::Compute) {
                        let h = self.next_handle;
                        self.next_handle += 1;
                        let base = self.next_base;
                        self.next_base += size.next_multiple_of(4096) + 4096;
                        self.used += size;
                        self.bufs.insert(
                            h,
                            FakeBuf {
                                base,
                                mem: Arc::new(mem),
                            },
                        );
                        out[..8].copy_from_slice(&h.to_le_bytes());
                        out[8..].copy_from_slice(&size.to_le_bytes());
                    }
                }
                Some(out)
            }
            Cmd::BufferGetBase => {
                let h = Reader::new(p).u64().map_err(|e| e.0)?;
                let b = self.bufs.get(&h).ok_or("unknown buffer")?;
                Some(b.base.to_le_bytes().to_vec())
            }
            Cmd::FreeBuffer => {
                let h = Reader::new(p).u64().map_err(|e| e.0)?;
                let b = self.bufs.remove(&h).ok_or("unknown buffer")?;
                self.used -= b.mem.size() as u64;
                self.stored.iter_mut().for_each(|g| *g = None);
                None
            }
            Cmd::BufferClear => {
                let mut r = Reader::new(p);
                let h = r.u64().map_err(|e| e.0)?;
                let v = r.u8().map_err(|e| e.0)?;
                let b = self.bufs.get(&h).ok_or("unknown buffer")?;
                b.mem
                    .write(0, &vec![v; b.mem.size()])
                    .map_err(|e| e.to_string())?;
                None
            }
            Cmd::SetTensor => {
                let mut r = Reader::new(p);
                let t = RpcTensor::decode(&mut r).map_err(|e| e.0)?;
                let cache_flag = r.u8().map_err(|e| e.0)?;
                let off = r.u64().map_err(|e| e.0)?;
                let data = r.rest();
                let d = self.locate(&t, off, data.len() as u64)?;
                d.buffer.write(d.offset, data).map_err(|e| e.to_string())?;
                if cache_flag != 0 && o.cache {
                    self.sh
                        .cache
                        .lock()
                        .insert(crate::hash::fnv1a(data), data.to_vec());
                }
                None
            }
            Cmd::SetTensorHash => {
                let mut r = Reader::new(p);
                let t = RpcTensor::decode(&mut r).map_err(|e| e.0)?;
                let off = r.u64().map_err(|e| e.0)?;
                let hash = r.u64().map_err(|e| e.0)?;
                let hit = if o.cache {
                    self.sh.cache.lock().get(&hash).cloned()
                } else {
                    None
                };
                match hit {
                    Some(data) => {
                        let d = self.locate(&t, off, data.len() as u64)?;
                        d.buffer.write(d.offset, &data).map_err(|e| e.to_string())?;
                        Some(vec![1])
                    }
                    None => Some(vec![0]),
                }
            }
            Cmd::GetTensor => {
                let mut r = Reader::new(p);
                let t = RpcTensor::decode(&mut r).map_err(|e| e.0)?;
                let off = r.u64().map_err(|e| e.0)?;
                let size = r.u64().map_err(|e| e.0)?;
                let d = self.locate(&t, off, size)?;
                let mut out = vec![0u8; size as usize];
                d.buffer
                    .read(d.offset, &mut out)
                    .map_err(|e| e.to_string())?;
                Some(out)
            }
            Cmd::MemsetTensor => {
                let mut r = Reader::new(p);
                let t = RpcTensor::decode(&mut r).map_err(|e| e.0)?;
                let off = r.u64().map_err(|e| e.0)?;
                let size = r.u64().map_err(|e| e.0)?;
                let v = r.u8().map_err(|e| e.0)?;
                let d = self.locate(&t, off, size)?;
                d.buffer
                    .write(d.offset, &vec![v; size as usize])
                    .map_err(|e| e.to_string())?;
                None
            }
            Cmd::CopyTensor => {
                let mut r = Reader::new(p);
                let src = RpcTensor::decode(&mut r).map_err(|e| e.0)?;
                let dst = RpcTensor::decode(&mut r).map_err(|e| e.0)?;
                let n = tensor_of(&src)?.nbytes() as u64;
                let s = self.locate(&src, 0, n)?;
                let d = self.locate(&dst, 0, n)?;
                let mut tmp = vec![0u8; n as usize];
                s.buffer
                    .read(s.offset, &mut tmp)
                    .map_err(|e| e.to_string())?;
                d.buffer.write(d.offset, &tmp).map_err(|e| e.to_string())?;
                Some(vec![1])
            }
            Cmd::InitTensor => None,
            Cmd::GetAllocSize => {
                let mut r = Reader::new(p);
                let dev = r.u32().map_err(|e| e.0)?;
                dev_ok(dev)?;
                let t = RpcTensor::decode(&mut r).map_err(|e| e.0)?;
                Some((tensor_of(&t)?.nbytes() as u64).to_le_bytes().to_vec())
            }
            Cmd::GraphCompute => {
                let wg = deserialize(p).map_err(|e| e.0)?;
                dev_ok(wg.device)?;
                let (g, nodes) = self.rebuild(&wg)?;
                self.cpu.compute(&g, &nodes).map_err(|e| e.to_string())?;
                self.stored[wg.device as usize] = Some((g, nodes));
                None
            }
            Cmd::GraphRecompute => {
                let dev = Self::u32_arg(p)?;
                dev_ok(dev)?;
                let (g, nodes) = self.stored[dev as usize]
                    .as_ref()
                    .ok_or("no stored graph")?;
                self.cpu.compute(g, nodes).map_err(|e| e.to_string())?;
                None
            }
        })
    }

    /// Our graph of a GRAPH_COMPUTE message: every tensor with its memory,
    /// ops read back from ggml's ordinals.
    fn rebuild(&self, wg: &crate::graph_wire::WireGraph) -> Result<(Graph, Vec<TensorId>), Fail> {
        let mut g = Graph::new();
        let mut ids: HashMap<u64, TensorId> = HashMap::new();
        let mut compute: HashMap<u64, bool> = HashMap::new();
        for t in &wg.tensors {
            compute.insert(t.id, t.flags & flag::COMPUTE != 0);
            if t.id == 0 || ids.contains_key(&t.id) {
                return Err("tensor id 0 or listed twice".into());
            }
            let mut x = tensor_of(t)?;
            x.op = opmap::decode(t.op, &t.op_params, i64::from(t.ne[0]))?;
            x.view_offs = t.view_offs as usize;
            if t.buffer != 0 || t.data != 0 {
                let n = x.nbytes() as u64;
                x.data = Some(self.locate(t, 0, n)?);
            }
            ids.insert(t.id, g.push(x));
        }
        for t in &wg.tensors {
            let me = ids[&t.id];
            let mut src: Vec<TensorId> = Vec::new();
            for &s in t.src.iter() {
                if s == 0 {
                    break;
                }
                src.push(*ids.get(&s).ok_or("unknown source id")?);
            }
            let view = match t.view_src {
                0 => None,
                v => Some(*ids.get(&v).ok_or("unknown view source id")?),
            };
            let x = g.tensor_mut(me);
            x.src = opmap::from_ggml_sources(&x.op, &src).into_iter().collect();
            x.view_src = view;
        }
        // as ggml's CPU backend: nodes without the compute flag are skipped
        let mut nodes = Vec::with_capacity(wg.nodes.len());
        for n in &wg.nodes {
            let id = *ids.get(n).ok_or("unknown node id")?;
            if compute.get(n).is_some_and(|&c| c) {
                nodes.push(id);
            }
        }
        if nodes.iter().any(|&n| g.tensor(n).data.is_none()) {
            return Err("a node without memory".into());
        }
        Ok((g, nodes))
    }
}
