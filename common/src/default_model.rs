//! The embedded default model (what runs when no `-m` is given): found in
//! the cache ([`synth::cache`]) or generated there on first use, with a
//! progress display and messages on stderr, then written atomically.

use std::path::PathBuf;

use anyhow::Result;
use synth::cache::default_model_path;
use synth::SynthParams;

use crate::progress::Progress;

/// The default model's path, generating it first if it is not cached.
/// Messages go to stderr with `tool` as prefix.
pub fn ensure_default_model(tool: &str) -> Result<PathBuf> {
    let p = SynthParams::default_model();
    let path = default_model_path(&p);
    if path.is_file() {
        return Ok(path);
    }
    eprintln!(
        "{tool}: no -m given; generating the embedded default model (synthetic {}, {} layers, {} experts, {} used, {}) into {}",
        p.arch,
        p.n_layer,
        p.n_expert,
        p.n_expert_used,
        p.ty,
        path.display()
    );
    let t0 = std::time::Instant::now();
    let mut bar = Progress::new("synthesizing");
    let w = synth::synthesize(&p, &mut |f| bar.set(f))?;
    bar.finish();
    synth::write_atomic(&w, &path)?;
    eprintln!(
        "{tool}: default model written in {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(path)
}
