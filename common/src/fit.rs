//! `--fit on|off`, `--fit-target MiB` (llama.cpp's flags) and `--fit-out
//! FILE.json` (ours): plan the model's device memory before loading it
//! ([`llama::fit`]), print the plan as a table on stderr, write it as JSON,
//! and turn it into the placement and cache flags the load then uses.
//!
//! The plan fills in what was not given: the layer split (`-ts`, over
//! several `--device`s), which expert tensors stay in host memory (an `-ot`
//! rule, or `--n-cpu-moe N` when they are the first N layers), each
//! device's cache size (`--moe-cache-mib A,B`). `--cpu-moe`, `--n-cpu-moe`,
//! `-ot`, `-ts` and `-sm none` are kept; an explicit `--moe-cache-mib N`
//! (or `A,B`) caps the planned caches, `0` plans none; `-ngl` is refused
//! (the plan decides the layers).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use ggml_core::gguf::GgufFile;
use ggml_core::GgmlType;
use llama::fit::{plan, FitDevice, FitModel, FitParams, FitPlan};
use llama::moe_cache::CacheSize;
use llama::placement::SplitMode;

use crate::cli::{MoeCacheArgs, PlacementArgs};
use crate::outfile::AtomicFile;

/// The `--fit` flags.
#[derive(Args, Debug, Clone, Default)]
pub struct FitArgs {
    /// `-fit on|off`: plan the memory before loading.
    #[arg(long)]
    pub fit: Option<bool>,

    /// `-fitt`: the MiB `--fit` keeps free on every device.
    #[arg(long)]
    pub fit_target: Option<f64>,

    /// `--fit-out`: the plan as JSON.
    #[arg(long)]
    pub fit_out: Option<PathBuf>,
}

/// What the plan needs besides the placement flags.
#[derive(Clone, Debug)]
pub struct FitContext {
    /// `-c` (0: the model's training context).
    pub n_ctx: usize,
    /// `-ub` (at most `-b`).
    pub n_ubatch: usize,
    /// K cache type.
    pub type_k: GgmlType,
    /// V cache type.
    pub type_v: GgmlType,
    /// `--prefetch-experts-slots`.
    pub prefetch_slots: i32,
}

impl FitArgs {
    /// Whether `--fit on` was given.
    pub fn on(&self) -> bool {
        self.fit == Some(true)
    }

    /// Errs when `--fit-target` or `--fit-out` come without `--fit on`, or
    /// the target is not a number of MiB >= 0.
    pub fn check(&self) -> Result<()> {
        if !self.on() {
            if self.fit_out.is_some() {
                bail!("--fit-out: needs --fit on");
            }
            if self.fit_target.is_some() {
                bail!("--fit-target: needs --fit on");
            }
        }
        if let Some(t) = self.fit_target {
            if !(t.is_finite() && t >= 0.0) {
                bail!("--fit-target {t}: give the MiB to keep free on each device, a number >= 0");
            }
        }
        Ok(())
    }
}

