//! What the tools share: the placement, batch and expert cache flag
//! groups (their spellings, help and parsers are entries of
//! [`crate::flags::table`]), model loading with progress, error reporting.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use ggml_core::gguf::LoadMode;
use ggml_core::{Backend, BackendDevice};
use llama::moe_cache::host::{self as host_cache, HostCacheParams};
use llama::moe_cache::{CacheSize, MoeCacheParams, PolicyKind};
use llama::placement::{Placement, SplitMode, Target};
use llama::{ContextParams, Model, ModelParams};

use crate::flags::FlashAttn;
use crate::progress::Progress;

/// Prints `line` on stderr the first time this process asks (a tool that
/// checks its flags before running, as llama-bench does every test's, then
/// applies them, warns once).
fn warn_once(line: &str) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !seen.iter().any(|l| l == line) {
        eprintln!("{line}");
        seen.push(line.to_string());
    }
}

/// `-ts` values fitted to the device list as llama.cpp does (it keeps a
/// share for every possible device): values past the last device are
/// dropped, missing ones are 0, and a split left with no share (or no
/// device) is no split, so the layers go by free memory. The note says what
/// changed, for a warning; `None` when there is one value per device.
pub fn split_for_devices(mut v: Vec<f32>, devices: &[String]) -> (Vec<f32>, Option<String>) {
    let n = devices.len();
    if v.len() == n {
        return (v, None);
    }
    let given = v.len();
    let s = |k: usize| if k == 1 { "" } else { "s" };
    let list = if n == 0 {
        "none given".to_string()
    } else {
        devices.join(",")
    };
    let mut note = format!(
        "{given} value{} for {n} device{} ({list}): ",
        s(given),
        s(n)
    );
    if given > n {
        note.push_str(&format!("the last {} ignored", given - n));
        v.truncate(n);
    } else {
        note.push_str(&format!("the missing {} taken as 0", n - given));
        v.resize(n, 0.0);
    }
    if v.iter().all(|&x| x == 0.0) {
        note.push_str(", and with no share left the layers are split by free memory");
        v.clear();
    }
    note.push_str(", as llama.cpp does");
    (v, Some(note))
}

/// Where weights go: llama.cpp's placement flags.
#[derive(Args, Debug, Clone, Default)]
pub struct PlacementArgs {
    /// `-dev`: the devices for offloaded weights (`SIM0,SIM1`, `CUDA0`).
    #[arg(long)]
    pub device: Option<String>,

    /// `--rpc`: the RPC servers (`host:port,...`) whose devices are
    /// `RPC0`, `RPC1`, ...
    #[arg(long)]
    pub rpc: Option<String>,

    /// `-sm`: how layers split across the devices (`none`, `layer`).
    #[arg(long)]
    pub split_mode: Option<String>,

    /// `-ts`: each device's share of the offloaded layers (`3,1`).
    #[arg(long)]
    pub tensor_split: Option<String>,

    /// `-mg`: the device of every offloaded layer with `-sm none`.
    #[arg(long)]
    pub main_gpu: Option<i64>,

    /// `-ngl`: layers on the device (-1: all).
    #[arg(long)]
    pub n_gpu_layers: Option<i64>,

    /// `-ot`: tensor placement rules, `PATTERN=BACKEND,...` each.
    #[arg(long)]
    pub override_tensor: Vec<String>,

    /// `-cmoe`: every expert weight in host memory.
    #[arg(long)]
    pub cpu_moe: bool,

    /// `-ncmoe`: the expert weights of the first N layers in host memory.
    #[arg(long)]
    pub n_cpu_moe: Option<usize>,

    /// `--no-expert-copy`: whole expert tensors copied (for comparison).
    #[arg(long)]
    pub no_expert_copy: bool,

    /// `-nomb`: the smallest batch for which the device runs an op whose
    /// weights are in host memory.
    #[arg(long)]
    pub offload_min_batch: usize,

    /// `--sim-profile`: the sim device's timing profile (a preset or a
    /// JSON file).
    #[arg(long)]
    pub sim_profile: Option<String>,

    /// `--sim-mem-mib`: the memory of a simulated device, MiB.
    #[arg(long)]
    pub sim_mem_mib: Option<String>,

    /// `--load-mode`: how the model file is read.
    #[arg(long)]
    pub load_mode: LoadMode,

    /// Not a flag: map the file without reading it up front (the host
    /// expert cache reads the experts; see [`MoeCacheArgs::host_cache_load_mode`]).
    #[arg(skip)]
    pub lazy_map: bool,

    /// `--no-host`: host weights not page-locked for the device.
    #[arg(long)]
    pub no_host: bool,
}

