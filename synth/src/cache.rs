//! Where the embedded default model lives: a cache directory, the file
//! named by a hash of everything that determines its bytes. The tools
//! (`common::default_model`) generate it there on first use and write it
//! atomically ([`crate::write_atomic`]).

use std::path::PathBuf;

use crate::model::{fnv64, SynthParams};

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
    cache_dir().join(format!("default-{:016x}.gguf", fnv64(&p.descriptor())))
}