/// Plan with `--fit on` and rewrite `placement` and `moe_cache` to say the
/// plan (nothing happens with `--fit` off). `model` is the file (the
/// embedded default model when `None`). Prints the plan on stderr and
/// writes `--fit-out`; an error (nothing fits, a device whose free memory
/// is unknown) leaves no file.
pub fn apply(
    tool: &str,
    fit: &FitArgs,
    model: Option<&Path>,
    ctx: &FitContext,
    placement: &mut PlacementArgs,
    moe_cache: &mut MoeCacheArgs,
) -> Result<Option<FitPlan>> {
    fit.check()?;
    if !fit.on() {
        return Ok(None);
    }
    if placement.n_gpu_layers.is_some() {
        bail!("--fit on plans the layers itself: drop -ngl (or use --fit off)");
    }
    let devices = free_memory(placement)?;
    let path = match model {
        Some(p) => {
            crate::cli::check_model_path(p)?;
            p.to_path_buf()
        }
        None => crate::default_model::ensure_default_model(tool)?,
    };
    let file = GgufFile::open(&path)
        .with_context(|| format!("--fit: cannot read '{}'", path.display()))?;
    let fm = FitModel::from_gguf(&file, ctx.type_k, ctx.type_v)
        .with_context(|| format!("--fit: '{}'", path.display()))?;
    drop(file);
    let names: Vec<String> = devices.iter().map(|d| d.name.clone()).collect();
    let rules = placement.placement(&names)?;
    // an explicit size caps the planned cache (one for all devices, or one
    // per device); 0 plans none; auto plans it
    let caps = moe_cache
        .moe_cache_mib
        .iter()
        .map(|m| {
            m.parse::<CacheSize>()
                .map_err(|e| anyhow::anyhow!("--moe-cache-mib {m}: {e}"))
        })
        .collect::<Result<Vec<CacheSize>>>()?;
    let cap_of = |i: usize| -> CacheSize {
        match caps.as_slice() {
            [one] => *one,
            many => many.get(i).copied().unwrap_or(CacheSize::Auto),
        }
    };
    if caps.len() > 1 && caps.len() != names.len() {
        bail!(
            "--moe-cache-mib {}: {} sizes for {} devices: give one size for all, or one per --device",
            moe_cache.moe_cache_mib.join(","),
            caps.len(),
            names.len()
        );
    }
    let cache_wanted = (0..names.len()).any(|i| cap_of(i) != CacheSize::Off);
    let n_ctx = if ctx.n_ctx == 0 {
        fm.n_ctx_train
    } else {
        ctx.n_ctx
    };
    let params = FitParams {
        n_ctx,
        n_ubatch: ctx.n_ubatch,
        margin: fit.fit_target.map(|m| (m * 1048576.0) as u64),
        overrides: rules.overrides.clone(),
        cpu_moe: rules.cpu_moe,
        n_cpu_moe: rules.n_cpu_moe,
        tensor_split: (!rules.tensor_split.is_empty()).then(|| rules.tensor_split.clone()),
        split_none: (rules.split_mode == SplitMode::None).then_some(rules.main_gpu),
        prefetch_slots: ctx.prefetch_slots,
        cache: cache_wanted && !placement.no_expert_copy,
        cache_max_batch: moe_cache.moe_cache_max_batch,
        cache_alias: moe_cache.alias()?,
        offload_min_batch: placement.offload_min_batch,
    };
    let mut pl = plan(&fm, &devices, &params)?;
    for (i, d) in pl.devices.iter_mut().enumerate() {
        match cap_of(i) {
            CacheSize::Bytes(cap) => d.cache = d.cache.min(cap),
            CacheSize::Off => d.cache = 0,
            CacheSize::Auto => {}
        }
        if d.cache == 0 {
            d.cache_overhead = 0;
        }
    }
    eprint!("{}", pl.table().replace("fit:", &format!("{tool}: fit:")));
    if let Some(out) = &fit.fit_out {
        let mut f = AtomicFile::create(out)?;
        let text = serde_json::to_string_pretty(&plan_json(&pl, n_ctx, ctx.n_ubatch))?;
        f.write_all(text.as_bytes())?;
        f.write_all(b"\n")?;
        f.commit()?;
    }
    // the plan as flags
    match (pl.n_cpu_moe(), pl.override_text()) {
        (_, None) => {}
        (Some(n), _) => placement.n_cpu_moe = Some(placement.n_cpu_moe.unwrap_or(0).max(n)),
        (None, Some(ot)) => placement.override_tensor.push(ot),
    }
    if rules.split_mode == SplitMode::Layer && names.len() > 1 && placement.tensor_split.is_none() {
        let ts: Vec<String> = pl.tensor_split().iter().map(|v| v.to_string()).collect();
        placement.tensor_split = Some(ts.join(","));
    }
    moe_cache.moe_cache_mib = pl.cache_mib().iter().map(|m| m.to_string()).collect();
    Ok(Some(pl))
}

/// `--fit on` with a draft model (`-md`): plan the draft's placement `dp`
/// in what the target's plan leaves free on each device (the target's
/// share and its margin are kept free; the draft gets no expert cache), so
/// that a draft that does not fit beside the target gets the plan's
/// shortfall error.
pub fn apply_draft(
    tool: &str,
    path: &Path,
    target_plan: &FitPlan,
    ctx: &FitContext,
    dp: &mut PlacementArgs,
    moe_cache: &MoeCacheArgs,
) -> Result<()> {
    let used = target_plan
        .devices
        .iter()
        .map(|d| {
            d.margin
                + d.dense
                + d.experts
                + d.kv
                + d.compute
                + d.staging
                + d.cache
                + d.cache_overhead
        })
        .max()
        .unwrap_or(0);
    let fit = FitArgs {
        fit: Some(true),
        fit_target: Some(used as f64 / 1048576.0),
        fit_out: None,
    };
    let mut cache = moe_cache.clone();
    cache.moe_cache_mib = vec!["0".to_string()];
    eprintln!("{tool}: fit: the draft model (-md), beside the target:");
    apply(tool, &fit, Some(path), ctx, dp, &mut cache)
        .context("the draft model (-md) does not fit beside the target (--fit on)")?;
    Ok(())
}