impl PlacementArgs {
    /// The `--device` list: names in order (`CPU` or `none` alone: an
    /// empty list; no `--device`: empty). An empty entry, a name listed
    /// twice or `CPU` inside a list is an error naming it.
    pub fn device_names(&self) -> Result<Vec<String>> {
        let Some(arg) = &self.device else {
            return Ok(Vec::new());
        };
        parse_device_list(arg)
    }

    /// The devices a run places on: the `--device` list, or with `--rpc`
    /// and no `--device` every RPC worker's device (connecting to them).
    pub fn planned_device_names(&self) -> Result<Vec<String>> {
        if self.device.is_none() && self.rpc.is_some() {
            return Ok(self
                .rpc_devices(1)?
                .iter()
                .map(|d| d.name().to_string())
                .collect());
        }
        self.device_names()
    }

    /// The placement rules on `devices` (the `--device` list as opened):
    /// checks `-ot` syntax, regexes and backend names, and the split flags
    /// `-sm`, `-ts`, `-mg` against the device list.
    pub fn placement(&self, devices: &[String]) -> Result<Placement> {
        let list = || devices.iter().map(|d| format!(", {d}")).collect::<String>();
        let mut overrides = Vec::new();
        for arg in &self.override_tensor {
            let rules =
                Placement::parse_overrides(arg).map_err(|e| anyhow::anyhow!("-ot {arg}: {e}"))?;
            for mut r in rules {
                let be = r.backend.to_ascii_uppercase();
                r.backend = if be == "CPU" {
                    "CPU".into()
                } else if let Some(d) = devices.iter().find(|d| d.eq_ignore_ascii_case(&be)) {
                    d.clone()
                } else {
                    bail!(
                        "-ot {arg}: backend '{}' does not exist or is not in use (available: CPU{})",
                        r.backend,
                        list()
                    );
                };
                overrides.push(r);
            }
        }
        let split_mode = match &self.split_mode {
            Some(m) => m
                .parse()
                .map_err(|e: String| anyhow::anyhow!("-sm {m}: {e}"))?,
            None => SplitMode::Layer,
        };
        let tensor_split = match &self.tensor_split {
            Some(ts) => {
                let v = Placement::parse_tensor_split(ts)
                    .map_err(|e| anyhow::anyhow!("-ts {ts}: {e}"))?;
                let (v, note) = split_for_devices(v, devices);
                if let Some(note) = note {
                    warn_once(&format!("warning: -ts {ts}: {note}"));
                }
                v
            }
            None => Vec::new(),
        };
        let main_gpu = match self.main_gpu {
            None => 0,
            Some(mg) => match usize::try_from(mg) {
                Ok(i) if i < devices.len().max(1) => i,
                _ => bail!(
                    "-mg {mg}: no such device: give an index into --device ({})",
                    if devices.is_empty() {
                        "none given: 0 only".to_string()
                    } else {
                        format!("0..{}: {}", devices.len() - 1, devices.join(","))
                    }
                ),
            },
        };
        let p = Placement {
            devices: devices.to_vec(),
            split_mode,
            tensor_split,
            main_gpu,
            n_gpu_layers: self.n_gpu_layers.and_then(|n| usize::try_from(n).ok()),
            overrides,
            cpu_moe: self.cpu_moe,
            n_cpu_moe: self.n_cpu_moe.unwrap_or(0),
        };
        p.check().map_err(|e| anyhow::anyhow!("--device: {e}"))?;
        Ok(p)
    }

    /// The `--rpc` servers (empty without `--rpc`).
    pub fn rpc_servers(&self) -> Result<Vec<String>> {
        match &self.rpc {
            None => Ok(Vec::new()),
            Some(list) => parse_rpc_servers(list).map_err(|e| anyhow::anyhow!(e)),
        }
    }

    /// The devices of the `--rpc` workers (connected once per process);
    /// none without `--rpc`.
    pub fn rpc_devices(&self, n_threads: usize) -> Result<Vec<Arc<ggml_rpc::RpcBackend>>> {
        let servers = self.rpc_servers()?;
        llama::device::rpc_devices(&servers, n_threads, self.offload_min_batch)
            .map_err(|e| anyhow::anyhow!("--rpc {}: {e}", servers.join(",")))
    }

