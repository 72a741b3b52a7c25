//! `llama-server`'s flags, named as llama.cpp's.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Parser;
use common::args::prefetch::PrefetchArgs;
use common::cli::{BatchArgs, MoeCacheArgs, PlacementArgs};
use ggml_core::GgmlType;

/// The server's multi-letter short flags (beside the shared ones of
/// [`common::cli::MULTI_LETTER_SHORTS`]), mapped to long forms before parsing.
pub const SERVER_SHORTS: &[(&str, &str)] = &[
    ("-np", "--parallel"),
    ("-cb", "--cont-batching"),
    ("-nocb", "--no-cont-batching"),
    ("-to", "--timeout"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
];

/// llama-server's command line.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "llama-server",
    about = "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models, /health, /tokenize, /detokenize, /metrics.",
    after_help = "Without -m, serves the embedded default model (generated into the cache on first use).\nExample:\n  llama-server -m Qwen3-30B-A3B-Q4_K_M.gguf --device CUDA0 -ngl 99 --cpu-moe -c 16384 -np 4 --port 8080"
)]
pub struct ServerArgs {
    /// model path (GGUF); default: the embedded synthetic model
    #[arg(short = 'm', long = "model", value_name = "FNAME")]
    pub model: Option<PathBuf>,

    /// model name in the API (`model` field, /v1/models); default: the file name
    #[arg(short = 'a', long = "alias", value_name = "NAME")]
    pub alias: Option<String>,

    /// IP address to listen on
    #[arg(long = "host", default_value = "127.0.0.1")]
    pub host: String,

    /// port to listen on (0: any free port)
    #[arg(long = "port", default_value_t = 8080)]
    pub port: u16,

    /// [-np] number of slots (sequences decoded in parallel)
    #[arg(long = "parallel", value_name = "N", default_value_t = 4)]
    pub parallel: usize,

    /// total context size in tokens, split evenly over the slots (0: the
    /// model's training context)
    #[arg(
        short = 'c',
        long = "ctx-size",
        value_name = "N",
        default_value_t = 4096
    )]
    pub ctx_size: usize,

    /// [-cb] continuous batching: requests join and leave the running batch
    /// between decodes (default on)
    #[arg(long = "cont-batching", overrides_with = "no_cont_batching")]
    pub cont_batching: bool,

    /// [-nocb] no continuous batching: a new request waits until every
    /// running one has finished
    #[arg(long = "no-cont-batching")]
    pub no_cont_batching: bool,

    /// number of CPU threads (default: all cores)
    #[arg(short = 't', long = "threads", value_name = "N")]
    pub threads: Option<usize>,

    /// [-ctk] KV cache type of K: f16 or f32
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16")]
    pub cache_type_k: String,

    /// [-ctv] KV cache type of V: f16 or f32
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16")]
    pub cache_type_v: String,

    #[command(flatten)]
    pub batch: BatchArgs,

    #[command(flatten)]
    pub placement: PlacementArgs,

    #[command(flatten)]
    pub moe_cache: MoeCacheArgs,

    #[command(flatten)]
    pub prefetch: PrefetchArgs,

    /// API key clients must send as `Authorization: Bearer KEY`
    #[arg(long = "api-key", value_name = "KEY")]
    pub api_key: Option<String>,

    /// [-to] seconds a request may wait for its next token (queue included)
    /// before it is answered with a timeout
    #[arg(long = "timeout", value_name = "N", default_value_t = 600)]
    pub timeout: u64,

    /// requests that may wait for a slot; past that, 503
    #[arg(long = "max-queue", value_name = "N", default_value_t = 64)]
    pub max_queue: usize,

    /// default max_tokens of a request that sets none (-1: up to the slot's context)
    #[arg(short = 'n', long = "n-predict", value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,

    /// /metrics is always served (accepted for llama.cpp compatibility)
    #[arg(long = "metrics")]
    pub metrics: bool,

    /// do not serve the chat page at `/`
    #[arg(long = "no-webui")]
    pub no_webui: bool,
}