/// Each device's free memory, by opening it (a simulated device needs
/// `--sim-mem-mib`: without it its memory is unlimited; with `--rpc` and
/// no `--device`, the RPC workers' devices).
fn free_memory(placement: &PlacementArgs) -> Result<Vec<FitDevice>> {
    if placement.device.is_none() && placement.rpc.is_none() {
        bail!("--fit on: give the devices to plan for (--device SIM0, CUDA0,CUDA1, ..., or --rpc)");
    }
    let devs = placement.open_devices(1)?;
    if devs.is_empty() {
        bail!("--fit on: --device CPU has no device memory to plan");
    }
    devs.iter()
        .map(|d| match d.memory() {
            Some((free, _total)) => Ok(FitDevice {
                name: d.name().to_string(),
                free: free as u64,
            }),
            None => bail!(
                "--fit on: the free memory of {} is unknown (a simulated device needs --sim-mem-mib)",
                d.name()
            ),
        })
        .collect()
}

/// The plan as `--fit-out` writes it (keys in docs/running.md).
pub fn plan_json(pl: &FitPlan, n_ctx: usize, n_ubatch: usize) -> serde_json::Value {
    let devices: Vec<serde_json::Value> = pl
        .devices
        .iter()
        .map(|d| {
            serde_json::json!({
                "name": d.name,
                "free_bytes": d.free,
                "margin_bytes": d.margin,
                "first_layer": d.first_layer,
                "n_layers": d.n_layers,
                "output": d.output,
                "dense_bytes": d.dense,
                "experts_bytes": d.experts,
                "kv_bytes": d.kv,
                "compute_bytes": d.compute,
                "staging_bytes": d.staging,
                "cache_bytes": d.cache,
                "cache_overhead_bytes": d.cache_overhead,
                "compute_alias_ubatch": d.alias.map(|a| a.0),
                "compute_alias_graph_bytes": d.alias.map(|a| a.1),
                "total_bytes": d.total(),
                "host_expert_layers": d.host_expert_layers,
            })
        })
        .collect();
    serde_json::json!({
        "n_layer": pl.n_layer,
        "n_ctx": n_ctx,
        "n_ubatch": n_ubatch,
        "devices": devices,
        "tensor_split": pl.tensor_split(),
        "host_expert_layers": pl.host_expert_layers,
        "host_expert_bytes": pl.host_expert_bytes,
        "n_cpu_moe": pl.n_cpu_moe().filter(|_| !pl.host_expert_layers.is_empty()),
        "override_tensor": pl.override_text(),
        "moe_cache_mib": pl.cache_mib(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::values::parse_on_off;

    #[test]
    fn flags_need_fit_on() {
        let f = FitArgs {
            fit_out: Some("x.json".into()),
            ..Default::default()
        };
        assert!(f.check().unwrap_err().to_string().contains("--fit on"));
        let f = FitArgs {
            fit: Some(true),
            fit_target: Some(-1.0),
            ..Default::default()
        };
        assert!(f.check().unwrap_err().to_string().contains(">= 0"));
        assert_eq!(parse_on_off("ON"), Ok(true));
        assert_eq!(parse_on_off("off"), Ok(false));
        assert!(parse_on_off("maybe").is_err());
    }

    #[test]
    fn fit_needs_a_device_with_known_memory() {
        let ctx = FitContext {
            n_ctx: 256,
            n_ubatch: 64,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            prefetch_slots: 0,
        };
        let fit = FitArgs {
            fit: Some(true),
            ..Default::default()
        };
        let mut mc = MoeCacheArgs {
            moe_cache_mib: vec!["auto".into()],
            moe_cache_policy: "hlfu".into(),
            moe_cache_max_batch: 32,
            moe_cache_cpu_share: "auto".into(),
            moe_hybrid: "on".into(),
            moe_cache_alias: "on".into(),
            moe_host_cache_mib: None,
            moe_host_cache_policy: "hlfu".into(),
        };
        let mut p = PlacementArgs::default();
        let e = apply("t", &fit, None, &ctx, &mut p, &mut mc).unwrap_err();
        assert!(e.to_string().contains("--device"), "{e}");
        let mut p = PlacementArgs {
            device: Some("SIM0".into()),
            ..Default::default()
        };
        let e = apply("t", &fit, None, &ctx, &mut p, &mut mc).unwrap_err();
        assert!(e.to_string().contains("--sim-mem-mib"), "{e}");
        let mut p = PlacementArgs {
            device: Some("SIM0".into()),
            n_gpu_layers: Some(2),
            ..Default::default()
        };
        let e = apply("t", &fit, None, &ctx, &mut p, &mut mc).unwrap_err();
        assert!(e.to_string().contains("-ngl"), "{e}");
    }
}
