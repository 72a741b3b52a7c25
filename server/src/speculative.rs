//! Speculative decoding's draft sources for `llama-server`, one per slot:
//! a draft model (`-md`, placed by its own flags `-ngld`, `-devd`,
//! `-cmoed`, ...; with `--fit on` planned in what the target's plan leaves
//! free, so that a draft that does not fit gets the plan's shortfall;
//! checked against the target's vocabulary with llama.cpp's error) in a
//! context of the slot's size, or llama.cpp's `ngram-simple`
//! lookup (`--spec-type ngram-simple`). The decode thread
//! ([`crate::engine`]) puts each slot's guesses into the batch after its
//! pending token: the target verifies them in an ordinary batch, which
//! goes through the selective expert copy and the expert cache.

use anyhow::{Context as _, Result};
use common::args::speculative::SpecSource;
use common::cli::{self, PlacementArgs};
use common::fit::FitContext;
use llama::fit::FitPlan;
use llama::speculative::draft::DraftModel;
use llama::speculative::DraftSource;
use llama::{Context, Model};

use crate::args::ServerArgs;

const TOOL: &str = "llama-server";

/// The draft sources of the `a.parallel` slots (empty: no speculation),
/// for `target` placed by `placement` (the target's, after `--fit`; `fit`:
/// the target's plan and what it planned for, with `--fit on`), each draft
/// context of `n_slot_ctx` cells.
pub fn draft_sources(
    a: &ServerArgs,
    target: &Model,
    placement: &PlacementArgs,
    fit: Option<(&FitPlan, &FitContext)>,
    n_slot_ctx: usize,
    n_threads: usize,
) -> Result<Vec<Box<dyn DraftSource + Send>>> {
    let params = a.spec.params()?;
    let mut out: Vec<Box<dyn DraftSource + Send>> = Vec::with_capacity(a.parallel);
    match a.spec.source()? {
        None => {}
        Some(SpecSource::Ngram(g)) => {
            eprintln!(
                "{TOOL}: speculative: ngram-simple (n-gram {}, up to {} tokens, --spec-draft-n-max {}), each slot",
                g.size_n, g.size_m, params.n_max
            );
            for _ in 0..a.parallel {
                out.push(Box::new(g));
            }
        }
        Some(SpecSource::Draft(path)) => {
            let (loaded, dp) = common::draft::load_draft(
                TOOL,
                &path,
                &a.spec,
                placement,
                fit,
                &a.moe_cache,
                n_threads,
                target,
            )?;
            eprintln!(
                "{TOOL}: speculative: draft-simple, draft model {}: {} layers, n_vocab {}, {}; placement: {}; a context of {n_slot_ctx} tokens for each of {} slots (--spec-draft-n-max {})",
                loaded.path.display(),
                loaded.model.hparams.n_layer,
                loaded.model.hparams.n_vocab,
                cli::fmt_bytes(loaded.model.size_bytes() as f64),
                cli::placement_summary(&loaded.model),
                a.parallel,
                params.n_max
            );
            for _ in 0..a.parallel {
                let cp = a.batch.context_params(n_slot_ctx, n_threads, &dp);
                let ctx = Context::new(loaded.model.clone(), cp)
                    .context("cannot create the draft model's context")?;
                out.push(Box::new(DraftModel::new(ctx, &params)));
            }
        }
    }
    Ok(out)
}
