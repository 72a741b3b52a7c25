//! Backend names as users type them (`--device`): `CPU`, `SIM0`, `SIM1`,
//! `CUDA0`, ..., and `RPC0`, `RPC1`, ... for the devices of the `--rpc`
//! workers ([`rpc_devices`] connects them, once per process).

use std::sync::Arc;

use ggml_core::{Backend, BackendDevice, SimBackend, SimClock, SimProfile};

use crate::error::{LlamaError, Result};

/// Open the device backend `name` (`None` for `CPU`, which needs no device).
/// `offload_min_batch` is the smallest batch for which the device runs an op
/// whose weights are in host memory (llama.cpp's `GGML_OP_OFFLOAD_MIN_BATCH`).
pub fn open_device(
    name: &str,
    n_threads: usize,
    offload_min_batch: usize,
) -> Result<Option<Arc<dyn Backend>>> {
    open_device_with(
        name,
        &DeviceOptions {
            n_threads,
            offload_min_batch,
            ..DeviceOptions::default()
        },
    )
}

/// How to open a device.
#[derive(Clone, Debug)]
pub struct DeviceOptions {
    /// Threads of a sim device's kernels.
    pub n_threads: usize,
    /// Smallest batch for which the device runs an op whose weights are in
    /// host memory (`-nomb`).
    pub offload_min_batch: usize,
    /// The sim device's timing profile (default `pcie4-x16`); ignored by
    /// real devices.
    pub sim_profile: Option<SimProfile>,
    /// A sim device's memory capacity in bytes (`--sim-mem-mib`; `None` =
    /// unlimited); an error for a device that is not simulated.
    pub sim_mem: Option<usize>,
    /// The simulated clock a sim device joins (several sim devices of one
    /// run share one, [`open_devices`]); `None`: a clock of its own with
    /// `sim_profile`.
    pub sim_clock: Option<Arc<SimClock>>,
    /// The devices of the `--rpc` workers ([`rpc_devices`]), which the
    /// names `RPC0`, `RPC1`, ... pick from.
    pub rpc: Vec<Arc<ggml_rpc::RpcBackend>>,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            n_threads: 1,
            offload_min_batch: 32,
            sim_profile: None,
            sim_mem: None,
            sim_clock: None,
            rpc: Vec::new(),
        }
    }
}

/// [`open_device`], giving a sim device a memory capacity of `sim_mem`
/// bytes (`None` = unlimited).
pub fn open_device_with_memory(
    name: &str,
    n_threads: usize,
    offload_min_batch: usize,
    sim_mem: Option<usize>,
) -> Result<Option<Arc<dyn Backend>>> {
    open_device_with(
        name,
        &DeviceOptions {
            n_threads,
            offload_min_batch,
            sim_mem,
            ..DeviceOptions::default()
        },
    )
}

