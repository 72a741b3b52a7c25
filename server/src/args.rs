//! `llama-server`'s flags, named as llama.cpp's.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Parser;
use common::args::prefetch::PrefetchArgs;
use common::args::speculative::SpecArgs;
use common::cli::{BatchArgs, MoeCacheArgs, PlacementArgs};
use common::flags::{self, Lookup, ParseError, Tool};
use ggml_core::GgmlType;

/// llama-server's command line: each field is the flag whose entry in
/// [`common::flags::table`] has the field's name as its id.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "llama-server",
    about = "OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions, /v1/models, /health, /tokenize, /detokenize, /metrics.",
    after_help = "Without -m, serves the embedded default model (generated into the cache on first use).\nExample:\n  llama-server -m Qwen3-30B-A3B-Q4_K_M.gguf --device CUDA0 -ngl 99 --cpu-moe -c 16384 -np 4 --port 8080"
)]
pub struct ServerArgs {
    /// `--model`.
    #[arg(long)]
    pub model: Option<PathBuf>,

    /// `--alias`.
    #[arg(long)]
    pub alias: Option<String>,

    /// `--host`.
    #[arg(long)]
    pub host: String,

    /// `--port`.
    #[arg(long)]
    pub port: u16,

    /// `--parallel`.
    #[arg(long)]
    pub parallel: usize,

    /// `--ctx-size`.
    #[arg(long)]
    pub ctx_size: usize,

    /// `--cont-batching`.
    #[arg(long, overrides_with = "no_cont_batching")]
    pub cont_batching: bool,

    /// `--no-cont-batching`.
    #[arg(long)]
    pub no_cont_batching: bool,

    /// `--threads`.
    #[arg(long)]
    pub threads: Option<usize>,

    /// `--cache-type-k`.
    #[arg(long)]
    pub cache_type_k: String,

    /// `--cache-type-v`.
    #[arg(long)]
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

    #[command(flatten)]
    pub spec: SpecArgs,

    /// `--api-key`.
    #[arg(long)]
    pub api_key: Option<String>,

    /// `--timeout`.
    #[arg(long)]
    pub timeout: u64,

    /// `--max-queue`.
    #[arg(long)]
    pub max_queue: usize,

    /// `--n-predict`.
    #[arg(long)]
    pub n_predict: i64,

    /// `--metrics`.
    #[arg(long)]
    pub metrics: bool,

    #[command(flatten)]
    pub sampling: SamplingArgs,

    /// `--keep`.
    #[arg(long)]
    pub keep: i64,

    /// `--jinja`.
    #[arg(long)]
    pub jinja: bool,

    /// `--chat-template`.
    #[arg(long)]
    pub chat_template: Option<String>,

    /// `--chat-template-file`.
    #[arg(long, conflicts_with = "chat_template")]
    pub chat_template_file: Option<PathBuf>,

    /// `--verbose`.
    #[arg(long)]
    pub verbose: bool,

    /// `--slots`.
    #[arg(long, overrides_with = "no_slots")]
    pub slots: bool,

    /// `--no-slots`.
    #[arg(long)]
    pub no_slots: bool,

    /// `--slot-save-path`.
    #[arg(long)]
    pub slot_save_path: Option<PathBuf>,

    /// `--no-webui`.
    #[arg(long)]
    pub no_webui: bool,

    /// `--props`.
    #[arg(long)]
    pub props: bool,

    /// `--context-shift`.
    #[arg(long, overrides_with = "no_context_shift")]
    pub context_shift: bool,

    /// `--no-context-shift`.
    #[arg(long)]
    pub no_context_shift: bool,

    /// `--embedding`.
    #[arg(long)]
    pub embedding: bool,

    /// `--reranking`.
    #[arg(long)]
    pub reranking: bool,

    /// `--pooling`.
    #[arg(long)]
    pub pooling: Option<String>,

    /// `--reasoning-format`.
    #[arg(long)]
    pub reasoning_format: Option<String>,
}

/// The sampling flags: the server's defaults for a request that sets none
/// (llama.cpp's meanings and defaults).
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// `--temp`.
    #[arg(long)]
    pub temp: f32,

    /// `--seed`.
    #[arg(long)]
    pub seed: i64,

    /// `--top-k`.
    #[arg(long)]
    pub top_k: i32,

    /// `--top-p`.
    #[arg(long)]
    pub top_p: f32,

    /// `--min-p`.
    #[arg(long)]
    pub min_p: f32,

    /// `--repeat-penalty`.
    #[arg(long)]
    pub repeat_penalty: f32,

    /// `--repeat-last-n`.
    #[arg(long)]
    pub repeat_last_n: usize,
}

impl ServerArgs {
    /// Parse a command line as llama.cpp's server does (its spellings,
    /// its `LLAMA_ARG_*` variables from `env`; the command line wins);
    /// `--help` prints and exits.
    pub fn parse_with_env(
        args: impl IntoIterator<Item = OsString>,
        env: Lookup<'_>,
    ) -> Result<ServerArgs> {
        let a = match flags::parse_from::<ServerArgs>(Tool::Server, args, env) {
            Ok(a) => a,
            Err(ParseError::Flag(e)) => bail!("{e}"),
            Err(ParseError::Clap(e)) => {
                if matches!(
                    e.kind(),
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                ) {
                    let _ = e.print();
                    std::process::exit(0);
                }
                let msg = e.to_string();
                bail!("{}", msg.trim_start_matches("error: ").trim_end());
            }
        };
        a.check()?;
        Ok(a)
    }

    /// [`ServerArgs::parse_with_env`] with the process's environment.
    pub fn parse_from_args(args: impl IntoIterator<Item = OsString>) -> Result<ServerArgs> {
        Self::parse_with_env(args, &flags::process_env)
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
        self.moe_cache.alias()?;
        if self.moe_cache.moe_host_cache_mib.is_some() {
            // the host expert cache is built by llama-run only so far:
            // refused by name rather than parsed and ignored
            bail!("--moe-host-cache-mib: the host expert cache is not supported by llama-server yet (use llama-run)");
        }
        self.prefetch.slots()?;
        self.fit.check()?;
        // speculative decoding: the type, sizes and the draft's placement
        if self.spec.source()?.is_some() {
            self.spec.draft_placement(&self.placement)?;
        }
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
        assert!(parse("llama-server --moe-host-cache-mib 64")
            .unwrap_err()
            .to_string()
            .contains("--moe-host-cache-mib"));
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