    /// Open the `--device` backends, in order (none for `CPU` or no
    /// `--device`; with `--rpc` and no `--device`, every RPC device);
    /// simulated devices share one simulated clock.
    pub fn open_devices(&self, n_threads: usize) -> Result<Vec<Arc<dyn Backend>>> {
        let sim_mem = self.sim_mem_bytes()?;
        let rpc = self.rpc_devices(n_threads)?;
        if self.device.is_none() && !rpc.is_empty() {
            if self.sim_profile.is_some() || sim_mem.is_some() {
                bail!("--sim-profile and --sim-mem-mib apply to a simulated device: give --device SIM0 too");
            }
            return Ok(rpc.into_iter().map(|d| d as Arc<dyn Backend>).collect());
        }
        let Some(arg) = &self.device else {
            if self.sim_profile.is_some() {
                bail!("--sim-profile: needs a simulated device (--device SIM0)");
            }
            if sim_mem.is_some() {
                bail!("--sim-mem-mib applies to a simulated device: give --device SIM0 too");
            }
            return Ok(Vec::new());
        };
        let names = parse_device_list(arg)?;
        let not_sim = names
            .iter()
            .find(|n| !n.to_ascii_uppercase().starts_with("SIM"));
        let all_cpu = names.is_empty();
        if let (Some(_), true) = (sim_mem, all_cpu) {
            bail!("--sim-mem-mib applies to a simulated device: give --device SIM0 too");
        }
        if let (Some(_), Some(name)) = (sim_mem, not_sim) {
            bail!("--sim-mem-mib applies to simulated devices (SIM0, ...), not --device {name}");
        }
        let sim_profile = match &self.sim_profile {
            Some(spec) => {
                if all_cpu {
                    bail!("--sim-profile: needs a simulated device (--device SIM0)");
                }
                if let Some(name) = not_sim {
                    bail!(
                        "--sim-profile: device {name} is not a simulated device (SIM0, SIM1, ...)"
                    );
                }
                Some(
                    ggml_core::SimProfile::from_name_or_file(spec)
                        .map_err(|e| anyhow::anyhow!("--sim-profile {e}"))?,
                )
            }
            None => None,
        };
        let opts = llama::device::DeviceOptions {
            n_threads,
            offload_min_batch: self.offload_min_batch,
            sim_profile,
            sim_mem,
            sim_clock: None,
            rpc,
        };
        if all_cpu {
            // `--device CPU`: checks the flags against the CPU as before
            return llama::device::open_device_with(arg.trim(), &opts)
                .map(|_| Vec::new())
                .map_err(|e| anyhow::anyhow!("--device {arg}: {e}"));
        }
        llama::device::open_devices(&names, &opts)
            .map_err(|e| anyhow::anyhow!("--device {arg}: {e}"))
    }

    /// `--sim-mem-mib` in bytes; errs on anything but a positive number.
    pub fn sim_mem_bytes(&self) -> Result<Option<usize>> {
        let Some(v) = &self.sim_mem_mib else {
            return Ok(None);
        };
        match v.trim().parse::<f64>() {
            Ok(m) if m.is_finite() && m > 0.0 => Ok(Some((m * 1048576.0) as usize)),
            _ => bail!("--sim-mem-mib {v}: give the device's memory in MiB, a number > 0"),
        }
    }
}

/// Parse a `--rpc host:port[,host:port...]` list.
pub fn parse_rpc_servers(list: &str) -> std::result::Result<Vec<String>, String> {
    ggml_rpc::parse_servers(list)
}

/// Parse a `--device` list: `A,B,...` (llama.cpp's `,`; `/` also, as
/// llama-bench's device sets); `CPU` or `none` alone is the empty list.
pub fn parse_device_list(arg: &str) -> Result<Vec<String>> {
    let t = arg.trim();
    if t.eq_ignore_ascii_case("cpu") || t.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut out: Vec<String> = Vec::new();
    for part in t.split([',', '/']) {
        let name = part.trim();
        if name.is_empty() {
            bail!("--device {arg}: an empty device name in the list");
        }
        if name.eq_ignore_ascii_case("cpu") || name.eq_ignore_ascii_case("none") {
            bail!("--device {arg}: '{name}' is not a device (the CPU computes what no device holds; list devices only)");
        }
        if out.iter().any(|o| o.eq_ignore_ascii_case(name)) {
            bail!("--device {arg}: device '{name}' is listed twice");
        }
        out.push(name.to_ascii_uppercase());
    }
    Ok(out)
}

/// The device cache of host experts: `--moe-cache-mib`, `--moe-cache-policy`,
/// `--moe-cache-max-batch`, and the hybrid experts.
#[derive(Args, Debug, Clone)]
pub struct MoeCacheArgs {
    /// `--moe-cache-mib`: the cache, MiB per device (`N`, `auto`, `0`; one
    /// for all devices or one per device; llama-bench: tests).
    #[arg(long)]
    pub moe_cache_mib: Vec<String>,

    /// `--moe-cache-policy`: the eviction policy (`lru`, `slru`, `lrfu`,
    /// `hlfu`).
    #[arg(long)]
    pub moe_cache_policy: String,

