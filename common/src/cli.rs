//! What the three tools share: llama.cpp's multi-letter short flags,
//! placement and batch flags, model loading with progress, error reporting.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use ggml_core::gguf::LoadMode;
use ggml_core::Backend;
use llama::moe_cache::{CacheSize, MoeCacheParams, PolicyKind};
use llama::placement::{Placement, Target};
use llama::{ContextParams, Model, ModelParams};

use crate::progress::Progress;

pub use crate::args::MULTI_LETTER_SHORTS;

/// Rewrite `-ngl 99` as `--n-gpu-layers 99` etc. (whole arguments only,
/// and nothing after `--`; write `--prompt=-ngl` for such a prompt).
pub fn normalize_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut rest_verbatim = false;
    for a in args {
        if rest_verbatim {
            out.push(a);
            continue;
        }
        if a == "--" {
            rest_verbatim = true;
            out.push(a);
            continue;
        }
        let mapped = a.to_str().and_then(|s| {
            MULTI_LETTER_SHORTS
                .iter()
                .find(|(short, _)| *short == s)
                .map(|(_, long)| OsString::from(*long))
        });
        out.push(mapped.unwrap_or(a));
    }
    out
}

/// Where weights go: llama.cpp's placement flags.
#[derive(Args, Debug, Clone, Default)]
pub struct PlacementArgs {
    /// [-dev] device for offloaded weights: CPU (none), SIM0.. (simulated
    /// device: CPU kernels, device memory semantics, counted copies),
    /// CUDA0.. (when built with CUDA)
    #[arg(long = "device", value_name = "DEV")]
    pub device: Option<String>,

    /// [-ngl] number of layers to store on the device (default with
    /// --device: all; -1 = all; more than the layer count also offloads the
    /// output head)
    #[arg(
        long = "n-gpu-layers",
        alias = "gpu-layers",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub n_gpu_layers: Option<i64>,

    /// [-ot] override tensor placement: PATTERN=BACKEND,... (regex search on
    /// tensor names, first match wins; BACKEND is CPU or the --device), e.g.
    /// -ot "blk\.(1[0-9])\.ffn_.*_exps=CPU"; may be repeated
    #[arg(long = "override-tensor", value_name = "PATTERN=BACKEND,...")]
    pub override_tensor: Vec<String>,

    /// [-cmoe] keep all MoE expert weights in host memory
    #[arg(long = "cpu-moe")]
    pub cpu_moe: bool,

    /// [-ncmoe] keep the MoE expert weights of the first N layers in host
    /// memory
    #[arg(long = "n-cpu-moe", value_name = "N")]
    pub n_cpu_moe: Option<usize>,

    /// copy whole expert tensors to the device instead of only the experts
    /// the router picked (for comparison)
    #[arg(long = "no-expert-copy")]
    pub no_expert_copy: bool,

    /// [-nomb] smallest batch for which the device runs an op whose weights
    /// are in host memory (copying them in); smaller batches run such ops
    /// on the CPU (llama.cpp's GGML_OP_OFFLOAD_MIN_BATCH)
    #[arg(long = "offload-min-batch", value_name = "N", default_value_t = 32)]
    pub offload_min_batch: usize,

    /// timing profile of the sim device's simulated clock: a preset
    /// (pcie4-x16, pcie5-x16, h200-pcie5) or a JSON file (keys in
    /// docs/timeline.md); default pcie4-x16
    #[arg(long = "sim-profile", value_name = "NAME|FILE.json")]
    pub sim_profile: Option<String>,

    /// memory capacity of a simulated device (SIM0..) in MiB (default:
    /// unlimited): allocations beyond it fail, and `--moe-cache-mib auto`
    /// sizes the cache from it
    #[arg(long = "sim-mem-mib", value_name = "N", allow_hyphen_values = true)]
    pub sim_mem_mib: Option<String>,

    /// how the model file is read: auto (default: none where the file
    /// takes at most half of the available memory, else mmap), mmap
    /// (mapped), none (read into memory with huge pages), mlock (mapped
    /// and locked), pin (host weights page-locked for the device, CUDA;
    /// elsewhere as mmap), dio (O_DIRECT reads)
    #[arg(long = "load-mode", value_name = "MODE", default_value = "auto", value_parser = parse_load_mode)]
    pub load_mode: LoadMode,
}

fn parse_load_mode(s: &str) -> std::result::Result<LoadMode, String> {
    s.parse()
}

