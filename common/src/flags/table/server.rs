//! `llama-server`'s own flags, as llama.cpp's server names them.

use super::sets::SERVER;
use crate::flags::spec::{Flag, Parse};

/// `llama-server`'s own flags.
pub static FLAGS: &[Flag] = &[
    Flag::new(
        "alias",
        &["-a", "--alias"],
        SERVER,
        "model name in the API (`model` field, /v1/models); default: the file name",
    )
    .takes("NAME", Parse::Str)
    .env("LLAMA_ARG_ALIAS"),
    Flag::new(
        "host",
        &["--host"],
        SERVER,
        "IP address to listen on",
    )
    .takes("HOST", Parse::Str)
    .default("127.0.0.1")
    .env("LLAMA_ARG_HOST"),
    Flag::new(
        "port",
        &["--port"],
        SERVER,
        "port to listen on (0: any free port)",
    )
    .takes("PORT", Parse::U16)
    .default("8080")
    .env("LLAMA_ARG_PORT"),
    Flag::new(
        "parallel",
        &["-np", "--parallel"],
        SERVER,
        "number of slots (sequences decoded in parallel)",
    )
    .takes("N", Parse::Usize)
    .default("4")
    .env("LLAMA_ARG_N_PARALLEL"),
    Flag::new(
        "ctx_size",
        &["-c", "--ctx-size"],
        SERVER,
        "total context size in tokens, split evenly over the slots (0: the model's training context)",
    )
    .takes("N", Parse::Usize)
    .default("4096")
    .env("LLAMA_ARG_CTX_SIZE"),
    Flag::new(
        "cont_batching",
        &["-cb", "--cont-batching"],
        SERVER,
        "continuous batching: requests join and leave the running batch between decodes (default on)",
    )
    .env_bool("LLAMA_ARG_CONT_BATCHING"),
    Flag::new(
        "no_cont_batching",
        &["-nocb", "--no-cont-batching"],
        SERVER,
        "no continuous batching: a new request waits until every running one has finished",
    )
    .env_bool("LLAMA_ARG_CONT_BATCHING")
    .negates("cont_batching"),
    Flag::new(
        "threads",
        &["-t", "--threads"],
        SERVER,
        "number of CPU threads (default: all cores)",
    )
    .takes("N", Parse::Usize)
    .env("LLAMA_ARG_THREADS"),
    Flag::new(
        "cache_type_k",
        &["-ctk", "--cache-type-k"],
        SERVER,
        "KV cache type of K: f16 or f32",
    )
    .takes("TYPE", Parse::Str)
    .default("f16")
    .env("LLAMA_ARG_CACHE_TYPE_K"),
    Flag::new(
        "cache_type_v",
        &["-ctv", "--cache-type-v"],
        SERVER,
        "KV cache type of V: f16 or f32",
    )
    .takes("TYPE", Parse::Str)
    .default("f16")
    .env("LLAMA_ARG_CACHE_TYPE_V"),
    Flag::new(
        "api_key",
        &["--api-key"],
        SERVER,
        "API key clients must send as `Authorization: Bearer KEY`",
    )
    .takes("KEY", Parse::Str)
    .env("LLAMA_API_KEY"),
    Flag::new(
        "timeout",
        &["-to", "--timeout"],
        SERVER,
        "seconds a request may wait for its next token (queue included) before it is answered with a timeout",
    )
    .takes("N", Parse::U64)
    .default("600")
    .env("LLAMA_ARG_TIMEOUT"),
    Flag::new(
        "max_queue",
        &["--max-queue"],
        SERVER,
        "requests that may wait for a slot; past that, 503",
    )
    .takes("N", Parse::Usize)
    .default("64"),
    Flag::new(
        "n_predict",
        &["-n", "--n-predict", "--predict"],
        SERVER,
        "default max_tokens of a request that sets none (-1: up to the slot's context)",
    )
    .takes("N", Parse::I64)
    .default("-1")
    .negative()
    .env("LLAMA_ARG_N_PREDICT"),
    Flag::new(
        "metrics",
        &["--metrics"],
        SERVER,
        "/metrics is always served (accepted for llama.cpp compatibility)",
    )
    .env("LLAMA_ARG_ENDPOINT_METRICS"),
    Flag::new(
        "temp",
        &["--temp", "--temperature"],
        SERVER,
        "temperature (0: greedy)",
    )
    .takes("T", Parse::F32)
    .default("0.8")
    .env("LLAMA_ARG_TEMPERATURE"),
    Flag::new(
        "seed",
        &["-s", "--seed"],
        SERVER,
        "RNG seed (-1: a fresh one per request)",
    )
    .takes("N", Parse::I64)
    .default("-1")
    .negative(),
    Flag::new(
        "top_k",
        &["--top-k"],
        SERVER,
        "top-k sampling (0: off)",
    )
    .takes("N", Parse::I32)
    .default("40")
    .negative()
    .env("LLAMA_ARG_TOP_K"),
    Flag::new(
        "top_p",
        &["--top-p"],
        SERVER,
        "top-p sampling (1.0: off)",
    )
    .takes("P", Parse::F32)
    .default("0.95")
    .env("LLAMA_ARG_TOP_P"),
    Flag::new(
        "min_p",
        &["--min-p"],
        SERVER,
        "min-p sampling (0.0: off)",
    )
    .takes("P", Parse::F32)
    .default("0.05")
    .env("LLAMA_ARG_MIN_P"),
    Flag::new(
        "repeat_penalty",
        &["--repeat-penalty"],
        SERVER,
        "penalty of repeated tokens (1.0: off)",
    )
    .takes("P", Parse::F32)
    .default("1")
    .env("LLAMA_ARG_REPEAT_PENALTY"),
    Flag::new(
        "repeat_last_n",
        &["--repeat-last-n"],
        SERVER,
        "tokens the repeat penalty looks back on",
    )
    .takes("N", Parse::Usize)
    .default("64"),
    Flag::new(
        "keep",
        &["--keep"],
        SERVER,
        "tokens of the prompt kept when the context shifts (-1: all)",
    )
    .takes("N", Parse::I64)
    .default("0")
    .negative(),
    Flag::new(
        "jinja",
        &["--jinja"],
        SERVER,
        "accepted for llama.cpp compatibility: chat templates are always Jinja here",
    )
    .env_bool("LLAMA_ARG_JINJA"),
    Flag::new(
        "chat_template",
        &["--chat-template"],
        SERVER,
        "chat template: a built-in name (chatml, llama3, command-r, ...; see `--chat-template list`), a template of the model (tokenizer.chat_template.NAME), or the Jinja text itself",
    )
    .takes("NAME|TEMPLATE", Parse::Str)
    .env("LLAMA_ARG_CHAT_TEMPLATE"),
    Flag::new(
        "chat_template_file",
        &["--chat-template-file"],
        SERVER,
        "read the chat template from a file",
    )
    .takes("FILE", Parse::Path)
    .env("LLAMA_ARG_CHAT_TEMPLATE_FILE"),
    Flag::new(
        "verbose",
        &["-v", "--verbose"],
        SERVER,
        "add `__verbose` (the prompt as rendered, special tokens shown) to OpenAI answers",
    ),
    Flag::new(
        "slots",
        &["--slots"],
        SERVER,
        "serve /slots (off by default, as llama.cpp)",
    )
    .env_bool("LLAMA_ARG_ENDPOINT_SLOTS"),
    Flag::new(
        "no_slots",
        &["--no-slots"],
        SERVER,
        "do not serve /slots (the default)",
    )
    .env_bool("LLAMA_ARG_ENDPOINT_SLOTS")
    .negates("slots"),
    Flag::new(
        "slot_save_path",
        &["--slot-save-path"],
        SERVER,
        "folder where /slots/{id}?action=save|restore keep their files",
    )
    .takes("PATH", Parse::Path),
    Flag::new(
        "no_webui",
        &["--no-webui"],
        SERVER,
        "do not serve the web UI at /",
    )
    .env_bool("LLAMA_ARG_UI")
    .negates("webui"),
    Flag::new(
        "props",
        &["--props"],
        SERVER,
        "let POST /props change the server's default generation settings",
    )
    .env("LLAMA_ARG_ENDPOINT_PROPS"),
    Flag::new(
        "context_shift",
        &["--context-shift"],
        SERVER,
        "context shift on (the default): a generation that fills a slot's context drops the oldest tokens after --keep and goes on",
    )
    .env_bool("LLAMA_ARG_CONTEXT_SHIFT"),
    Flag::new(
        "no_context_shift",
        &["--no-context-shift"],
        SERVER,
        "no context shift: a generation stops when the slot's context is full, and a prompt longer than the context is refused",
    )
    .env_bool("LLAMA_ARG_CONTEXT_SHIFT")
    .negates("context_shift"),
    Flag::new(
        "embedding",
        &["--embedding", "--embeddings"],
        SERVER,
        "serve /embedding and /v1/embeddings",
    )
    .env("LLAMA_ARG_EMBEDDINGS"),
    Flag::new(
        "reranking",
        &["--reranking", "--rerank"],
        SERVER,
        "serve /rerank (needs a model with a classification head: rank pooling)",
    )
    .env("LLAMA_ARG_RERANKING"),
    Flag::new(
        "pooling",
        &["--pooling"],
        SERVER,
        "pooling of the embeddings: none, mean, cls or last (default: mean)",
    )
    .takes("TYPE", Parse::Str)
    .env("LLAMA_ARG_POOLING"),
    Flag::new(
        "reasoning_format",
        &["--reasoning-format"],
        SERVER,
        "reasoning format of the answers: deepseek (thoughts in `reasoning_content`) or none",
    )
    .takes("FORMAT", Parse::Str)
    .env("LLAMA_ARG_THINK"),
];