    /// `--moe-cache-max-batch`: the largest ubatch that uses the cache.
    #[arg(long)]
    pub moe_cache_max_batch: usize,

    /// `--moe-cache-cpu-share`: the share of the misses computed on the
    /// CPU (`auto` or 0..1).
    #[arg(long)]
    pub moe_cache_cpu_share: String,

    /// `--moe-hybrid`: hybrid experts `on` or `off`.
    #[arg(long)]
    pub moe_hybrid: String,

    /// `--moe-cache-alias`: the compute alias `on` or `off`.
    #[arg(long)]
    pub moe_cache_alias: String,

    /// `--moe-host-cache-mib`: the host expert cache (`N`, `auto`, `0`;
    /// absent: on, as `auto`, only where the file does not fit in memory).
    #[arg(long)]
    pub moe_host_cache_mib: Option<String>,

    /// `--moe-host-cache-policy`: the host cache's eviction policy.
    #[arg(long)]
    pub moe_host_cache_policy: String,
}

impl MoeCacheArgs {
    /// Whether the compute alias is on (`--moe-cache-alias`).
    pub fn alias(&self) -> Result<bool> {
        llama::moe_cache::alias::parse_alias(&self.moe_cache_alias)
            .map_err(|e| anyhow::anyhow!("--moe-cache-alias {}: {e}", self.moe_cache_alias))
    }

    /// Hybrid experts as `--moe-cache-cpu-share` and `--moe-hybrid` say
    /// (`None`: off).
    pub fn hybrid(&self) -> Result<Option<llama::moe_cache::hybrid::CpuShare>> {
        let on = llama::moe_cache::hybrid::parse_switch(&self.moe_hybrid)
            .map_err(|e| anyhow::anyhow!("--moe-hybrid {}: {e}", self.moe_hybrid))?;
        let share = self.moe_cache_cpu_share.parse().map_err(|e| {
            anyhow::anyhow!("--moe-cache-cpu-share {}: {e}", self.moe_cache_cpu_share)
        })?;
        Ok(on.then_some(share))
    }
}

impl MoeCacheArgs {
    /// Set `placement`'s load mode for the host expert cache before the
    /// model at `path` loads ([`host_cache_load_mode`] of
    /// `--moe-host-cache-mib`).
    pub fn host_cache_load_mode(&self, placement: &mut PlacementArgs, path: Option<&Path>) {
        host_cache_load_mode(self.moe_host_cache_mib.as_deref(), placement, path)
    }

    /// The host expert cache for `model` and the one line to print when
    /// the default turned it on ([`host_cache_for`] of
    /// `--moe-host-cache-mib`, `--moe-host-cache-policy`).
    pub fn host_cache(&self, model: &Model) -> Result<(HostCacheParams, Option<String>)> {
        host_cache_for(
            self.moe_host_cache_mib.as_deref(),
            &self.moe_host_cache_policy,
            model,
        )
    }
}

/// Set `placement`'s load mode for the host expert cache before the model
/// at `path` loads: with `--moe-host-cache-mib` (`mib`) given (not 0), or
/// without it where the default turns the cache on (a CPU-only run whose
/// file does not fit in the memory available), `auto` becomes a mapping
/// that reads no page up front (the experts stay in the file and are read
/// from it on a miss); other modes are kept.
pub fn host_cache_load_mode(mib: Option<&str>, placement: &mut PlacementArgs, path: Option<&Path>) {
    let on = match mib {
        Some(v) => v.parse::<CacheSize>().is_ok_and(|s| s != CacheSize::Off),
        None => {
            placement.device.is_none()
                && placement.rpc.is_none()
                && path
                    .and_then(|p| std::fs::metadata(p).ok())
                    .zip(ggml_core::gguf::available_memory())
                    .is_some_and(|(m, a)| host_cache::does_not_fit(m.len(), a))
        }
    };
    if on && placement.load_mode == LoadMode::Auto {
        placement.load_mode = LoadMode::Mmap;
        placement.lazy_map = true;
    }
}

