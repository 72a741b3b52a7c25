//! Backend names as users type them (`--device`): `CPU`, `SIM0`, `SIM1`,
//! `CUDA0`, ...

use std::sync::Arc;

use ggml_core::{Backend, SimBackend, SimClock, SimProfile};

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
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            n_threads: 1,
            offload_min_batch: 32,
            sim_profile: None,
            sim_mem: None,
            sim_clock: None,
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
    Err(unknown(name))
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
            description: format!(
                "host memory and CPU threads; kernels: {}",
                ggml_core::quants::cpu_level_summary()
            ),
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
                description: {
                    let name = b.device_name().unwrap_or_else(|_| "CUDA device".into());
                    match ggml_cuda::nvrtc_description() {
                        Ok(nvrtc) => format!("{name}; kernels by {nvrtc}"),
                        Err(_) => name,
                    }
                },
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

/// `CUDA0` when the driver reports a CUDA device (without opening it).
pub fn first_cuda_device() -> Option<String> {
    match ggml_cuda::cuda_device_count() {
        Ok(n) if n > 0 => Some("CUDA0".into()),
        _ => None,
    }
}

fn unknown(name: &str) -> LlamaError {
    LlamaError::Invalid(format!(
        "unknown device '{name}' (available: CPU, SIM0, SIM1, ..., CUDA0, CUDA1, ...)"
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
