//! `llama-run`'s speculative decoding: the draft source the flags ask for
//! (a draft model loaded and placed by its own flags, checked against the
//! target's vocabulary; or the n-gram lookup), wrapped in `llama`'s
//! [`SpecDecoder`] once the prompt is in the target's cache.

use anyhow::{Context as _, Result};
use common::args::speculative::SpecSource;
use common::cli::{self, PlacementArgs};
use common::fit::FitContext;
use llama::fit::FitPlan;
use llama::speculative::draft::DraftModel;
use llama::speculative::{DraftSource, SpecDecoder};
use llama::{Context, Model};

use super::flags::Args;
use super::TOOL;

/// The speculation of a run, before its prompt.
pub(crate) struct Speculation {
    source: Box<dyn DraftSource + Send>,
    /// The draft model's simulated clock (a draft on a simulated device).
    pub(crate) draft_clock: Option<std::sync::Arc<ggml_core::SimClock>>,
}

impl Speculation {
    /// Start speculating after `prompt` (decoded by the target).
    pub(crate) fn start(self, a: &Args, prompt: &[i32]) -> Result<SpecDecoder> {
        Ok(SpecDecoder::new(self.source, a.spec.params()?, prompt))
    }
}

/// What `-md` / `--spec-type` ask for, loaded (`None`: no speculation).
pub(crate) fn load(
    a: &Args,
    target: &Model,
    placement: &PlacementArgs,
    n_threads: usize,
    fit: Option<(&FitPlan, &FitContext)>,
) -> Result<Option<Speculation>> {
    let params = a.spec.params()?;
    match a.spec.source()? {
        None => Ok(None),
        Some(SpecSource::Ngram(g)) => {
            eprintln!(
                "{TOOL}: speculative: ngram-simple (n-gram {}, up to {} tokens, --spec-draft-n-max {})",
                g.size_n, g.size_m, params.n_max
            );
            Ok(Some(Speculation {
                source: Box::new(g),
                draft_clock: None,
            }))
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
                "{TOOL}: speculative: draft-simple, draft model {}: {} layers, n_vocab {}, {}; placement: {}",
                loaded.path.display(),
                loaded.model.hparams.n_layer,
                loaded.model.hparams.n_vocab,
                cli::fmt_bytes(loaded.model.size_bytes() as f64),
                cli::placement_summary(&loaded.model)
            );
            let cp = a.batch.context_params(a.ctx_size, n_threads, &dp);
            let ctx = Context::new(loaded.model.clone(), cp)
                .context("cannot create the draft model's context")?;
            let draft_clock = ctx.sim_clock();
            Ok(Some(Speculation {
                source: Box::new(DraftModel::new(ctx, &params)),
                draft_clock,
            }))
        }
    }
}