/// The host expert cache for `model` (`--moe-host-cache-mib` `mib`,
/// `--moe-host-cache-policy` `policy`), and the one line to print when the
/// default turned it on. Without the flag it is on, as `auto`, only where
/// the run is CPU-only, the file does not fit in the memory available
/// ([`ggml_core::gguf::available_memory`]: `MemAvailable`, or the memory
/// cgroup's limit) and the file is mapped (the load mode that `auto` picks
/// then).
pub fn host_cache_for(
    mib: Option<&str>,
    policy: &str,
    model: &Model,
) -> Result<(HostCacheParams, Option<String>)> {
    let policy: PolicyKind = policy
        .parse()
        .map_err(|e| anyhow::anyhow!("--moe-host-cache-policy {policy}: {e}"))?;
    if let Some(v) = mib {
        let size: CacheSize = v
            .parse()
            .map_err(|e| anyhow::anyhow!("--moe-host-cache-mib {v}: {e}"))?;
        return Ok((HostCacheParams { size, policy }, None));
    }
    let off = HostCacheParams {
        size: CacheSize::Off,
        policy,
    };
    let file = model.file.bytes().len() as u64;
    let Some(avail) = ggml_core::gguf::available_memory() else {
        return Ok((off, None));
    };
    if !model.devices.is_empty()
        || !host_cache::does_not_fit(file, avail)
        || !model.file.bytes().is_mmap()
    {
        return Ok((off, None));
    }
    let budget = host_cache::auto_budget(model, avail);
    let line = format!(
        "the model file ({}) does not fit in the {} of memory available{}: mapped (-lm mmap) with a host expert cache of {} read from disk (--moe-host-cache-mib auto; 0 turns it off)",
        fmt_bytes(file as f64),
        fmt_bytes(avail as f64),
        if ggml_core::gguf::cgroup_memory_left().is_some_and(|c| c <= avail) {
            " (the memory cgroup's limit)"
        } else {
            ""
        },
        fmt_bytes(budget as f64)
    );
    Ok((
        HostCacheParams {
            size: CacheSize::Auto,
            policy,
        },
        Some(line),
    ))
}

impl MoeCacheArgs {
    /// The cache settings for one `--moe-cache-mib` value; `--no-expert-copy`
    /// (whole-tensor copies, for comparison) turns the cache off.
    pub fn params_for(&self, mib: &str, placement: &PlacementArgs) -> Result<MoeCacheParams> {
        let size: CacheSize = mib
            .parse()
            .map_err(|e| anyhow::anyhow!("--moe-cache-mib {mib}: {e}"))?;
        let policy: PolicyKind = self
            .moe_cache_policy
            .parse()
            .map_err(|e| anyhow::anyhow!("--moe-cache-policy {}: {e}", self.moe_cache_policy))?;
        if self.moe_cache_max_batch == 0 {
            bail!("--moe-cache-max-batch must be at least 1");
        }
        Ok(MoeCacheParams {
            size: if placement.no_expert_copy {
                CacheSize::Off
            } else {
                size
            },
            policy,
            max_batch: self.moe_cache_max_batch,
        })
    }

    /// Every `--moe-cache-mib` value's settings (checks all of them).
    pub fn all_params(&self, placement: &PlacementArgs) -> Result<Vec<MoeCacheParams>> {
        if self.moe_cache_mib.is_empty() {
            bail!("--moe-cache-mib needs a value");
        }
        self.moe_cache_mib
            .iter()
            .map(|m| self.params_for(m, placement))
            .collect()
    }

    /// The settings of `--moe-cache-mib N` (one size for every device) or
    /// `--moe-cache-mib A,B` (one size per `--device`): the settings (of
    /// the first size) and, for a list, every device's size; a list whose
    /// length is not the device count is an error naming both.
    pub fn params(&self, placement: &PlacementArgs) -> Result<MoeCacheParams> {
        self.device_params(placement).map(|(p, _)| p)
    }

    /// [`MoeCacheArgs::params`] with the per-device sizes
    /// ([`llama::MoeParams::cache_sizes`]; empty for one size).
    pub fn device_params(
        &self,
        placement: &PlacementArgs,
    ) -> Result<(MoeCacheParams, Vec<CacheSize>)> {
        let all = self.all_params(placement)?;
        match all.as_slice() {
            [p] => Ok((*p, Vec::new())),
            [first, ..] => {
                let devices = placement.planned_device_names()?;
                if devices.len() != all.len() {
                    bail!(
                        "--moe-cache-mib {}: {} sizes for {} device{} ({}): give one size for all, or one per --device",
                        self.moe_cache_mib.join(","),
                        all.len(),
                        devices.len(),
                        if devices.len() == 1 { "" } else { "s" },
                        if devices.is_empty() {
                            "none given".to_string()
                        } else {
                            devices.join(",")
                        }
                    );
                }
                Ok((*first, all.iter().map(|p| p.size).collect()))
            }
            [] => bail!("--moe-cache-mib needs a value"),
        }
    }
}

/// Batch sizes: llama.cpp's `-b` and `-ub`, and flash attention.
#[derive(Args, Debug, Clone)]
pub struct BatchArgs {
    /// `-b`: the logical maximum batch size.
    #[arg(long)]
    pub batch_size: usize,