impl ServerArgs {
    /// Parse a command line (llama.cpp's multi-letter shorts accepted).
    pub fn parse_from_args(args: impl IntoIterator<Item = OsString>) -> Result<ServerArgs> {
        let mapped = args.into_iter().map(|a| {
            let m = a.to_str().and_then(|s| {
                SERVER_SHORTS
                    .iter()
                    .find(|(short, _)| *short == s)
                    .map(|(_, long)| OsString::from(*long))
            });
            m.unwrap_or(a)
        });
        let args = common::cli::normalize_args(mapped);
        let a = ServerArgs::try_parse_from(args).map_err(|e| {
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) {
                let _ = e.print();
                std::process::exit(0);
            }
            let msg = e.to_string();
            anyhow::anyhow!("{}", msg.trim_start_matches("error: ").trim_end())
        })?;
        a.check()?;
        Ok(a)
    }

    /// Errs on values no server can run with.
    pub fn check(&self) -> Result<()> {
        if self.parallel == 0 || self.parallel > llama::kv_cache::MAX_SEQ {
            bail!(
                "-np {}: must be in 1..={}",
                self.parallel,
                llama::kv_cache::MAX_SEQ
            );
        }
        if self.threads == Some(0) {
            bail!("-t must be at least 1");
        }
        self.batch.check()?;
        if self.timeout == 0 {
            bail!("--timeout must be at least 1 second");
        }
        if self.ctx_size != 0 && self.ctx_size < self.parallel {
            bail!(
                "-c {} is smaller than -np {}: each slot needs at least one cell",
                self.ctx_size,
                self.parallel
            );
        }
        if self.n_predict < -1 {
            bail!(
                "-n {}: must be -1 (unlimited) or at least 0",
                self.n_predict
            );
        }
        self.cache_types()?;
        self.moe_cache.params(&self.placement)?;
        self.moe_cache.hybrid()?;
        self.prefetch.slots()?;
        Ok(())
    }

    /// Whether continuous batching is on.
    pub fn continuous_batching(&self) -> bool {
        !self.no_cont_batching
    }

    /// K and V cache types.
    pub fn cache_types(&self) -> Result<(GgmlType, GgmlType)> {
        let parse = |flag: &str, s: &str| match s.to_ascii_lowercase().as_str() {
            "f16" => Ok(GgmlType::F16),
            "f32" => Ok(GgmlType::F32),
            _ => bail!("{flag} {s}: supported KV cache types are f16 and f32"),
        };
        Ok((
            parse("--cache-type-k", &self.cache_type_k)?,
            parse("--cache-type-v", &self.cache_type_v)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ServerArgs> {
        ServerArgs::parse_from_args(s.split_whitespace().map(OsString::from))
    }

    #[test]
    fn llama_cpp_flags() {
        let a =
            parse("llama-server -np 8 -c 8192 -cb --port 9000 -ngl 99 --cpu-moe -to 30").unwrap();
        assert_eq!(
            (a.parallel, a.ctx_size, a.port, a.timeout),
            (8, 8192, 9000, 30)
        );
        assert!(a.continuous_batching() && a.placement.cpu_moe);
        assert_eq!(a.placement.n_gpu_layers, Some(99));
        assert_eq!(a.host, "127.0.0.1");
        assert!(!parse("llama-server -nocb").unwrap().continuous_batching());
        assert!(parse("llama-server -np 0")
            .unwrap_err()
            .to_string()
            .contains("-np 0"));
        assert!(parse("llama-server -ctk q4_0")
            .unwrap_err()
            .to_string()
            .contains("f16 and f32"));
        assert!(parse("llama-server -c 2 -np 4").is_err());
        // the expert cache flags of llama-run, one size only
        let a =
            parse("llama-server --device SIM0 --cpu-moe --moe-cache-mib 64 --moe-cache-policy lru")
                .unwrap();
        assert_eq!(a.moe_cache.moe_cache_mib, vec!["64".to_string()]);
        assert!(parse("llama-server --moe-cache-mib 1,2")
            .unwrap_err()
            .to_string()
            .contains("one size"));
        assert!(parse("llama-server --moe-cache-policy nope")
            .unwrap_err()
            .to_string()
            .contains("--moe-cache-policy nope"));
    }
}
