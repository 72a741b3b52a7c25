//! `--expert-trace-in FILE` (llama-run, llama-bench): read a routing trace
//! and make it the model's forced routing
//! ([`llama::moe_cache::trace::forced`]); every error names the flag and the file.

use std::path::Path;

use anyhow::{anyhow, Result};
use llama::moe_cache::trace::forced::ForcedRouting;
use llama::moe_cache::Trace;
use llama::Model;

/// The forced routing of the trace at `path` for `model`.
pub fn load(path: &Path, model: &Model) -> Result<ForcedRouting> {
    let trace = Trace::read(path).map_err(|e| anyhow!("--expert-trace-in: {e}"))?;
    ForcedRouting::new(&trace, model).map_err(|e| {
        anyhow!(
            "--expert-trace-in {}: cannot route this model by it: {e}",
            path.display()
        )
    })
}

/// The summary's line for a run routed by `f`.
pub fn summary_line(f: &ForcedRouting) -> String {
    format!(
        "forced routing = every MoE layer uses the expert ids of {} ({} tokens, wrapping); the text is not the model's\n",
        f.source,
        f.n_tokens()
    )
}
