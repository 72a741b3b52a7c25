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
    pub fit: common::fit::FitArgs,

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

    #[command(flatten)]
    pub sampling: SamplingArgs,

    /// [--keep] tokens of the prompt kept when the context shifts (-1: all)
    #[arg(
        long = "keep",
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub keep: i64,

    /// accepted for llama.cpp compatibility: chat templates are always Jinja here
    #[arg(long = "jinja")]
    pub jinja: bool,

    /// chat template: a built-in name (chatml, llama3, command-r, ...; see
    /// `--chat-template list`), a template of the model
    /// (tokenizer.chat_template.NAME), or the Jinja text itself
    #[arg(long = "chat-template", value_name = "NAME|TEMPLATE")]
    pub chat_template: Option<String>,

    /// read the chat template from a file
    #[arg(
        long = "chat-template-file",
        value_name = "FILE",
        conflicts_with = "chat_template"
    )]
    pub chat_template_file: Option<PathBuf>,

    /// [-v] add `__verbose` (the prompt as rendered, special tokens
    /// shown) to OpenAI answers
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,

    /// serve /slots (off by default, as llama.cpp)
    #[arg(long = "slots", overrides_with = "no_slots")]
    pub slots: bool,

    /// do not serve /slots (the default)
    #[arg(long = "no-slots")]
    pub no_slots: bool,

    /// folder where /slots/{id}?action=save|restore keep their files
    #[arg(long = "slot-save-path", value_name = "PATH")]
    pub slot_save_path: Option<PathBuf>,

    /// do not serve the web UI at /
    #[arg(long = "no-webui")]
    pub no_webui: bool,

    /// let POST /props change the server's default generation settings
    #[arg(long = "props")]
    pub props: bool,

    /// context shift on (the default): a generation that fills a slot's
    /// context drops the oldest tokens after --keep and goes on
    #[arg(long = "context-shift", overrides_with = "no_context_shift")]
    pub context_shift: bool,

    /// no context shift: a generation stops when the slot's context is
    /// full, and a prompt longer than the context is refused
    #[arg(long = "no-context-shift")]
    pub no_context_shift: bool,

    /// serve /embedding and /v1/embeddings
    #[arg(long = "embedding", alias = "embeddings")]
    pub embedding: bool,

    /// serve /rerank (needs a model with a classification head: rank pooling)
    #[arg(long = "reranking", alias = "rerank")]
    pub reranking: bool,

    /// pooling of the embeddings: none, mean, cls or last (default: mean)
    #[arg(long = "pooling", value_name = "TYPE")]
    pub pooling: Option<String>,

    /// reasoning format of the answers: deepseek (thoughts in
    /// `reasoning_content`) or none
    #[arg(long = "reasoning-format", value_name = "FORMAT")]
    pub reasoning_format: Option<String>,
}