impl PlacementArgs {
    /// The placement rules; checks `-ot` syntax, regexes and backend names.
    pub fn placement(&self, device: Option<&str>) -> Result<Placement> {
        let mut overrides = Vec::new();
        for arg in &self.override_tensor {
            let rules =
                Placement::parse_overrides(arg).map_err(|e| anyhow::anyhow!("-ot {arg}: {e}"))?;
            for mut r in rules {
                let be = r.backend.to_ascii_uppercase();
                let ok = be == "CPU" || device.is_some_and(|d| d.eq_ignore_ascii_case(&be));
                if !ok {
                    bail!(
                        "-ot {arg}: backend '{}' does not exist or is not in use (available: CPU{})",
                        r.backend,
                        device.map(|d| format!(", {d}")).unwrap_or_default()
                    );
                }
                r.backend = match device {
                    Some(d) if d.eq_ignore_ascii_case(&be) => d.to_string(),
                    _ => "CPU".into(),
                };
                overrides.push(r);
            }
        }
        Ok(Placement {
            n_gpu_layers: self.n_gpu_layers.and_then(|n| usize::try_from(n).ok()),
            overrides,
            cpu_moe: self.cpu_moe,
            n_cpu_moe: self.n_cpu_moe.unwrap_or(0),
        })
    }

    /// Open the `--device` backend (None for CPU).
    pub fn open_device(&self, n_threads: usize) -> Result<Option<Arc<dyn Backend>>> {
        let sim_mem = self.sim_mem_bytes()?;
        let Some(name) = &self.device else {
            if self.sim_profile.is_some() {
                bail!("--sim-profile: needs a simulated device (--device SIM0)");
            }
            if sim_mem.is_some() {
                bail!("--sim-mem-mib applies to a simulated device: give --device SIM0 too");
            }
            return Ok(None);
        };
        let is_sim = name.to_ascii_uppercase().starts_with("SIM");
        if sim_mem.is_some() && !is_sim {
            bail!("--sim-mem-mib applies to simulated devices (SIM0, ...), not --device {name}");
        }
        let sim_profile = match &self.sim_profile {
            Some(spec) => {
                if !is_sim {
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
        };
        llama::device::open_device_with(name, &opts)
            .map_err(|e| anyhow::anyhow!("--device {name}: {e}"))
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

/// The device cache of host experts: `--moe-cache-mib`, `--moe-cache-policy`,
/// `--moe-cache-max-batch`.
#[derive(Args, Debug, Clone)]
pub struct MoeCacheArgs {
    /// device cache of host experts, MiB per device: N, auto (the device's
    /// free memory after the graph's; every expert when its memory is
    /// unlimited) or 0 (off); llama-bench takes a comma-separated list
    #[arg(
        long = "moe-cache-mib",
        value_name = "N|auto",
        default_value = "auto",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    pub moe_cache_mib: Vec<String>,

    /// eviction policy of the expert cache: lru, slru, lrfu (frequency-class
    /// LRU) or hlfu (decayed frequency with history, the default)
    #[arg(long = "moe-cache-policy", value_name = "NAME", default_value = "hlfu")]
    pub moe_cache_policy: String,

    /// largest ubatch that uses the expert cache; larger ones take the
    /// selective copy
    #[arg(long = "moe-cache-max-batch", value_name = "N", default_value_t = llama::moe_cache::DEFAULT_MAX_BATCH)]
    pub moe_cache_max_batch: usize,

    /// hybrid experts: the share of the cache's misses computed on the CPU
    /// from host memory instead of uploaded: auto (a cost model decides per
    /// layer per ubatch) or a number from 0 to 1 (that share of the misses
    /// once the cache is full)
    #[arg(
        long = "moe-cache-cpu-share",
        value_name = "auto|F",
        default_value = "auto",
        allow_hyphen_values = true
    )]
    pub moe_cache_cpu_share: String,

    /// hybrid experts on (default, with a cache) or off (every miss uploaded)
    #[arg(long = "moe-hybrid", value_name = "on|off", default_value = "on")]
    pub moe_hybrid: String,
}

impl MoeCacheArgs {
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

    /// The one `--moe-cache-mib` value's settings (llama-run).
    pub fn params(&self, placement: &PlacementArgs) -> Result<MoeCacheParams> {
        let all = self.all_params(placement)?;
        match all.as_slice() {
            [p] => Ok(*p),
            _ => bail!(
                "--moe-cache-mib {}: give one size here (lists are for llama-bench)",
                self.moe_cache_mib.join(",")
            ),
        }
    }
}

/// Batch sizes: llama.cpp's `-b` and `-ub`.
#[derive(Args, Debug, Clone)]
pub struct BatchArgs {
    /// logical maximum batch size
    #[arg(
        short = 'b',
        long = "batch-size",
        value_name = "N",
        default_value_t = 2048
    )]
    pub batch_size: usize,

