//! Bad input gets a clear error naming the problem, never a panic: a GGUF
//! with a missing or misshapen tensor, an unknown architecture, a prompt
//! longer than the context, a token id out of range.

mod common;

use std::sync::Arc;

use ggml_core::gguf::{GgufFile, GgufValue, GgufWriter};
use llama::{Context, ContextParams, LlamaError, Model, ModelParams};

fn fixture() -> GgufFile {
    GgufFile::open(common::lean_model_gguf("tiny-qwen3moe-f32")).expect("fixture")
}

/// Rebuild the fixture with `edit` applied to each tensor (`None` drops it)
/// and `kv` applied to the metadata.
fn rebuild(
    edit: impl Fn(&str, &[i64], &[u8]) -> Option<(Vec<i64>, Vec<u8>)>,
    kv: impl Fn(&mut GgufWriter),
) -> GgufFile {
    let f = fixture();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        w.set_kv(k.clone(), v.clone());
    }
    kv(&mut w);
    for t in f.tensors() {
        if let Some((ne, data)) = edit(&t.name, t.shape(), f.tensor_data(t)) {
            w.add_tensor(t.name.clone(), &ne, t.ty, data)
                .expect("add tensor");
        }
    }
    GgufFile::from_bytes(w.to_bytes().expect("write")).expect("reparse")
}

fn load_err(f: GgufFile) -> String {
    match Model::from_gguf(f, ModelParams::default()) {
        Ok(_) => panic!("loading should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_tensor_is_named() {
    let f = rebuild(
        |n, ne, d| (n != "blk.1.ffn_down_exps.weight").then(|| (ne.to_vec(), d.to_vec())),
        |_| {},
    );
    let e = load_err(f);
    assert!(
        e.contains("missing tensor 'blk.1.ffn_down_exps.weight'"),
        "{e}"
    );
}

#[test]
fn misshapen_tensor_is_named() {
    // attn_q with half its rows
    let f = rebuild(
        |n, ne, d| {
            if n == "blk.0.attn_q.weight" {
                Some((vec![ne[0], ne[1] / 2], d[..d.len() / 2].to_vec()))
            } else {
                Some((ne.to_vec(), d.to_vec()))
            }
        },
        |_| {},
    );
    let e = load_err(f);
    assert!(
        e.contains("blk.0.attn_q.weight") && e.contains("expected"),
        "{e}"
    );
}

#[test]
fn unknown_architecture_lists_supported() {
    let f = rebuild(
        |_, ne, d| Some((ne.to_vec(), d.to_vec())),
        |w| {
            w.set_kv("general.architecture", GgufValue::from("mamba9"));
        },
    );
    let e = load_err(f);
    assert!(
        e.contains("unsupported architecture 'mamba9'") && e.contains("qwen3moe"),
        "{e}"
    );
}

#[test]
fn prompt_longer_than_context_and_bad_tokens_are_errors() {
    let model = Arc::new(Model::from_gguf(fixture(), ModelParams::default()).expect("load"));
    let params = ContextParams {
        n_ctx: 8,
        n_batch: 64,
        n_ubatch: 64,
        ..Default::default()
    };
    let mut ctx = Context::new(Arc::clone(&model), params).expect("ctx");
    let long: Vec<i32> = (1..20).collect();
    let e = ctx.decode(&long, false).unwrap_err();
    assert!(matches!(e, LlamaError::ContextFull(_)), "{e}");
    assert!(e.to_string().contains("context of 8"), "{e}");
    for bad in [-1, 4096, i32::MAX] {
        let e = ctx.decode(&[1, bad], false).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("token id {bad} is out of range")),
            "{e}"
        );
    }
    let e = ctx.decode(&[], false).unwrap_err();
    assert!(e.to_string().contains("empty batch"), "{e}");
    // the context still works after the errors
    ctx.decode(&[1, 2, 3], false).expect("decode after errors");
    assert_eq!(ctx.n_past(), 3);
}
