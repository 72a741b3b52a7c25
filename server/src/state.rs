//! What every handler shares ([`AppState`]: the decode thread's queue, the
//! model, the flags that shape answers, the counters) and the request's
//! generation parameters over the server's defaults.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use llama::Model;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::chat_fallback::ChatRender;
use crate::constraint::Grammars;
use crate::engine::{SlotsView, Task};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::request::{parse_params_with, Defaults, GenParams};

/// What every handler shares.
pub struct AppState {
    /// Queue of the decode thread.
    pub jobs: mpsc::Sender<Task>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The model (tokenizer, hparams).
    pub model: Arc<Model>,
    /// The model's name in the API.
    pub model_id: String,
    /// Other names a request may use for the model (the `-m` path).
    pub model_aliases: Vec<String>,
    /// `--api-key`.
    pub api_key: Option<String>,
    /// Cells of one slot.
    pub n_slot_ctx: usize,
    /// Slots (`-np`): the most choices (`n`) one request may ask for.
    pub n_slots: usize,
    /// `-n`: max_tokens of a request that sets none (`None`: up to the slot's context).
    pub default_max_tokens: Option<usize>,
    /// `--timeout`.
    pub timeout: Duration,
    /// Renders chat messages (the ChatML fallback until `llama::chat` is merged).
    pub chat_render: ChatRender,
    /// Bytes of the longest token's text (bounds the tokens of a prompt from below).
    pub max_token_bytes: usize,
    /// Unix time the server started (`created` of /v1/models).
    pub created: u64,
    /// `--alias` given: OpenAI answers name the model by it.
    pub has_alias: bool,
    /// The model file (`/props` `model_path`).
    pub model_path: String,
    /// The chat template's text (`/props`, tool call format).
    pub chat_template: String,
    /// Generation defaults (the sampling flags; `POST /props` may change them).
    pub defaults: RwLock<Defaults>,
    /// Context shift on (`--no-context-shift` turns it off).
    pub ctx_shift: bool,
    /// `--slots`: `/slots` served.
    pub slots_enabled: bool,
    /// `--slot-save-path`.
    pub slot_save_path: Option<PathBuf>,
    /// `--props`: `POST /props` allowed.
    pub props_enabled: bool,
    /// The web UI at `/` (off with `--no-webui`).
    pub webui: bool,
    /// `--verbose`.
    pub verbose: bool,
    /// `--embedding`.
    pub embedding: bool,
    /// `--pooling`.
    pub pooling: crate::args::Pooling,
    /// `--reranking`.
    pub reranking: bool,
    /// The slots' state (`/slots`).
    pub view: SlotsView,
    /// Compiles `grammar` / `json_schema` / `response_format` for the vocabulary.
    pub grammars: Arc<Grammars>,
    /// The server speculates (`-md`, `--spec-type ngram-simple`).
    pub speculative: bool,
}

impl AppState {
    /// The request's parameters with the server's defaults.
    pub fn params(&self, m: &Map<String, Value>) -> Result<GenParams, ApiError> {
        let d = self
            .defaults
            .read()
            .map_err(|_| ApiError::internal("the defaults lock is poisoned"))?;
        parse_params_with(m, &d)
    }

    /// `n_predict` of a request: its limit and the server's `-n`, the
    /// smaller; `None`: no limit but the context.
    pub fn n_predict(&self, p: &GenParams) -> Option<usize> {
        match (p.max_tokens, self.default_max_tokens) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The state as the handlers hold it.
pub type Shared = Arc<AppState>;