/// Open the device backend `name` with `opts` (`None` for `CPU`).
pub fn open_device_with(name: &str, opts: &DeviceOptions) -> Result<Option<Arc<dyn Backend>>> {
    let (n_threads, offload_min_batch, sim_mem) =
        (opts.n_threads, opts.offload_min_batch, opts.sim_mem);
    let upper = name.to_ascii_uppercase();
    if sim_mem.is_some() && !upper.starts_with("SIM") {
        return Err(LlamaError::Invalid(format!(
            "a simulated memory capacity applies to SIM devices only, not '{name}'"
        )));
    }
    if upper == "CPU" || upper == "NONE" {
        return Ok(None);
    }
    if let Some(n) = upper.strip_prefix("SIM") {
        let dev: usize = n.parse().map_err(|_| unknown(name))?;
        let mut b =
            SimBackend::new(dev, n_threads.max(1)).with_offload_min_batch(offload_min_batch as i64);
        if let Some(c) = &opts.sim_clock {
            b = b.with_clock(Arc::clone(c));
        } else if let Some(p) = &opts.sim_profile {
            b = b.with_clock(SimClock::new(p.clone()));
        }
        if let Some(bytes) = sim_mem {
            b = b.with_memory_capacity(bytes);
        }
        return Ok(Some(Arc::new(b)));
    }
    if let Some(n) = upper.strip_prefix("CUDA") {
        let dev: usize = n.parse().map_err(|_| unknown(name))?;
        return open_cuda(dev, offload_min_batch).map(Some);
    }
    if let Some(n) = upper.strip_prefix("RPC") {
        n.parse::<usize>().map_err(|_| unknown(name))?;
        return match opts.rpc.iter().find(|d| d.name() == upper) {
            Some(d) => Ok(Some(Arc::clone(d) as Arc<dyn Backend>)),
            None if opts.rpc.is_empty() => Err(LlamaError::Invalid(format!(
                "device '{name}' is a device of an RPC worker: give the workers with --rpc host:port[,host:port...] (ggml-rpc-server)"
            ))),
            None => Err(LlamaError::Invalid(format!(
                "unknown device '{name}': the --rpc workers have {}",
                opts.rpc
                    .iter()
                    .map(|d| d.name().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        };
    }
    Err(unknown(name))
}

/// The devices of the RPC workers at `servers` (`host:port`, in order),
/// named `RPC0`, `RPC1`, ... as llama.cpp numbers them. A process connects
/// to a list once and reuses the connection (a `ggml-rpc-server` serves
/// one client at a time; llama-bench runs many tests), connecting again
/// only after a fault ended it. Each worker first passes the probe graph
/// (`ggml_rpc::probe`). `GGML_RPC_TIMEOUT` (seconds) sets the timeout.
pub fn rpc_devices(
    servers: &[String],
    n_threads: usize,
    offload_min_batch: usize,
) -> Result<Vec<Arc<ggml_rpc::RpcBackend>>> {
    type Conns = Vec<(Vec<String>, Vec<Arc<ggml_rpc::RpcBackend>>)>;
    static CONNECTED: std::sync::Mutex<Conns> = std::sync::Mutex::new(Vec::new());
    if servers.is_empty() {
        return Ok(Vec::new());
    }
    let timeout = ggml_rpc::conn::timeout_from_env().map_err(LlamaError::Invalid)?;
    let mut done = CONNECTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    done.retain(|(_, devs)| devs.iter().all(|d| !d.conn().is_dead()));
    let devs = match done.iter().find(|(s, _)| s == servers) {
        Some((_, d)) => d.clone(),
        None => {
            let opts = ggml_rpc::RpcOptions {
                timeout,
                offload_min_batch: offload_min_batch as i64,
                probe: true,
                n_threads: n_threads.max(1),
            };
            let d = ggml_rpc::connect_devices(servers, &opts)?;
            done.push((servers.to_vec(), d.clone()));
            d
        }
    };
    for d in &devs {
        d.set_offload_min_batch(offload_min_batch as i64);
    }
    Ok(devs)
}

/// Open every device of a `--device A,B,...` list with `opts`, in order.
/// The simulated devices among them share one simulated clock (one
/// timeline, a link per device); a name listed twice, `CPU` inside a list
/// of several, or an unknown name is an error naming it. `CPU` (or `none`)
/// alone gives an empty list.
pub fn open_devices(names: &[String], opts: &DeviceOptions) -> Result<Vec<Arc<dyn Backend>>> {
    if let [one] = names {
        if one.eq_ignore_ascii_case("CPU") || one.eq_ignore_ascii_case("none") {
            return open_device_with(one, opts).map(|_| Vec::new());
        }
    }
    let mut clock: Option<Arc<SimClock>> = None;
    let mut out: Vec<Arc<dyn Backend>> = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let upper = name.trim().to_ascii_uppercase();
        if names[..i]
            .iter()
            .any(|n| n.trim().eq_ignore_ascii_case(&upper))
        {
            return Err(LlamaError::Invalid(format!(
                "device list {}: device '{name}' is listed twice",
                names.join(",")
            )));
        }
        if upper == "CPU" || upper == "NONE" || upper.is_empty() {
            return Err(LlamaError::Invalid(format!(
                "device list {}: '{name}' is not a device (the CPU always computes what no device holds; list devices only)",
                names.join(",")
            )));
        }
        let mut o = opts.clone();
        if upper.starts_with("SIM") {
            let c = clock.get_or_insert_with(|| {
                SimClock::new(
                    opts.sim_profile
                        .clone()
                        .unwrap_or_else(SimProfile::default_profile),
                )
            });
            o.sim_clock = Some(Arc::clone(c));
        }
        match open_device_with(name.trim(), &o)? {
            Some(d) => out.push(d),
            None => return Err(unknown(name)),
        }
    }
    Ok(out)
}

/// One device `--device` can name.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// The name to pass to `--device` (`CPU`, `SIM0`, `CUDA0`).
    pub name: String,
    /// What it is (`NVIDIA H200`, `host memory`, ...).
    pub description: String,
    /// Total and free memory in bytes, where known.
    pub memory: Option<(usize, usize)>,
}

/// The devices of this machine: the CPU, the simulated `SIM0`, and every
/// CUDA device the driver reports (none without a driver), with `why_no_cuda`
/// saying why there are none.
pub fn list_devices() -> (Vec<DeviceInfo>, Option<String>) {
    let mut v = vec![
        DeviceInfo {
            name: "CPU".into(),
            description: "host memory and CPU threads".into(),
            memory: None,
        },
        DeviceInfo {
            name: "SIM0".into(),
            description: "simulated device: CPU kernels, device memory semantics, counted copies (also SIM1, ...)".into(),
            memory: None,
        },
    ];
    let n = match ggml_cuda::cuda_device_count() {
        Ok(n) => n,
        Err(e) => return (v, Some(e.to_string())),
    };
    let mut why = (n == 0).then(|| "no CUDA device: the driver reports 0 devices".to_string());
    for i in 0..n {
        match ggml_cuda::CudaBackend::new(i) {
            Ok(b) => v.push(DeviceInfo {
                name: format!("CUDA{i}"),
                description: cuda_description(&b),
                memory: match (b.total_memory(), b.free_memory()) {
                    (Ok(t), Ok(f)) => Some((t, f)),
                    _ => None,
                },
            }),
            Err(e) => why = Some(format!("CUDA{i}: {e}")),
        }
    }
    (v, why)
}

/// What `--list-devices` says of an open CUDA device: its name, compute
/// capability, driver and the kernel image it loaded, e.g. `NVIDIA H200;
/// compute capability 9.0, CUDA driver 12.9; kernels: cubin sm_90 (shipped
/// sm_90.cubin.xz)`.
pub fn cuda_description(b: &ggml_cuda::CudaBackend) -> String {
    let name = b.device_name().unwrap_or_else(|_| "CUDA device".into());
    let cc = b
        .compute_capability()
        .map_or("?".into(), |(a, c)| format!("{a}.{c}"));
    let driver = b
        .driver_version()
        .map_or("?".into(), ggml_cuda::ptx_isa::driver_text);
    format!(
        "{name}; compute capability {cc}, CUDA driver {driver}; kernels: {}",
        b.kernel_image()
    )
}

/// The devices of RPC workers as `--list-devices` shows them: name, the
/// worker's endpoint, its memory.
pub fn list_rpc_devices(devices: &[Arc<ggml_rpc::RpcBackend>]) -> Vec<DeviceInfo> {
    devices
        .iter()
        .map(|d| DeviceInfo {
            name: d.name().to_string(),
            description: format!("RPC worker {}", d.endpoint()),
            memory: d.memory().map(|(free, total)| (total, free)),
        })
        .collect()
}

/// `CUDA0` when the driver reports a CUDA device (without opening it).
pub fn first_cuda_device() -> Option<String> {
    match ggml_cuda::cuda_device_count() {
        Ok(n) if n > 0 => Some("CUDA0".into()),
        _ => None,
    }
}

/// What `-fa auto` resolves to for `model` with a cache of K type `k` and
/// V type `v`: on where flash attention is needed (a quantized V cache) or
/// where a CUDA device holding the model's layers runs it for this cache
/// (llama.cpp resolves auto to on where the backend's flash attention
/// supports the case: its CUDA build does for an F16 cache); off on the
/// CPU and sim devices (their plain attention, as before).
pub fn flash_attn_auto(
    model: &crate::Model,
    k: ggml_core::GgmlType,
    v: ggml_core::GgmlType,
) -> bool {
    if v.is_quantized() {
        return true;
    }
    let hp = &model.hparams;
    let d_k = hp.n_embd_head_k.max(hp.n_lora_kv + hp.n_rot) as i64;
    let d_v = hp.n_embd_head_v.max(hp.n_lora_kv) as i64;
    let on_cuda = model.layers.iter().any(|l| {
        l.device
            .and_then(|d| model.devices.get(d))
            .is_some_and(|b| b.name().starts_with("CUDA"))
    });
    on_cuda && ggml_cuda::backend::flash_attn_cache_supported(k, v, d_k, d_v)
}

fn unknown(name: &str) -> LlamaError {
    LlamaError::Invalid(format!(
        "unknown device '{name}' (available: CPU, SIM0, SIM1, ..., CUDA0, CUDA1, ..., RPC0, RPC1, ... with --rpc)"
    ))
}

fn open_cuda(dev: usize, offload_min_batch: usize) -> Result<Arc<dyn Backend>> {
    let b = ggml_cuda::CudaBackend::new(dev)?.with_offload_min_batch(offload_min_batch as i64);
    Ok(Arc::new(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_or_fail_clearly() {
        assert!(open_device("CPU", 1, 32).unwrap().is_none());
        let sim = open_device_with_memory("SIM0", 1, 32, Some(1 << 20))
            .unwrap()
            .unwrap();
        assert_eq!(sim.memory(), Some((1 << 20, 1 << 20)));
        let e = open_device_with_memory("CPU", 1, 32, Some(1))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("SIM devices only"), "{e}");
        assert_eq!(open_device("sim1", 1, 32).unwrap().unwrap().name(), "SIM1");
        let e = open_device("GPU0", 1, 32).err().unwrap().to_string();
        assert!(e.contains("unknown device 'GPU0'"), "{e}");
        // without a CUDA driver this is an ordinary error naming the problem
        let two = open_devices(&["SIM0".into(), "sim1".into()], &DeviceOptions::default()).unwrap();
        assert_eq!(two.len(), 2);
        let (c0, c1) = (
            SimClock::of(two[0].as_ref()).unwrap(),
            SimClock::of(two[1].as_ref()).unwrap(),
        );
        assert!(
            Arc::ptr_eq(&c0, &c1),
            "sim devices of one list share a clock"
        );
        let e = open_devices(&["SIM0".into(), "SIM0".into()], &DeviceOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("'SIM0' is listed twice"), "{e}");
        let e = open_devices(&["SIM0".into(), "CPU".into()], &DeviceOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("'CPU' is not a device"), "{e}");
        let e = open_devices(&["SIM0".into(), "XPU1".into()], &DeviceOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unknown device 'XPU1'"), "{e}");
        assert!(open_devices(&["cpu".into()], &DeviceOptions::default())
            .unwrap()
            .is_empty());
        if ggml_cuda::unavailable_reason().is_some() {
            let e = open_device("CUDA0", 1, 32).err().unwrap().to_string();
            assert!(e.contains("no CUDA device"), "{e}");
        }
    }
}
