//! The draft model of speculative decoding (`-md`), as llama-run and
//! llama-server both load it: placed by the draft's own flags
//! ([`SpecArgs::draft_placement`]), fitted beside the target with
//! `--fit on` ([`fit::apply_draft`]), loaded, and checked against the
//! target's vocabulary (llama.cpp's error when they differ).

use std::path::Path;

use anyhow::{Context as _, Result};
use llama::fit::FitPlan;
use llama::speculative::compat;
use llama::Model;

use crate::args::speculative::SpecArgs;
use crate::cli::{self, Loaded, MoeCacheArgs, PlacementArgs};
use crate::fit::{self, FitContext};

/// Load the draft `path` for `target` (placed by `placement`; `fit`: the
/// target's plan and what it planned for, with `--fit on`). Returns the
/// loaded draft and the placement it was loaded with.
#[allow(clippy::too_many_arguments)]
pub fn load_draft(
    tool: &str,
    path: &Path,
    spec: &SpecArgs,
    placement: &PlacementArgs,
    fit: Option<(&FitPlan, &FitContext)>,
    moe_cache: &MoeCacheArgs,
    n_threads: usize,
    target: &Model,
) -> Result<(Loaded, PlacementArgs)> {
    let mut dp = spec.draft_placement(placement)?;
    if let Some((plan, fc)) = fit {
        fit::apply_draft(tool, path, plan, fc, &mut dp, moe_cache)?;
    }
    let loaded = cli::load_model(tool, Some(path), &dp, n_threads)
        .context("cannot load the draft model (-md)")?;
    compat::check(target, &loaded.model)?;
    Ok((loaded, dp))
}
