//! deepseek2 and gpt-oss: bad files get a clear error naming the key or
//! tensor (a missing `attn_kv_a_mqa`, a sliding window of 0, expert groups
//! that do not divide the experts), and the MLA cache holds
//! `kv_lora_rank + qk_rope` values per token and layer, not full K and V.

mod common;

use std::sync::Arc;

use fixtures::{or_skip, SkipReason};
use ggml_core::gguf::{GgufFile, GgufValue, GgufWriter};
use ggml_core::GgmlType;
use llama::{Context, ContextParams, Model, ModelParams};

fn fixture(name: &str) -> Result<GgufFile, SkipReason> {
    Ok(GgufFile::open(common::model_gguf(name)?).expect("fixture"))
}

/// Rebuild a fixture without the tensors `drop` names and with `kv` set.
fn rebuild(name: &str, drop: &[&str], kv: &[(&str, GgufValue)]) -> Result<GgufFile, SkipReason> {
    let f = fixture(name)?;
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        w.set_kv(k.clone(), v.clone());
    }
    for (k, v) in kv {
        w.set_kv(k.to_string(), v.clone());
    }
    for t in f.tensors() {
        if !drop.contains(&t.name.as_str()) {
            w.add_tensor(t.name.clone(), t.shape(), t.ty, f.tensor_data(t).to_vec())
                .expect("add tensor");
        }
    }
    Ok(GgufFile::from_bytes(w.to_bytes().expect("write")).expect("reparse"))
}

fn load_err(f: GgufFile) -> String {
    match Model::from_gguf(f, ModelParams::default()) {
        Ok(_) => panic!("loading should fail"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn deepseek2_without_attn_kv_a_mqa_names_the_tensor() {
    let f = or_skip!(rebuild(
        "tiny-deepseek2-f32",
        &["blk.1.attn_kv_a_mqa.weight"],
        &[]
    ));
    let e = load_err(f);
    assert!(
        e.contains("missing tensor 'blk.1.attn_kv_a_mqa.weight'"),
        "{e}"
    );
}

#[test]
fn gptoss_sliding_window_of_zero_names_the_key() {
    let f = or_skip!(rebuild(
        "tiny-gptoss-mxfp4",
        &[],
        &[("gpt-oss.attention.sliding_window", GgufValue::U32(0))],
    ));
    let e = load_err(f);
    assert!(
        e.contains("'gpt-oss.attention.sliding_window'") && e.contains("is 0"),
        "{e}"
    );
}

#[test]
fn gptoss_without_sliding_window_names_the_key() {
    let f = or_skip!(fixture("tiny-gptoss-mxfp4"));
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata() {
        if k != "gpt-oss.attention.sliding_window" {
            w.set_kv(k.clone(), v.clone());
        }
    }
    for t in f.tensors() {
        w.add_tensor(t.name.clone(), t.shape(), t.ty, f.tensor_data(t).to_vec())
            .expect("add tensor");
    }
    let f = GgufFile::from_bytes(w.to_bytes().expect("write")).expect("reparse");
    let e = load_err(f);
    assert!(
        e.contains("'gpt-oss.attention.sliding_window'") && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn expert_groups_that_do_not_divide_the_experts_name_the_key() {
    // 16 experts in 3 groups
    let f = or_skip!(rebuild(
        "tiny-deepseek2-f32",
        &[],
        &[("deepseek2.expert_group_count", GgufValue::U32(3))],
    ));
    let e = load_err(f);
    assert!(
        e.contains("'deepseek2.expert_group_count'") && e.contains("do not divide 16 experts"),
        "{e}"
    );
    // more groups used than there are
    let f = or_skip!(rebuild(
        "tiny-deepseek2-f32",
        &[],
        &[("deepseek2.expert_group_used_count", GgufValue::U32(5))],
    ));
    let e = load_err(f);
    assert!(e.contains("'deepseek2.expert_group_used_count'"), "{e}");
}

#[test]
fn mla_key_length_must_be_latent_plus_rope() {
    let f = or_skip!(rebuild(
        "tiny-deepseek2-f32",
        &[],
        &[("deepseek2.attention.key_length", GgufValue::U32(24))],
    ));
    let e = load_err(f);
    assert!(e.contains("'deepseek2.attention.key_length'"), "{e}");
}

#[test]
fn mla_cache_holds_the_latent_and_rope_part_only() {
    let f = or_skip!(fixture("tiny-deepseek2-f32"));
    let model = Arc::new(Model::from_gguf(f, ModelParams::default()).expect("load"));
    let hp = model.hparams.clone();
    assert_eq!((hp.n_lora_kv, hp.n_rot, hp.n_head), (32, 8, 4));
    for (flash_attn, kv_type, esz) in [
        (false, GgmlType::F16, 2),
        (true, GgmlType::F16, 2),
        (false, GgmlType::F32, 4),
    ] {
        let n_ctx = 256;
        let p = ContextParams {
            n_ctx,
            n_batch: 64,
            n_ubatch: 64,
            n_threads: 1,
            kv_type,
            flash_attn,
            ..Default::default()
        };
        let mut c = Context::new(Arc::clone(&model), p).expect("context");
        let kv = c.kv_cache();
        // kv_lora_rank + qk_rope per token per layer, not n_head * (k + v)
        let per_token = hp.n_lora_kv + hp.n_rot;
        assert_eq!(kv.nbytes(), hp.n_layer * n_ctx * per_token * esz);
        let full = hp.n_head * (hp.n_embd_head_k_mla + hp.n_embd_head_v_mla);
        assert!(per_token < full, "{per_token} vs {full}");
        for l in &kv.layers {
            assert!(l.v.is_none(), "an MLA layer caches no V");
            assert_eq!(l.k_ne(), [per_token as i64, n_ctx as i64, 1, 1]);
        }
        c.decode(&[1, 2, 3], false).expect("decode");
    }
}

#[test]
fn gptoss_cache_is_plain_k_and_v() {
    let f = or_skip!(fixture("tiny-gptoss-mxfp4"));
    let model = Arc::new(Model::from_gguf(f, ModelParams::default()).expect("load"));
    let hp = model.hparams.clone();
    let n_ctx = 64;
    let p = ContextParams {
        n_ctx,
        n_batch: 64,
        n_ubatch: 64,
        n_threads: 1,
        ..Default::default()
    };
    let c = Context::new(Arc::clone(&model), p).expect("context");
    let per_token = hp.n_embd_k_gqa() + hp.n_embd_v_gqa();
    assert_eq!(c.kv_cache().nbytes(), hp.n_layer * n_ctx * per_token * 2);
    assert!(hp.is_swa(0) && !hp.is_swa(1) && hp.is_swa(2) && !hp.is_swa(3));
}
