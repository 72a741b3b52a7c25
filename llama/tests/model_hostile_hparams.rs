//! Hostile hyper-parameters in an otherwise valid GGUF: loading either fails
//! with an error or gives a model that decodes; it never panics.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use common::or_skip;
use ggml_core::gguf::{GgufFile, GgufValue, GgufWriter};
use llama::{Context, ContextParams, Model, ModelParams};

const KEYS: [&str; 11] = [
    "qwen3moe.embedding_length",
    "qwen3moe.block_count",
    "qwen3moe.attention.head_count",
    "qwen3moe.attention.head_count_kv",
    "qwen3moe.expert_count",
    "qwen3moe.expert_used_count",
    "qwen3moe.expert_feed_forward_length",
    "qwen3moe.rope.dimension_count",
    "qwen3moe.context_length",
    "qwen3moe.vocab_size",
    "qwen3moe.feed_forward_length",
];

const VALUES: [u32; 10] = [0, 1, 2, 3, 7, 16, 63, 65, 1 << 20, u32::MAX];

fn with_kv(key: &str, v: GgufValue) -> GgufFile {
    with_kv_in(&common::lean_model_gguf("tiny-qwen3moe-f32"), key, v)
}

fn with_kv_in(gguf: &Path, key: &str, v: GgufValue) -> GgufFile {
    let f = GgufFile::open(gguf).expect("fixture");
    let mut w = GgufWriter::from_file(&f);
    w.set_kv(key, v);
    GgufFile::from_bytes(w.to_bytes().expect("write")).expect("reparse")
}

fn try_model(f: GgufFile) -> String {
    match Model::from_gguf(f, ModelParams::default()) {
        Err(e) => format!("error: {e}"),
        Ok(m) => {
            let m = Arc::new(m);
            let p = ContextParams {
                n_ctx: 64,
                n_batch: 64,
                n_ubatch: 64,
                n_threads: 1,
                ..Default::default()
            };
            match Context::new(m, p) {
                Err(e) => format!("context error: {e}"),
                Ok(mut c) => match c.decode(&[1, 2, 3], true) {
                    Ok(()) => "decoded".into(),
                    Err(e) => format!("decode error: {e}"),
                },
            }
        }
    }
}

#[test]
fn hostile_hparams_never_panic() {
    let mut outcomes = Vec::new();
    for key in KEYS {
        for v in VALUES {
            let f = with_kv(key, GgufValue::U32(v));
            let r = catch_unwind(AssertUnwindSafe(|| try_model(f)));
            let out = r.unwrap_or_else(|_| panic!("{key} = {v}: panicked"));
            outcomes.push(format!("{key} = {v}: {out}"));
        }
        // a value of the wrong type is an error naming the key
        let out = try_model(with_kv(key, GgufValue::from("sixty-four")));
        assert!(
            out.starts_with("error") && out.contains(key),
            "{key} as a string: {out}"
        );
    }
    let f = with_kv(
        "qwen3moe.attention.layer_norm_rms_epsilon",
        GgufValue::F32(f32::NAN),
    );
    let out = try_model(f);
    assert!(out.contains("layer_norm_rms_epsilon"), "NaN epsilon: {out}");
    for o in &outcomes {
        println!("{o}");
    }
    // the unchanged values decode, the absurd ones are refused
    assert!(outcomes.iter().any(|o| o.ends_with("decoded")));
    assert!(
        outcomes
            .iter()
            .any(|o| o.contains("block_count = 4294967295: error")),
        "{outcomes:#?}"
    );
}

/// The keys deepseek2 and gpt-oss add: every value loads with an error or
/// decodes, never panics.
#[test]
fn hostile_deepseek2_and_gptoss_hparams_never_panic() {
    let cases: [(&str, &[&str]); 2] = [
        (
            "tiny-deepseek2-f32",
            &[
                "deepseek2.attention.q_lora_rank",
                "deepseek2.attention.kv_lora_rank",
                "deepseek2.attention.key_length",
                "deepseek2.attention.value_length",
                "deepseek2.attention.key_length_mla",
                "deepseek2.attention.value_length_mla",
                "deepseek2.rope.dimension_count",
                "deepseek2.leading_dense_block_count",
                "deepseek2.expert_shared_count",
                "deepseek2.expert_group_count",
                "deepseek2.expert_group_used_count",
                "deepseek2.expert_gating_func",
                "deepseek2.expert_used_count",
                "deepseek2.attention.head_count_kv",
            ],
        ),
        (
            "tiny-gptoss-mxfp4",
            &[
                "gpt-oss.attention.sliding_window",
                "gpt-oss.attention.head_count_kv",
                "gpt-oss.attention.key_length",
                "gpt-oss.expert_used_count",
                "gpt-oss.rope.scaling.original_context_length",
            ],
        ),
    ];
    let (mut decoded, mut models) = (0, 0);
    for (model, keys) in cases {
        let gguf = or_skip!(common::model_gguf(model), continue);
        models += 1;
        for &key in keys {
            for v in VALUES {
                let f = with_kv_in(&gguf, key, GgufValue::U32(v));
                let r = catch_unwind(AssertUnwindSafe(|| try_model(f)));
                let out = r.unwrap_or_else(|_| panic!("{model}: {key} = {v}: panicked"));
                decoded += usize::from(out == "decoded");
            }
        }
    }
    assert!(models == 0 || decoded > 0);
}