    /// `-ub`: the physical maximum batch size.
    #[arg(long)]
    pub ubatch_size: usize,

    /// `-fa`: flash attention.
    #[arg(long)]
    pub flash_attn: FlashAttn,
}

impl BatchArgs {
    /// Errs unless both sizes are at least 1.
    pub fn check(&self) -> Result<()> {
        if self.batch_size == 0 || self.ubatch_size == 0 {
            bail!("-b and -ub must be at least 1");
        }
        Ok(())
    }

    /// Context parameters with these batch sizes, `n_ctx` cells, `n_threads`
    /// threads and the expert copy policy unless `--no-expert-copy`
    /// (`--offload-min-batch` reaches the device through `open_device`).
    pub fn context_params(
        &self,
        n_ctx: usize,
        n_threads: usize,
        placement: &PlacementArgs,
    ) -> ContextParams {
        ContextParams {
            n_ctx,
            n_batch: self.batch_size,
            n_ubatch: self.ubatch_size,
            n_threads,
            flash_attn: self.flash_attn.is_on(),
            moe: llama::MoeParams {
                expert_copy: !placement.no_expert_copy,
                ..Default::default()
            },
            ..ContextParams::default()
        }
    }
}

/// Check that a model path names a readable file before opening it, so the
/// message is about the file rather than about GGUF parsing.
pub fn check_model_path(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => bail!("model '{}' is a directory, not a GGUF file", path.display()),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("model file '{}' not found", path.display())
        }
        Err(e) => bail!("cannot read model file '{}': {e}", path.display()),
    }
}

/// A loaded model and how long it took.
pub struct Loaded {
    /// The model.
    pub model: Arc<Model>,
    /// Seconds spent in `Model::load`.
    pub load_s: f64,
    /// The file.
    pub path: PathBuf,
}

/// Load `path` (or the embedded default model when `None`) with the
/// placement flags; progress on stderr.
pub fn load_model(
    tool: &str,
    path: Option<&Path>,
    placement: &PlacementArgs,
    n_threads: usize,
) -> Result<Loaded> {
    // flags first: a bad flag fails before any file work
    let wants_device = placement.n_gpu_layers.is_some_and(|n| n != 0)
        || placement.cpu_moe
        || placement.n_cpu_moe.is_some_and(|n| n > 0);
    let mut devices = placement.open_devices(n_threads)?;
    let mut defaulted = false;
    if devices.is_empty() && placement.device.is_none() && wants_device {
        // as llama.cpp: the first CUDA device when there is one
        if let Some(d) = crate::devices::default_gpu() {
            let chosen = PlacementArgs {
                device: Some(d.clone()),
                ..placement.clone()
            };
            devices = chosen.open_devices(n_threads)?;
            defaulted = !devices.is_empty();
            if defaulted {
                eprintln!("{tool}: no --device given: using {d}");
            }
        }
    }
    let dev_names: Vec<String> = devices.iter().map(|d| d.name().to_string()).collect();
    let rules = placement.placement(&dev_names)?;
    let path = match path {
        Some(p) => {
            check_model_path(p)?;
            p.to_path_buf()
        }
        None => crate::default_model::ensure_default_model(tool)?,
    };
    if devices.is_empty() && wants_device && !defaulted {
        eprintln!("{tool}: note: no --device given and no CUDA device found: the CPU runs everything (-ngl/--cpu-moe have no effect)");
    }
    let bar = Progress::new("loading");
    let progress = std::rc::Rc::new(std::cell::RefCell::new(bar));
    let p2 = std::rc::Rc::clone(&progress);
    let params = ModelParams {
        devices,
        placement: rules,
        progress: Some(Box::new(move |f| p2.borrow_mut().set(f))),
        load_mode: placement.load_mode,
        no_host: placement.no_host,
        lazy_map: placement.lazy_map,
        ..Default::default()
    };
    let t0 = Instant::now();
    let model = Model::load(&path, params)
        .with_context(|| format!("cannot load model '{}'", path.display()));
    let load_s = t0.elapsed().as_secs_f64();
    progress.borrow_mut().finish();
    let model = model?;
    for n in &model.load_notes {
        eprintln!("{tool}: warning: {n}");
    }
    Ok(Loaded {
        model: Arc::new(model),
        load_s,
        path,
    })
}

/// The names of the model's device backends (`SIM0`, `SIM0,SIM1`),
/// `CPU` when it has none.
pub fn device_name(model: &Model) -> String {
    if model.devices.is_empty() {
        return "CPU".into();
    }
    model
        .devices
        .iter()
        .map(|d| d.name())
        .collect::<Vec<_>>()
        .join(",")
}