/// The sampling flags: the server's defaults for a request that sets none
/// (llama.cpp's meanings and defaults).
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// temperature (0: greedy)
    #[arg(long = "temp", value_name = "T", default_value_t = 0.8)]
    pub temp: f32,

    /// [-s] RNG seed (-1: a fresh one per request)
    #[arg(short = 's', long = "seed", value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub seed: i64,

    /// top-k sampling (0: off)
    #[arg(
        long = "top-k",
        value_name = "N",
        default_value_t = 40,
        allow_negative_numbers = true
    )]
    pub top_k: i32,

    /// top-p sampling (1.0: off)
    #[arg(long = "top-p", value_name = "P", default_value_t = 0.95)]
    pub top_p: f32,

    /// min-p sampling (0.0: off)
    #[arg(long = "min-p", value_name = "P", default_value_t = 0.05)]
    pub min_p: f32,

    /// penalty of repeated tokens (1.0: off)
    #[arg(long = "repeat-penalty", value_name = "P", default_value_t = 1.0)]
    pub repeat_penalty: f32,

    /// tokens the repeat penalty looks back on
    #[arg(long = "repeat-last-n", value_name = "N", default_value_t = 64)]
    pub repeat_last_n: usize,
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
        self.pooling()?;
        if let Some(f) = &self.reasoning_format {
            if !matches!(f.as_str(), "deepseek" | "none") {
                bail!("--reasoning-format {f}: must be deepseek or none");
            }
        }
        let s = &self.sampling;
        if !(s.temp.is_finite() && (0.0..=1.0).contains(&s.top_p) && (0.0..=1.0).contains(&s.min_p))
        {
            bail!(
                "--temp {} --top-p {} --min-p {}: the temperature must be a number, top-p and min-p in [0, 1]",
                s.temp,
                s.top_p,
                s.min_p
            );
        }
        if self.keep < -1 {
            bail!(
                "--keep {}: must be -1 (the whole prompt) or at least 0",
                self.keep
            );
        }
        if self.placement.device.is_some() {
            // the device list and the split flags (-sm, -ts, -mg), before
            // anything is loaded
            let devices = self.placement.device_names()?;
            self.placement.placement(&devices)?;
        }
        self.moe_cache.params(&self.placement)?;
        self.moe_cache.hybrid()?;
        self.prefetch.slots()?;
        self.fit.check()?;
        Ok(())
    }

    /// Whether /slots is served.
    pub fn slots_enabled(&self) -> bool {
        self.slots && !self.no_slots
    }

    /// Whether a full context shifts (llama.cpp's default) rather than stops.
    pub fn context_shift(&self) -> bool {
        !self.no_context_shift
    }

    /// The pooling of embeddings (`--pooling`, default mean).
    pub fn pooling(&self) -> Result<Pooling> {
        match self.pooling.as_deref().unwrap_or("mean") {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" => Ok(Pooling::Last),
            "none" => Ok(Pooling::None),
            p => bail!("--pooling {p}: supported poolings are none, mean, cls and last"),
        }
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

/// How the hidden states of a prompt become one embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// One embedding per token.
    None,
    /// The mean over the tokens.
    Mean,
    /// The first token's.
    Cls,
    /// The last token's.
    Last,
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
        // several devices: a cache size each, llama.cpp's split flags
        let a = parse(
            "llama-server --device SIM0,SIM1 -sm layer -ts 1,3 -mg 1 --cpu-moe --moe-cache-mib 64,32",
        )
        .unwrap();
        assert_eq!(a.placement.device_names().unwrap(), ["SIM0", "SIM1"]);
        let p = a
            .placement
            .placement(&["SIM0".into(), "SIM1".into()])
            .unwrap();
        assert_eq!((p.tensor_split.clone(), p.main_gpu), (vec![1.0, 3.0], 1));
        let (_, sizes) = a.moe_cache.device_params(&a.placement).unwrap();
        assert_eq!(sizes.len(), 2);
        assert!(parse("llama-server --device SIM0,SIM1 -sm row")
            .unwrap_err()
            .to_string()
            .contains("'row'"));
        // llama.cpp's server flags as its test suite passes them
        let a = parse("llama-server --temp 0.0 --seed 42 --jinja --chat-template chatml --slots --slot-save-path ./tmp --no-context-shift --verbose --no-webui --props --embedding --pooling last --keep 4").unwrap();
        assert_eq!((a.sampling.temp, a.sampling.seed, a.keep), (0.0, 42, 4));
        assert!(a.slots_enabled() && !a.context_shift() && a.verbose && a.no_webui && a.props);
        assert_eq!(a.pooling().unwrap(), Pooling::Last);
        assert!(!parse("llama-server").unwrap().slots_enabled());
        assert!(parse("llama-server").unwrap().context_shift());
        assert!(parse("llama-server --pooling rank")
            .unwrap_err()
            .to_string()
            .contains("--pooling rank"));
        assert!(parse("llama-server --moe-cache-policy nope")
            .unwrap_err()
            .to_string()
            .contains("--moe-cache-policy nope"));
    }

    #[test]
    fn fit_flags_as_llama_cpp_spells_them() {
        let a =
            parse("llama-server --device SIM0 --sim-mem-mib 64 -fit on -fitt 2 --fit-out p.json")
                .unwrap();
        assert!(a.fit.on());
        assert_eq!(a.fit.fit_target, Some(2.0));
        assert!(!parse("llama-server --fit off").unwrap().fit.on());
        assert!(parse("llama-server --fit-out p.json")
            .unwrap_err()
            .to_string()
            .contains("--fit on"));
    }
}
