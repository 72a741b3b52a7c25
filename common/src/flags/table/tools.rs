//! The flags of `llama-quantize`, `llama-tokenize`, `llama-moe-cache` and
//! `llama-timeline`.

use super::sets::{MOE_CACHE, QUANTIZE, TIMELINE, TOKENIZE};
use crate::flags::spec::{Flag, Parse};

/// Their flags.
pub static FLAGS: &[Flag] = &[
    // llama-quantize
    Flag::new(
        "allow_requantize",
        &["--allow-requantize"],
        QUANTIZE,
        "allow re-quantizing tensors that are already quantized (loses quality)",
    ),
    Flag::new(
        "pure",
        &["--pure"],
        QUANTIZE,
        "every matrix to TYPE's base type, without the mix's per-tensor choices",
    ),
    // llama-tokenize
    Flag::new(
        "model",
        &["-m", "--model"],
        TOKENIZE,
        "model or vocabulary-only GGUF file",
    )
    .takes("FNAME", Parse::Path)
    .env("LLAMA_ARG_MODEL"),
    Flag::new(
        "prompt",
        &["-p", "--prompt"],
        TOKENIZE,
        "text to tokenize (escapes such as \\n are processed unless --no-escape)",
    )
    .takes("TEXT", Parse::Str),
    Flag::new(
        "file",
        &["-f", "--file"],
        TOKENIZE,
        "file whose content is tokenized, byte for byte",
    )
    .takes("FNAME", Parse::Path),
    Flag::new(
        "stdin",
        &["--stdin"],
        TOKENIZE,
        "read the text from standard input",
    ),
    Flag::new(
        "ids",
        &["--ids"],
        TOKENIZE,
        "print only the ids, as one list: [1, 2, 3]",
    ),
    Flag::new(
        "no_bos",
        &["--no-bos"],
        TOKENIZE,
        "do not add BOS (or EOS) even if the vocabulary asks for it (add_special = false)",
    ),
    Flag::new(
        "add_special",
        &["--add-special"],
        TOKENIZE,
        "add BOS/EOS as the vocabulary asks (the default)",
    ),
    Flag::new(
        "parse_special",
        &["--parse-special"],
        TOKENIZE,
        "turn control-token text such as <|im_start|> into those tokens (the default)",
    ),
    Flag::new(
        "no_parse_special",
        &["--no-parse-special"],
        TOKENIZE,
        "tokenize control-token text as plain text",
    ),
    Flag::new(
        "show_count",
        &["--show-count"],
        TOKENIZE,
        "print the number of tokens at the end",
    ),
    Flag::new(
        "log_disable",
        &["--log-disable"],
        TOKENIZE,
        "accepted for llama.cpp compatibility (nothing is logged anyway)",
    )
    .hidden(),
    // llama-moe-cache
    Flag::new(
        "import_jsonl",
        &["--import-jsonl"],
        MOE_CACHE,
        "convert a JSONL routing trace (one {\"layer\", \"token_pos\", \"experts\"} object a line, optional \"seq\" / \"problem_id\") for the model of -m",
    )
    .takes("IN.jsonl", Parse::Path),
    Flag::new(
        "synth_trace",
        &["--synth-trace"],
        MOE_CACHE,
        "generate a synthetic trace for the shape of -m's model: random, zipf or topic (trained-like)",
    )
    .takes("KIND", Parse::Own),
    Flag::new(
        "tokens",
        &["--tokens"],
        MOE_CACHE,
        "tokens of the synthetic trace",
    )
    .takes("N", Parse::Usize)
    .default("4000"),
    Flag::new(
        "trace_out",
        &["--trace-out"],
        MOE_CACHE,
        "write the imported or synthetic trace to this file",
    )
    .takes("OUT.trace", Parse::Path),
    Flag::new(
        "no_replay",
        &["--no-replay"],
        MOE_CACHE,
        "only write the imported or synthetic trace (no replay)",
    ),
    Flag::new(
        "seed",
        &["--seed"],
        MOE_CACHE,
        "seed of the synthetic trace",
    )
    .takes("N", Parse::U64)
    .default("1"),
    Flag::new(
        "zipf_s",
        &["--zipf-s"],
        MOE_CACHE,
        "Zipf exponent of each layer's expert popularity (zipf, topic)",
    )
    .takes("S", Parse::F64),
    Flag::new(
        "topic_len",
        &["--topic-len"],
        MOE_CACHE,
        "mean tokens of a topic (topic)",
    )
    .takes("N", Parse::F64),
    Flag::new(
        "topic_experts",
        &["--topic-experts"],
        MOE_CACHE,
        "experts of a topic's working set per layer, 0 = 3 x n_used (topic)",
    )
    .takes("N", Parse::U32),
    Flag::new(
        "p_repeat",
        &["--p-repeat"],
        MOE_CACHE,
        "probability a pick repeats one of the previous token's (topic)",
    )
    .takes("P", Parse::F64),
    Flag::new(
        "p_layer",
        &["--p-layer"],
        MOE_CACHE,
        "probability a pick follows the previous layer's picks (topic)",
    )
    .takes("P", Parse::F64),
    Flag::new(
        "p_global",
        &["--p-global"],
        MOE_CACHE,
        "probability a pick comes from the layer's whole popularity (topic)",
    )
    .takes("P", Parse::F64),
    Flag::new(
        "sizes",
        &["--sizes"],
        MOE_CACHE,
        "cache sizes in slots per group, comma-separated (default: n_used to n_expert slots per layer)",
    )
    .takes("N,..", Parse::Own),
    Flag::new(
        "mib",
        &["--mib"],
        MOE_CACHE,
        "cache sizes as --moe-cache-mib budgets, comma-separated",
    )
    .takes("MIB,..", Parse::Own),
    Flag::new(
        "policies",
        &["--policies"],
        MOE_CACHE,
        "policies to replay, comma-separated (Belady always runs)",
    )
    .takes("P,..", Parse::Own),
    Flag::new(
        "max_batch",
        &["--max-batch"],
        MOE_CACHE,
        "largest ubatch that uses the cache (--moe-cache-max-batch)",
    )
    .takes("N", Parse::Usize)
    .default("32"),
    Flag::new(
        "tier",
        &["--tier"],
        MOE_CACHE,
        "the cache replayed: device (--moe-cache-mib) or host (--moe-host-cache-mib, which serves every ubatch, cut to what it holds)",
    )
    .takes("device|host", Parse::Str)
    .default("device"),
    Flag::new(
        "json",
        &["--json"],
        MOE_CACHE,
        "print one JSON array instead of the table (with --predict, an object: {\"sweep\": [..], \"predict\": [..]})",
    ),
    Flag::new(
        "plot",
        &["--plot"],
        MOE_CACHE,
        "draw hit rate against size to this SVG file",
    )
    .takes("FILE.svg", Parse::Path),
    Flag::new(
        "predict",
        &["--predict"],
        MOE_CACHE,
        "also replay the history predictor of --moe-predict history on the trace, in front of the cache at each size with the first of --policies (default hlfu): recall, precision, early uploads, hit rate with and without it",
    ),
    Flag::new(
        "predict_decay",
        &["--predict-decay"],
        MOE_CACHE,
        "the history predictor's decay of its recency average (0..=1)",
    )
    .takes("D", Parse::F32),
    Flag::new(
        "predict_layer_weight",
        &["--predict-layer-weight"],
        MOE_CACHE,
        "the history predictor's weight of the transitions from the layer before (0..=1)",
    )
    .takes("W", Parse::F32),
    Flag::new(
        "predict_min_score",
        &["--predict-min-score"],
        MOE_CACHE,
        "the least score (about the chance of use) of a guessed expert not in the cache for the history predictor to upload it early (0..=1)",
    )
    .takes("S", Parse::F32),
    Flag::new(
        "advise",
        &["--advise"],
        MOE_CACHE,
        "print the flags to use on a device of --vram-mib MiB",
    ),
    Flag::new(
        "vram_mib",
        &["--vram-mib"],
        MOE_CACHE,
        "device memory available for the cache (MiB), with --advise",
    )
    .takes("N", Parse::F64),
    Flag::new(
        "link_gbps",
        &["--link-gbps"],
        MOE_CACHE,
        "host-to-device link speed in GB/s, with --advise",
    )
    .takes("G", Parse::F64)
    .default("25"),
    Flag::new(
        "model",
        &["-m", "--model"],
        MOE_CACHE,
        "the model the trace should come from (refused when shapes differ)",
    )
    .takes("FNAME", Parse::Path),
    // llama-timeline
    Flag::new(
        "from_us",
        &["--from-us"],
        TIMELINE,
        "start of the window, microseconds of simulated time",
    )
    .takes("US", Parse::F64),
    Flag::new(
        "to_us",
        &["--to-us"],
        TIMELINE,
        "end of the window, microseconds of simulated time",
    )
    .takes("US", Parse::F64),
    Flag::new(
        "last_graph",
        &["--last-graph"],
        TIMELINE,
        "draw only the last graph of the trace (one decode step when the run ended with one)",
    ),
];