/// One line describing where the weights went.
pub fn placement_summary(model: &Model) -> String {
    let mut host = (0usize, 0usize);
    // per device, in --device order: tensors, bytes
    let mut dev: Vec<(String, usize, usize)> = model
        .devices
        .iter()
        .map(|d| (d.name().to_string(), 0, 0))
        .collect();
    for w in &model.weights {
        let bytes = ggml_core::Tensor::new(w.ty, w.ne).nbytes();
        match &w.target {
            Target::Host => {
                host.0 += 1;
                host.1 += bytes;
            }
            Target::Device(d) => {
                let i = match dev.iter().position(|e| &e.0 == d) {
                    Some(i) => i,
                    None => {
                        dev.push((d.clone(), 0, 0));
                        dev.len() - 1
                    }
                };
                dev[i].1 += 1;
                dev[i].2 += bytes;
            }
        }
    }
    if dev.iter().all(|d| d.1 == 0) {
        return format!(
            "all {} tensors ({}) in host memory",
            host.0,
            fmt_bytes(host.1 as f64)
        );
    }
    let on: Vec<String> = dev
        .iter()
        .map(|(name, n, b)| format!("{n} tensors ({}) on {name}", fmt_bytes(*b as f64)))
        .collect();
    format!(
        "{}, {} tensors ({}) in host memory",
        on.join(", "),
        host.0,
        fmt_bytes(host.1 as f64)
    )
}

/// Every tensor and where it went (for `--verbose`).
pub fn placement_table(model: &Model) -> String {
    let mut s = String::new();
    for w in &model.weights {
        let bytes = ggml_core::Tensor::new(w.ty, w.ne).nbytes();
        let target = match &w.target {
            Target::Host => "host",
            Target::Device(d) => d.as_str(),
        };
        s.push_str(&format!(
            "  {:<32} {:>6} {:>10}  {}\n",
            w.name,
            w.ty.name(),
            fmt_bytes(bytes as f64),
            target
        ));
    }
    s
}

pub use synth::budget::fmt_bytes;

/// The threads to use by default: the available cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get())
}

/// Run `f`, printing an error as `error: ...` on stderr and exiting 1.
pub fn main_wrapper(tool: &str, f: impl FnOnce() -> Result<()>) -> ExitCode {
    match f() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{tool}: error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, `a: b: c`, each cause written once
/// (a cause whose text its parent already shows is skipped).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Read a text file as the prompt, byte for byte; it must be UTF-8.
pub fn read_text_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow::anyhow!("file '{}' not found", path.display()),
        _ => anyhow::anyhow!("cannot read '{}': {e}", path.display()),
    })?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "'{}' is not valid UTF-8 (first bad byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// llama.cpp's `string_process_escapes`.
