//! The speculative decoding flags (`llama-run` and `llama-server`), llama.cpp's spellings,
//! defaults and variables: the draft model (`-md`), `--spec-type`, the
//! draft sizes and probability, the draft's placement (`-ngld`, `-devd`,
//! `-cmoed`, `-ncmoed`, `-otd`) and the `ngram-simple` sizes. The field
//! that holds them is [`crate::args::speculative::SpecArgs`].

use super::sets::RUN_SERVER;
use crate::flags::spec::{Flag, Parse};

/// The speculative decoding flags.
pub static FLAGS: &[Flag] = &[
    Flag::new(
        "model_draft",
        &["-md", "--model-draft", "--spec-draft-model"],
        RUN_SERVER,
        "draft model for speculative decoding (default: unused)",
    )
    .takes("FNAME", Parse::Path)
    .env("LLAMA_ARG_SPEC_DRAFT_MODEL"),
    Flag::new(
        "spec_type",
        &["--spec-type"],
        RUN_SERVER,
        "type of speculative decoding: none, draft-simple (the draft model of -md; the default when -md is given), ngram-simple (draft-free: the tokens that followed the last earlier occurrence of the latest n-gram)",
    )
    .takes("TYPE", Parse::Str)
    .default("none")
    .env("LLAMA_ARG_SPEC_TYPE"),
    Flag::new(
        "draft_n_max",
        &["--spec-draft-n-max", "--draft-max", "--draft", "--draft-n"],
        RUN_SERVER,
        "number of tokens to draft for speculative decoding",
    )
    .takes("N", Parse::Usize)
    .default("3")
    .env("LLAMA_ARG_SPEC_DRAFT_N_MAX"),
    Flag::new(
        "draft_n_min",
        &["--spec-draft-n-min", "--draft-min", "--draft-n-min"],
        RUN_SERVER,
        "minimum number of draft tokens to use for speculative decoding",
    )
    .takes("N", Parse::Usize)
    .default("0")
    .env("LLAMA_ARG_SPEC_DRAFT_N_MIN"),
    Flag::new(
        "draft_p_min",
        &["--spec-draft-p-min", "--draft-p-min"],
        RUN_SERVER,
        "minimum speculative decoding probability (greedy)",
    )
    .takes("P", Parse::F32)
    .default("0")
    .env("LLAMA_ARG_SPEC_DRAFT_P_MIN"),
    Flag::new(
        "ngl_draft",
        &[
            "-ngld",
            "--spec-draft-ngl",
            "--gpu-layers-draft",
            "--n-gpu-layers-draft",
        ],
        RUN_SERVER,
        "max. number of draft model layers to store in VRAM: a number, auto (default) or all",
    )
    .takes("N", Parse::Str)
    .hyphen()
    .env("LLAMA_ARG_N_GPU_LAYERS_DRAFT"),
    Flag::new(
        "device_draft",
        &["-devd", "--spec-draft-device", "--device-draft"],
        RUN_SERVER,
        "comma-separated devices for the draft model (none = don't offload; default: follows --device)",
    )
    .takes("DEV[,DEV..]", Parse::Str),
    Flag::new(
        "cpu_moe_draft",
        &["-cmoed", "--spec-draft-cpu-moe", "--cpu-moe-draft"],
        RUN_SERVER,
        "keep all Mixture of Experts weights of the draft model in host memory",
    )
    .env("LLAMA_ARG_SPEC_DRAFT_CPU_MOE"),
    Flag::new(
        "n_cpu_moe_draft",
        &[
            "-ncmoed",
            "--spec-draft-n-cpu-moe",
            "--n-cpu-moe-draft",
            "--spec-draft-ncmoe",
        ],
        RUN_SERVER,
        "keep the MoE weights of the first N layers of the draft model in host memory",
    )
    .takes("N", Parse::Usize)
    .env("LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE"),
    Flag::new(
        "override_tensor_draft",
        &[
            "-otd",
            "--spec-draft-override-tensor",
            "--override-tensor-draft",
        ],
        RUN_SERVER,
        "tensor buffer overrides of the draft model (as -ot); may be repeated",
    )
    .takes("PATTERN=BACKEND,...", Parse::Str),
    Flag::new(
        "ngram_simple_size_n",
        &["--spec-ngram-simple-size-n"],
        RUN_SERVER,
        "ngram size N for ngram-simple speculative decoding, length of lookup n-gram",
    )
    .takes("N", Parse::Usize)
    .default("12"),
    Flag::new(
        "ngram_simple_size_m",
        &["--spec-ngram-simple-size-m"],
        RUN_SERVER,
        "ngram size M for ngram-simple speculative decoding, length of draft m-gram",
    )
    .takes("N", Parse::Usize)
    .default("48"),
];
