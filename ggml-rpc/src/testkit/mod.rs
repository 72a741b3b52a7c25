//! Test doubles for the protocol (feature `testkit`): a fake worker that
//! computes with this engine's CPU backend ([`fake::FakeWorker`]: any
//! HELLO version, injected faults, command counts) and a fault-injecting
//! proxy in front of any worker ([`proxy::FaultProxy`]). CI runs the
//! protocol against them where no `ggml-rpc-server` is built; the tests
//! against the stock server use the proxy too.

pub mod fake;
pub mod proxy;

pub use fake::{FakeFault, FakeOptions, FakeWorker};
pub use proxy::{FaultProxy, ProxyFault};

/// `y = (a + b) * a` on `be` with `a = [1, 2, 3, 4]`, `b = [0.5, 0.5, -1,
/// -1]`, computed twice (the second time a GRAPH_RECOMPUTE): `y`, which is
/// `[1.5, 5, 6, 12]`, or the fault on the way.
pub fn small_graph(be: &dyn ggml_core::Backend) -> Result<Vec<f32>, ggml_core::BackendError> {
    use ggml_core::tensor::TensorData;
    let mut g = ggml_core::Graph::new();
    let a = g.new_tensor_1d(ggml_core::GgmlType::F32, 4);
    let b = g.new_tensor_1d(ggml_core::GgmlType::F32, 4);
    let s = g.add(a, b);
    let y = g.mul(s, a);
    g.build_forward_expand(y);
    let buf = be.alloc_buffer(4 * 256, ggml_core::BufferUsage::Compute)?;
    for (k, t) in [a, b, s, y].into_iter().enumerate() {
        g.tensor_mut(t).data = Some(TensorData {
            buffer: std::sync::Arc::clone(&buf),
            offset: k * 256,
        });
    }
    g.write_f32(a, &[1., 2., 3., 4.])?;
    g.write_f32(b, &[0.5, 0.5, -1., -1.])?;
    let nodes = g.nodes().to_vec();
    be.compute(&g, &nodes)?;
    be.compute(&g, &nodes)?;
    g.read_f32(y)
}

/// [`small_graph`] on `be`, a device behind `proxy`: right once as it is,
/// then once more with `fault` armed. The error that gives (its text) and
/// how long it took to come; `Err` says what went otherwise (a wrong `y`,
/// a first compute that failed, no error with the fault armed).
pub fn small_graph_fault(
    be: &dyn ggml_core::Backend,
    proxy: &FaultProxy,
    fault: ProxyFault,
) -> Result<(String, std::time::Duration), String> {
    match small_graph(be) {
        Ok(y) if y == [1.5, 5.0, 6.0, 12.0] => {}
        Ok(y) => return Err(format!("y = {y:?} before the fault, not [1.5, 5, 6, 12]")),
        Err(e) => return Err(format!("before the fault: {e}")),
    }
    proxy.arm(fault);
    let t0 = std::time::Instant::now();
    match small_graph(be) {
        Ok(y) => Err(format!("{fault:?}: no error, y = {y:?}")),
        Err(e) => Ok((e.to_string(), t0.elapsed())),
    }
}

/// The stock `ggml-rpc-server`, where it is built: `GGML_RPC_SERVER`
/// (a path), else the llama.cpp reference build of
/// `../shared/tools/llama-cpp-ref.sh` in `$HOME/.cache/llama-cpp-ref`.
/// `Err` says why not, for a test's `skipped:` line.
pub fn stock_server() -> Result<std::path::PathBuf, String> {
    if let Some(p) = std::env::var_os("GGML_RPC_SERVER").filter(|p| !p.is_empty()) {
        let p = std::path::PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("GGML_RPC_SERVER={} is not a file", p.display()))
        };
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    let p = std::path::Path::new(&home).join(
        ".cache/llama-cpp-ref/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/ggml-rpc-server",
    );
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "no stock ggml-rpc-server: set GGML_RPC_SERVER=/path, or build llama.cpp with ../shared/tools/llama-cpp-ref.sh (looked for {})",
            p.display()
        ))
    }
}

/// A stock `ggml-rpc-server -d CPU` on a free port of 127.0.0.1, killed on
/// drop.
pub struct StockWorker {
    child: std::process::Child,
    port: u16,
    cache_dir: Option<std::path::PathBuf>,
}

impl StockWorker {
    /// Start one with `threads` CPU threads (and `-c` when `cache`, its
    /// cache in a temporary folder removed on drop), and wait until it
    /// accepts connections.
    pub fn start(threads: usize, cache: bool) -> Result<StockWorker, String> {
        let bin = stock_server()?;
        for _ in 0..20 {
            let port = {
                let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
                l.local_addr().map_err(|e| e.to_string())?.port()
            };
            let mut cmd = std::process::Command::new(&bin);
            cmd.args(["-d", "CPU", "-H", "127.0.0.1", "-p", &port.to_string()])
                .args(["-t", &threads.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(match std::env::var_os("GGML_RPC_SERVER_LOG") {
                    Some(p) => std::fs::File::create(p)
                        .map(std::process::Stdio::from)
                        .unwrap_or_else(|_| std::process::Stdio::null()),
                    None => std::process::Stdio::null(),
                });
            let cache_dir = cache.then(|| {
                std::env::temp_dir().join(format!("ggml-rpc-cache-{}-{port}", std::process::id()))
            });
            if let Some(d) = &cache_dir {
                cmd.arg("-c").env("LLAMA_CACHE", d);
            }
            let mut child = cmd.spawn().map_err(|e| format!("{}: {e}", bin.display()))?;
            let t0 = std::time::Instant::now();
            while t0.elapsed() < std::time::Duration::from_secs(10) {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken meanwhile: try another
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    // that probe connection counts as a client: it closed.
                    // The listener may be another test's worker that took
                    // the port between our probe bind and the spawn: ours
                    // then fails to bind and exits, so make sure it lives
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    if let Ok(Some(_)) = child.try_wait() {
                        break;
                    }
                    return Ok(StockWorker {
                        child,
                        port,
                        cache_dir,
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        Err("ggml-rpc-server did not start listening".into())
    }

    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kill the process (as a worker that dies mid-run).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for StockWorker {
    fn drop(&mut self) {
        self.kill();
        if let Some(d) = &self.cache_dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
