//! Where the embedded default model lives: generated on first use into a
//! cache directory, named by a hash of everything that determines its
//! bytes, written atomically.

use std::path::PathBuf;

use anyhow::Result;

use crate::progress::Progress;
use crate::synth::{self, SynthParams};

/// Environment variable that overrides the cache directory.
pub const CACHE_ENV: &str = "GGML_RS_CACHE";

/// The cache directory: `$GGML_RS_CACHE`, else `$XDG_CACHE_HOME/ggml-rs`,
/// else `~/.cache/ggml-rs`, else `ggml-rs` in the temp directory.
pub fn cache_dir() -> PathBuf {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = nonempty(CACHE_ENV) {
        return PathBuf::from(d);
    }
    if let Some(d) = nonempty("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("ggml-rs");
    }
    if let Some(h) = nonempty("HOME") {
        return PathBuf::from(h).join(".cache").join("ggml-rs");
    }
    std::env::temp_dir().join("ggml-rs")
}

/// The default model's path in the cache.
pub fn default_model_path(p: &SynthParams) -> PathBuf {
    cache_dir().join(format!(
        "default-{:016x}.gguf",
        synth::fnv64(&p.descriptor())
    ))
}

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
