//! `llama-run`'s own flags (llama.cpp's `llama-cli` / `llama-completion`
//! ones where it has them): the prompt, sampling, the chat, the output
//! files and the synthesis options.

use super::sets::{RUN, RUN_TOKENIZE};
use crate::flags::spec::{Flag, Parse};

/// `llama-run`'s own flags.
pub static FLAGS: &[Flag] = &[
    Flag::new(
        "prompt",
        &["-p", "--prompt"],
        RUN,
        "prompt to start generation with (escapes such as \\n are processed unless --no-escape) [default: \"Once upon a time\"]",
    )
    .takes("PROMPT", Parse::Str),
    Flag::new(
        "file",
        &["-f", "--file"],
        RUN,
        "a file containing the prompt (taken byte for byte)",
    )
    .takes("FNAME", Parse::Path),
    Flag::new(
        "n_predict",
        &["-n", "--n-predict", "--predict"],
        RUN,
        "number of tokens to predict (-1 = until end of generation or a full context)",
    )
    .takes("N", Parse::I64)
    .default("128")
    .negative()
    .env("LLAMA_ARG_N_PREDICT"),
    Flag::new(
        "threads",
        &["-t", "--threads"],
        RUN,
        "number of CPU threads (default and -1: all cores)",
    )
    .takes("N", Parse::I64)
    .negative()
    .env("LLAMA_ARG_THREADS"),
    Flag::new(
        "ctx_size",
        &["-c", "--ctx-size"],
        RUN,
        "size of the prompt context (0 = from the model)",
    )
    .takes("N", Parse::Usize)
    .default("4096")
    .env("LLAMA_ARG_CTX_SIZE"),
    Flag::new(
        "seed",
        &["-s", "--seed"],
        RUN,
        "RNG seed (-1 = random)",
    )
    .takes("SEED", Parse::I64)
    .default("-1")
    .negative(),
    Flag::new(
        "temp",
        &["--temp", "--temperature"],
        RUN,
        "temperature (0 = greedy)",
    )
    .takes("N", Parse::F32)
    .default("0.8")
    .env("LLAMA_ARG_TEMPERATURE"),
    Flag::new(
        "top_k",
        &["--top-k"],
        RUN,
        "top-k sampling (0 = disabled)",
    )
    .takes("N", Parse::I32)
    .default("40")
    .negative()
    .env("LLAMA_ARG_TOP_K"),
    Flag::new(
        "top_p",
        &["--top-p"],
        RUN,
        "top-p sampling (1.0 = disabled)",
    )
    .takes("N", Parse::F32)
    .default("0.95")
    .env("LLAMA_ARG_TOP_P"),
    Flag::new(
        "min_p",
        &["--min-p"],
        RUN,
        "min-p sampling (0.0 = disabled)",
    )
    .takes("N", Parse::F32)
    .default("0.05")
    .env("LLAMA_ARG_MIN_P"),
    Flag::new(
        "repeat_penalty",
        &["--repeat-penalty"],
        RUN,
        "penalize repeated sequences of tokens (1.0 = disabled)",
    )
    .takes("N", Parse::F32)
    .default("1")
    .env("LLAMA_ARG_REPEAT_PENALTY"),
    Flag::new(
        "repeat_last_n",
        &["--repeat-last-n"],
        RUN,
        "last n tokens to consider for the repeat penalty (0 = disabled, -1 = context size)",
    )
    .takes("N", Parse::I64)
    .default("64")
    .negative(),
    Flag::new(
        "conversation",
        &["-cnv", "--conversation"],
        RUN,
        "conversation mode: chat turn by turn through the chat template (default when the model has a template and stdin is a terminal)",
    ),
    Flag::new(
        "no_conversation",
        &["-no-cnv", "--no-conversation"],
        RUN,
        "never enter conversation mode",
    ),
    Flag::new(
        "system_prompt",
        &["-sys", "--system-prompt"],
        RUN,
        "system prompt of the conversation",
    )
    .takes("PROMPT", Parse::Str),
    Flag::new(
        "chat_template",
        &["--chat-template"],
        RUN,
        "chat template: a file, a named template of the model (tokenizer.chat_template.NAME), or `chatml`; default: the model's own",
    )
    .takes("NAME|FILE", Parse::Str)
    .env("LLAMA_ARG_CHAT_TEMPLATE"),
    Flag::new(
        "chat_template_file",
        &["--chat-template-file"],
        RUN,
        "read the chat template from a file",
    )
    .takes("FILE", Parse::Path)
    .env("LLAMA_ARG_CHAT_TEMPLATE_FILE"),
    Flag::new(
        "chat_render",
        &["--chat-render"],
        RUN,
        "render a conversation (a JSON list of {\"role\", \"content\"} messages, or an object with \"messages\") through the chat template, print it byte for byte and exit; needs no model",
    )
    .takes("MESSAGES.json", Parse::Path),
    Flag::new(
        "chat_bos",
        &["--chat-bos"],
        RUN,
        "bos_token for the template (default: the model's BOS text, or empty)",
    )
    .takes("S", Parse::Str),
    Flag::new(
        "chat_eos",
        &["--chat-eos"],
        RUN,
        "eos_token for the template (default: the model's EOS text, or empty)",
    )
    .takes("S", Parse::Str),
    Flag::new(
        "no_generation_prompt",
        &["--no-generation-prompt"],
        RUN,
        "with --chat-render: do not end with the assistant's turn opening",
    ),
    Flag::new(
        "jinja",
        &["--jinja"],
        RUN,
        "use the Jinja chat template (always on; accepted for llama.cpp compatibility)",
    )
    .env_bool("LLAMA_ARG_JINJA"),
    Flag::new(
        "threads_batch",
        &["-tb", "--threads-batch"],
        RUN,
        "threads for prompt batches (-1 = as -t); one-token decodes run on -t threads, as llama.cpp's --threads-batch",
    )
    .takes("N", Parse::I64)
    .negative(),
    Flag::new(
        "cache_type_k",
        &["-ctk", "--cache-type-k"],
        RUN,
        "KV cache type for K: f16 (default), f32, bf16, q8_0, q4_0",
    )
    .takes("TYPE", Parse::Str)
    .default("f16")
    .env("LLAMA_ARG_CACHE_TYPE_K"),
    Flag::new(
        "cache_type_v",
        &["-ctv", "--cache-type-v"],
        RUN,
        "KV cache type for V: f16 (default), f32, bf16, q8_0, q4_0 (a quantized V needs -fa)",
    )
    .takes("TYPE", Parse::Str)
    .default("f16")
    .env("LLAMA_ARG_CACHE_TYPE_V"),
    Flag::new(
        "ignore_eos",
        &["--ignore-eos"],
        RUN,
        "never stop at an end-of-generation token (they are not sampled)",
    ),
    Flag::new(
        "reverse_prompt",
        &["-r", "--reverse-prompt"],
        RUN,
        "stop when the generated text ends with PROMPT; may be repeated",
    )
    .takes("PROMPT", Parse::Str),
    Flag::new(
        "presence_penalty",
        &["--presence-penalty"],
        RUN,
        "repeat alpha presence penalty (0.0 = disabled)",
    )
    .takes("N", Parse::F32)
    .default("0")
    .negative()
    .env("LLAMA_ARG_PRESENCE_PENALTY"),
    Flag::new(
        "frequency_penalty",
        &["--frequency-penalty"],
        RUN,
        "repeat alpha frequency penalty (0.0 = disabled)",
    )
    .takes("N", Parse::F32)
    .default("0")
    .negative()
    .env("LLAMA_ARG_FREQUENCY_PENALTY"),
    Flag::new(
        "list_devices",
        &["--list-devices"],
        RUN,
        "print the available devices and exit",
    ),
    Flag::new(
        "no_escape",
        &["--no-escape"],
        RUN_TOKENIZE,
        "do not process escapes in -p (\\n, \\t, \\\\, ...)",
    ),
    Flag::new(
        "no_display_prompt",
        &["--no-display-prompt"],
        RUN,
        "do not print the prompt before the generated text",
    ),
    Flag::new(
        "verbose",
        &["-v", "--verbose"],
        RUN,
        "also print the placement of every tensor and the scheduler's plan",
    ),
    Flag::new(
        "logits_out",
        &["--logits-out"],
        RUN,
        "write float32 LE logits: every prompt position, then one row after each generated token is fed",
    )
    .takes("FILE", Parse::Path),
    Flag::new(
        "tokens_out",
        &["--tokens-out"],
        RUN,
        "write int32 LE token ids: the prompt's, then the generated ones",
    )
    .takes("FILE", Parse::Path),
    Flag::new(
        "timeline_out",
        &["--timeline-out"],
        RUN,
        "write every op, copy and wait of the run as a Chrome trace (open in Perfetto; see docs/timeline.md): from the simulated clock on a sim device, from CUDA events (wall-clock) on a CUDA device",
    )
    .takes("FILE.json", Parse::Path),
    Flag::new(
        "expert_trace_out",
        &["--expert-trace-out"],
        RUN,
        "write the routing trace (every ubatch's expert ids per MoE layer) for llama-moe-cache (see docs/moe-cache-tuning.md)",
    )
    .takes("FILE", Parse::Path),
    Flag::new(
        "expert_trace_in",
        &["--expert-trace-in"],
        RUN,
        "forced routing: every MoE layer uses this trace's expert ids instead of its router's (token i takes trace token i, wrapping; weights stay the router's); for measuring the offload path: the text is not the model's",
    )
    .takes("FILE", Parse::Path),
    Flag::new(
        "stats_out",
        &["--stats-out"],
        RUN,
        "write the summary as one JSON object",
    )
    .takes("FILE", Parse::Path),
    Flag::new(
        "synth",
        &["--synth"],
        RUN,
        "write a synthetic model to OUT.gguf and exit (see the synthesis options)",
    )
    .takes("OUT.gguf", Parse::Path),
    Flag::new(
        "arch",
        &["--arch"],
        RUN,
        "architecture of the synthetic model: qwen3moe, or deepseek2 / gpt-oss with DeepSeek-V3's / GPT-OSS-120B's layer shapes (2 layers) where the flags below are not given",
    )
    .takes("ARCH", Parse::Str)
    .default("qwen3moe"),
    Flag::new(
        "layers",
        &["--layers"],
        RUN,
        "decoder layers [default: 4; deepseek2, gpt-oss: 2]",
    )
    .takes("LAYERS", Parse::Usize),
    Flag::new(
        "experts",
        &["--experts"],
        RUN,
        "experts per layer [default: 16; deepseek2: 256, gpt-oss: 128]",
    )
    .takes("EXPERTS", Parse::Usize),
    Flag::new(
        "used",
        &["--used"],
        RUN,
        "experts used per token [default: 4; deepseek2: 8, gpt-oss: 4]",
    )
    .takes("USED", Parse::Usize),
    Flag::new(
        "embd",
        &["--embd"],
        RUN,
        "embedding width [default: 256; deepseek2: 7168, gpt-oss: 2880]",
    )
    .takes("EMBD", Parse::Usize),
    Flag::new(
        "ff",
        &["--ff"],
        RUN,
        "width of one expert's FFN [default: 256; deepseek2: 2048, gpt-oss: 2880]",
    )
    .takes("FF", Parse::Usize),
    Flag::new(
        "heads",
        &["--heads"],
        RUN,
        "attention heads (default: embd / head-dim; deepseek2: 128, gpt-oss: 64)",
    )
    .takes("HEADS", Parse::Usize),
    Flag::new(
        "heads_kv",
        &["--heads-kv"],
        RUN,
        "key/value heads (default: heads / 4 when divisible, else heads; gpt-oss: 8; deepseek2 always caches one latent head)",
    )
    .takes("HEADS_KV", Parse::Usize),
    Flag::new(
        "head_dim",
        &["--head-dim"],
        RUN,
        "head dimension (default: 128, or embd / 4 below 512; gpt-oss: 64; deepseek2: 128, which sets its MLA widths in DeepSeek-V3's ratios)",
    )
    .takes("HEAD_DIM", Parse::Usize),
    Flag::new(
        "vocab",
        &["--vocab"],
        RUN,
        "vocabulary size (default: the ~520-token byte-level BPE vocabulary; larger sizes pad it, e.g. 151936 for Qwen3's output-head cost)",
    )
    .takes("VOCAB", Parse::Usize),
    Flag::new(
        "ty",
        &["--type"],
        RUN,
        "type of the weight matrices (norms and the router stay F32)",
    )
    .takes("TY", Parse::Str)
    .default("F16"),
    Flag::new(
        "synth_seed",
        &["--synth-seed"],
        RUN,
        "seed of the synthetic weights",
    )
    .takes("SYNTH_SEED", Parse::U64)
    .default("42"),
];