pub fn process_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('\'') => out.push('\''),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some('x') => {
                let hex: String = (0..2)
                    .filter_map(|_| it.next_if(|c| c.is_ascii_hexdigit()))
                    .collect();
                match u8::from_str_radix(&hex, 16) {
                    Ok(b) if hex.len() == 2 && b.is_ascii() => out.push(b as char),
                    _ => {
                        out.push_str("\\x");
                        out.push_str(&hex);
                    }
                }
            }
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_is_fitted_to_the_devices_as_llama_cpp_does() {
        let devs = |n: usize| -> Vec<String> { (0..n).map(|i| format!("SIM{i}")).collect() };
        assert_eq!(
            split_for_devices(vec![3.0, 1.0], &devs(2)),
            (vec![3.0, 1.0], None)
        );
        let (v, note) = split_for_devices(vec![3.0, 1.0, 1.0], &devs(2));
        assert_eq!(v, [3.0, 1.0]);
        let note = note.unwrap();
        assert!(
            note.starts_with("3 values for 2 devices (SIM0,SIM1): the last 1 ignored"),
            "{note}"
        );
        let (v, note) = split_for_devices(vec![1.0], &devs(3));
        assert_eq!(v, [1.0, 0.0, 0.0]);
        assert!(note.unwrap().contains("the missing 2 taken as 0"));
        // nothing left to split by: free memory decides, as without -ts
        let (v, note) = split_for_devices(vec![0.0, 1.0], &devs(1));
        assert!(v.is_empty());
        assert!(note.unwrap().contains("split by free memory"));
        let (v, note) = split_for_devices(vec![1.0], &[]);
        assert!(v.is_empty());
        assert!(note.unwrap().contains("1 value for 0 devices (none given)"));
    }

    #[test]
    fn escapes_as_llama_cpp() {
        assert_eq!(process_escapes(r"a\nb\t\\c\x41\q"), "a\nb\t\\cA\\q");
    }

    #[test]
    fn ot_backend_must_exist() {
        let a = PlacementArgs {
            override_tensor: vec!["exps=CUDA3".into()],
            ..Default::default()
        };
        assert!(a
            .placement(&["SIM0".into()])
            .unwrap_err()
            .to_string()
            .contains("CUDA3"));
        let a = PlacementArgs {
            override_tensor: vec!["exps=sim0,attn=cpu".into()],
            ..Default::default()
        };
        let p = a.placement(&["SIM0".into()]).unwrap();
        assert_eq!(p.overrides[0].backend, "SIM0");
        assert_eq!(p.overrides[1].backend, "CPU");
        let a = PlacementArgs {
            override_tensor: vec!["(bad=CPU".into()],
            ..Default::default()
        };
        assert!(a
            .placement(&[])
            .unwrap_err()
            .to_string()
            .contains("does not compile"));
    }

    fn err(a: &PlacementArgs, devices: &[&str]) -> String {
        let d: Vec<String> = devices.iter().map(|s| s.to_string()).collect();
        error_chain(&a.placement(&d).unwrap_err())
    }

    #[test]
    fn device_lists_and_split_flags() {
        let a = |d: &str| PlacementArgs {
            device: Some(d.into()),
            ..Default::default()
        };
        assert_eq!(a("SIM0,sim1").device_names().unwrap(), ["SIM0", "SIM1"]);
        assert_eq!(a("SIM0/SIM1").device_names().unwrap(), ["SIM0", "SIM1"]);
        assert!(a("cpu").device_names().unwrap().is_empty());
        let e = a("SIM0,SIM0").device_names().unwrap_err().to_string();
        assert!(e.contains("'SIM0' is listed twice"), "{e}");
        let e = a("SIM0,,SIM1").device_names().unwrap_err().to_string();
        assert!(e.contains("empty device name"), "{e}");
        let e = a("SIM0,CPU").device_names().unwrap_err().to_string();
        assert!(e.contains("'CPU' is not a device"), "{e}");
        let e = error_chain(&a("SIM0,GPU7").open_devices(1).err().unwrap());
        assert!(e.contains("unknown device 'GPU7'"), "{e}");
        assert_eq!(a("SIM0,SIM1").open_devices(1).unwrap().len(), 2);

        let two = ["SIM0", "SIM1"];
        let flags = |sm: Option<&str>, ts: Option<&str>, mg: Option<i64>| PlacementArgs {
            split_mode: sm.map(String::from),
            tensor_split: ts.map(String::from),
            main_gpu: mg,
            ..Default::default()
        };
        let p = flags(Some("none"), Some("3,1"), Some(1))
            .placement(&["SIM0".into(), "SIM1".into()])
            .unwrap();
        assert_eq!(p.split_mode, SplitMode::None);
        assert_eq!(p.tensor_split, vec![3.0, 1.0]);
        assert_eq!(p.main_gpu, 1);
        assert_eq!(p.devices, ["SIM0", "SIM1"]);
        let e = err(&flags(Some("row"), None, None), &two);
        assert!(e.contains("-sm row") && e.contains("not supported"), "{e}");
        let e = err(&flags(Some("rows"), None, None), &two);
        assert!(e.contains("'rows' is not a split mode"), "{e}");
        // a count that does not match the devices: fitted as llama.cpp does
        let p = flags(None, Some("3,1,1"), None)
            .placement(&["SIM0".into(), "SIM1".into()])
            .unwrap();
        assert_eq!(p.tensor_split, vec![3.0, 1.0]);
        let e = err(&flags(None, Some("3,-1"), None), &two);
        assert!(e.contains("-1 is not a share"), "{e}");
        let e = err(&flags(None, Some("0,0"), None), &two);
        assert!(e.contains("every share is zero"), "{e}");
        let e = err(&flags(None, None, Some(2)), &two);
        assert!(
            e.contains("-mg 2: no such device") && e.contains("0..1"),
            "{e}"
        );
        let e = err(&flags(None, None, Some(-1)), &two);
        assert!(e.contains("-mg -1: no such device"), "{e}");
        let p = flags(None, Some("1"), None).placement(&[]).unwrap();
        assert!(p.tensor_split.is_empty());
        // -ot to any listed device
        let ot = PlacementArgs {
            override_tensor: vec![r"blk\.0\.=sim1".into()],
            ..Default::default()
        };
        let p = ot.placement(&["SIM0".into(), "SIM1".into()]).unwrap();
        assert_eq!(p.overrides[0].backend, "SIM1");
        let e = err(&ot, &["SIM0"]);
        assert!(
            e.contains("'sim1' does not exist") && e.contains("CPU, SIM0"),
            "{e}"
        );
    }
}