    /// [-ub] physical maximum batch size
    #[arg(long = "ubatch-size", value_name = "N", default_value_t = 512)]
    pub ubatch_size: usize,

    /// [-fa] flash attention: on, off or auto (`-fa` alone = on; auto keeps
    /// the mul_mat/soft_max attention path, the one llama.cpp's reference
    /// logits are made with, except with a quantized V cache, which needs
    /// flash attention)
    #[arg(
        long = "flash-attn",
        value_name = "on|off|auto",
        num_args = 0..=1,
        default_missing_value = "on",
        default_value = "off",
        value_parser = ["on", "off", "auto", "1", "0"]
    )]
    pub flash_attn: String,
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
            expert_copy: !placement.no_expert_copy,
            flash_attn: matches!(self.flash_attn.as_str(), "on" | "1"),
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
    let mut device = placement.open_device(n_threads)?;
    let mut defaulted = false;
    if device.is_none() && placement.device.is_none() && wants_device {
        // as llama.cpp: the first CUDA device when there is one
        if let Some(d) = crate::devices::default_gpu() {
            let chosen = PlacementArgs {
                device: Some(d.clone()),
                ..placement.clone()
            };
            device = chosen.open_device(n_threads)?;
            defaulted = device.is_some();
            if defaulted {
                eprintln!("{tool}: no --device given: using {d}");
            }
        }
    }
    let dev_name = device.as_ref().map(|d| d.name().to_string());
    let rules = placement.placement(dev_name.as_deref())?;
    let path = match path {
        Some(p) => {
            check_model_path(p)?;
            p.to_path_buf()
        }
        None => crate::default_model::ensure_default_model(tool)?,
    };
    if device.is_none() && wants_device && !defaulted {
        eprintln!("{tool}: note: no --device given and no CUDA device found: the CPU runs everything (-ngl/--cpu-moe have no effect)");
    }
    let bar = Progress::new("loading");
    let progress = std::rc::Rc::new(std::cell::RefCell::new(bar));
    let p2 = std::rc::Rc::clone(&progress);
    let params = ModelParams {
        device,
        placement: rules,
        progress: Some(Box::new(move |f| p2.borrow_mut().set(f))),
        load_mode: placement.load_mode,
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

/// The name of the model's device backend, `CPU` when it has none.
pub fn device_name(model: &Model) -> String {
    model
        .device
        .as_ref()
        .map(|d| d.name().to_string())
        .unwrap_or_else(|| "CPU".into())
}

/// One line describing where the weights went.
pub fn placement_summary(model: &Model) -> String {
    let mut host = (0usize, 0usize);
    let mut dev = (0usize, 0usize, String::new());
    for w in &model.weights {
        let bytes = ggml_core::Tensor::new(w.ty, w.ne).nbytes();
        match &w.target {
            Target::Host => {
                host.0 += 1;
                host.1 += bytes;
            }
            Target::Device(d) => {
                dev.0 += 1;
                dev.1 += bytes;
                dev.2 = d.clone();
            }
        }
    }
    if dev.0 == 0 {
        return format!(
            "all {} tensors ({}) in host memory",
            host.0,
            fmt_bytes(host.1 as f64)
        );
    }
    format!(
        "{} tensors ({}) on {}, {} tensors ({}) in host memory",
        dev.0,
        fmt_bytes(dev.1 as f64),
        dev.2,
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
    fn multi_letter_shorts_are_rewritten() {
        let v: Vec<OsString> = ["x", "-ngl", "3", "-p", "-ngl", "--", "-ot"]
            .iter()
            .map(OsString::from)
            .collect();
        let out = normalize_args(v);
        assert_eq!(
            out,
            [
                "x",
                "--n-gpu-layers",
                "3",
                "-p",
                "--n-gpu-layers",
                "--",
                "-ot"
            ]
            .iter()
            .map(OsString::from)
            .collect::<Vec<_>>()
        );
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
            .placement(Some("SIM0"))
            .unwrap_err()
            .to_string()
            .contains("CUDA3"));
        let a = PlacementArgs {
            override_tensor: vec!["exps=sim0,attn=cpu".into()],
            ..Default::default()
        };
        let p = a.placement(Some("SIM0")).unwrap();
        assert_eq!(p.overrides[0].backend, "SIM0");
        assert_eq!(p.overrides[1].backend, "CPU");
        let a = PlacementArgs {
            override_tensor: vec!["(bad=CPU".into()],
            ..Default::default()
        };
        assert!(a
            .placement(None)
            .unwrap_err()
            .to_string()
            .contains("does not compile"));
    }
}
