//! Every GGUF fixture parses and writes back byte-identically; three are
//! checked against reference values.
//!
//! Reference values were read once with Python's `gguf` package
//! (`pip install gguf`, `gguf.GGUFReader(path)`: `len(r.tensors)`,
//! `r.fields['GGUF.kv_count']`, `r.data_offset`, `t.name`, `t.shape`,
//! `t.tensor_type`, `t.data_offset - r.data_offset`, `t.n_bytes`,
//! `f.contents()`, `t.data[:4]`) and written here as literals. They are not
//! derived from this crate's reader.

use fixtures::{fixture_path, or_skip, SkipReason};
use ggml_core::gguf::{GgufFile, GgufValue, GgufValueType, GgufWriter};
use ggml_core::GgmlType;

/// Every GGUF fixture (fixtures README): 12 models and 4 vocabularies.
const GGUF_FIXTURES: [&str; 16] = [
    "models/small-qwen3moe-spm-f16.gguf",
    "models/tiny-deepseek2-f32.gguf",
    "models/tiny-deepseek2-q4_k.gguf",
    "models/tiny-gptoss-mxfp4.gguf",
    "models/tiny-mixtral-f16.gguf",
    "models/tiny-olmoe-f32.gguf",
    "models/tiny-qwen2moe-f32.gguf",
    "models/tiny-qwen3moe-f32.gguf",
    "models/tiny-qwen3moe-q4_0.gguf",
    "models/tiny-qwen3moe-q4_k.gguf",
    "models/tiny-qwen3moe-q6_k.gguf",
    "models/tiny-qwen3moe-q8_0.gguf",
    "tokenizer/ggml-vocab-deepseek-llm.gguf",
    "tokenizer/ggml-vocab-gpt-2.gguf",
    "tokenizer/ggml-vocab-llama-spm.gguf",
    "tokenizer/ggml-vocab-qwen2.gguf",
];

fn open(rel: &str) -> Result<GgufFile, SkipReason> {
    Ok(GgufFile::open(fixture_path(rel)?).unwrap())
}

#[test]
fn all_fixtures_parse_and_write_back_identically() {
    let mut checked = 0;
    for rel in GGUF_FIXTURES {
        let p = or_skip!(fixture_path(rel), continue);
        checked += 1;
        let f = GgufFile::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(f.bytes().is_mmap());
        for t in f.tensors() {
            assert_eq!(f.tensor_data(t).len(), t.size, "{}", t.name);
        }
        let out = GgufWriter::from_file(&f).to_bytes().unwrap();
        assert!(
            out == f.bytes().as_slice(),
            "{}: write-back differs (len {} vs {})",
            p.display(),
            out.len(),
            f.bytes().len()
        );
        // the owned-bytes parser agrees with the mapped one
        let g = GgufFile::from_bytes(out).unwrap();
        assert_eq!(g.metadata(), f.metadata());
        assert_eq!(g.tensors(), f.tensors());
    }
    assert!(checked > 0, "no GGUF fixture found");
}

#[test]
fn tiny_qwen3moe_f32_matches_gguf_py() {
    let f = or_skip!(open("models/tiny-qwen3moe-f32.gguf"));
    assert_eq!(f.version(), 3);
    assert_eq!(f.tensors().len(), 27);
    assert_eq!(f.metadata().len(), 26);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_offset(), 89440);
    assert_eq!(f.get_str("general.architecture").unwrap(), Some("qwen3moe"));
    assert_eq!(
        f.get_str("general.name").unwrap(),
        Some("tiny-qwen3moe-seed11")
    );
    assert_eq!(f.get_u32("qwen3moe.block_count").unwrap(), Some(2));
    assert_eq!(f.get_u32("qwen3moe.expert_count").unwrap(), Some(8));
    assert_eq!(f.get_u32("qwen3moe.expert_used_count").unwrap(), Some(2));
    assert_eq!(
        f.get_u32("qwen3moe.expert_feed_forward_length").unwrap(),
        Some(64)
    );
    assert_eq!(
        f.get_f32("qwen3moe.attention.layer_norm_rms_epsilon")
            .unwrap(),
        Some(9.999999974752427e-07_f64 as f32)
    );
    assert_eq!(f.get_f32("qwen3moe.rope.freq_base").unwrap(), Some(10000.0));
    assert_eq!(
        f.get_bool("tokenizer.ggml.add_bos_token").unwrap(),
        Some(true)
    );
    assert_eq!(
        f.get_bool("tokenizer.ggml.add_eos_token").unwrap(),
        Some(false)
    );
    assert!(matches!(
        f.get("tokenizer.ggml.bos_token_id"),
        Some(GgufValue::U32(1))
    ));
    let tokens = f.get_array("tokenizer.ggml.tokens").unwrap().unwrap();
    let tokens = tokens.as_str_vec().unwrap();
    assert_eq!(tokens.len(), 4096);
    assert_eq!(&tokens[..3], ["<unk>", "<s>", "</s>"]);
    assert_eq!(tokens[4095], "▁govern");
    let scores = f.get_array("tokenizer.ggml.scores").unwrap().unwrap();
    assert_eq!(scores.as_f32_slice().unwrap()[4095], -3836.0);
    let tt = f.get_array("tokenizer.ggml.token_type").unwrap().unwrap();
    assert_eq!(tt.elem_type(), GgufValueType::I32);
    assert_eq!(&tt.as_i32_slice().unwrap()[..3], [2, 3, 3]);

    // (name, ne, type, offset relative to the data section, bytes)
    let expect: [(&str, &[i64], GgmlType, u64, usize); 6] = [
        ("token_embd.weight", &[64, 4096], GgmlType::F32, 0, 1048576),
        ("output_norm.weight", &[64], GgmlType::F32, 1048576, 256),
        (
            "output.weight",
            &[64, 4096],
            GgmlType::F32,
            1048832,
            1048576,
        ),
        ("blk.0.attn_norm.weight", &[64], GgmlType::F32, 2097408, 256),
        (
            "blk.1.ffn_up_exps.weight",
            &[64, 64, 8],
            GgmlType::F32,
            2725376,
            131072,
        ),
        (
            "blk.1.ffn_down_exps.weight",
            &[64, 64, 8],
            GgmlType::F32,
            2856448,
            131072,
        ),
    ];
    check_tensors(&f, &expect);
    assert_eq!(f.tensors()[0].name, "token_embd.weight");
    assert_eq!(f.tensors()[26].name, "blk.1.ffn_down_exps.weight");

    let norm = f.tensor("output_norm.weight").unwrap();
    let vals: Vec<f32> = f.tensor_data(norm)[..16]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want = [
        1.0228655338287354_f64,
        0.9565068483352661,
        1.0683472156524658,
        0.7290162444114685,
    ];
    assert_eq!(vals, want.map(|x| x as f32));
    let down = f.tensor("blk.1.ffn_down_exps.weight").unwrap();
    let sum: f64 = f
        .tensor_data(down)
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
        .sum();
    assert!((sum - -2.8492605043147705).abs() < 1e-6, "{sum}");
}

#[test]
fn tiny_mixtral_f16_matches_gguf_py() {
    let f = or_skip!(open("models/tiny-mixtral-f16.gguf"));
    assert_eq!(f.tensors().len(), 23);
    assert_eq!(f.metadata().len(), 25);
    assert_eq!(f.data_offset(), 89152);
    assert_eq!(f.get_str("general.architecture").unwrap(), Some("llama"));
    assert_eq!(f.get_u32("llama.expert_count").unwrap(), Some(8));
    assert_eq!(f.get_u32("llama.feed_forward_length").unwrap(), Some(64));
    assert_eq!(f.get_u32("general.file_type").unwrap(), Some(1));
    let expect: [(&str, &[i64], GgmlType, u64, usize); 6] = [
        ("token_embd.weight", &[64, 4096], GgmlType::F16, 0, 524288),
        ("output_norm.weight", &[64], GgmlType::F32, 524288, 256),
        ("output.weight", &[64, 4096], GgmlType::F16, 524544, 524288),
        ("blk.0.attn_norm.weight", &[64], GgmlType::F32, 1048832, 256),
        (
            "blk.1.ffn_up_exps.weight",
            &[64, 64, 8],
            GgmlType::F16,
            1363200,
            65536,
        ),
        (
            "blk.1.ffn_down_exps.weight",
            &[64, 64, 8],
            GgmlType::F16,
            1428736,
            65536,
        ),
    ];
    check_tensors(&f, &expect);
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        &names[..6],
        [
            "token_embd.weight",
            "output_norm.weight",
            "output.weight",
            "blk.0.attn_norm.weight",
            "blk.0.attn_q.weight",
            "blk.0.attn_k.weight"
        ]
    );
    let emb = f.tensor("token_embd.weight").unwrap();
    let bits: Vec<u16> = f.tensor_data(emb)[..8]
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(bits, [15137, 48233, 48638, 45817]);
}

#[test]
fn tiny_qwen3moe_q4_k_matches_gguf_py() {
    let f = or_skip!(open("models/tiny-qwen3moe-q4_k.gguf"));
    assert_eq!(f.tensors().len(), 27);
    assert_eq!(f.metadata().len(), 27);
    assert_eq!(f.data_offset(), 89504);
    assert_eq!(f.get_u32("general.quantization_version").unwrap(), Some(2));
    assert_eq!(f.get_u32("qwen3moe.expert_count").unwrap(), Some(16));
    let expect: [(&str, &[i64], GgmlType, u64, usize); 4] = [
        ("output.weight", &[256, 4096], GgmlType::Q4K, 0, 589824),
        ("output_norm.weight", &[256], GgmlType::F32, 589824, 1024),
        (
            "blk.0.attn_k.weight",
            &[256, 128],
            GgmlType::Q4K,
            1180672,
            18432,
        ),
        (
            "blk.1.ffn_up_exps.weight",
            &[256, 256, 16],
            GgmlType::Q4K,
            4388864,
            589824,
        ),
    ];
    check_tensors(&f, &expect);
}

#[test]
fn vocab_gpt2_matches_gguf_py() {
    let f = or_skip!(open("tokenizer/ggml-vocab-gpt-2.gguf"));
    assert_eq!(f.tensors().len(), 0);
    assert_eq!(f.metadata().len(), 16);
    // gguf-py reports the aligned end of the header; the file itself has no
    // padding (1766807 bytes) since it has no tensors.
    assert_eq!(f.data_offset(), 1766816);
    assert_eq!(f.bytes().len(), 1766807);
    assert_eq!(f.get_str("general.architecture").unwrap(), Some("gpt2"));
    assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), Some("gpt2"));
    assert_eq!(f.get_str("tokenizer.ggml.pre").unwrap(), Some("gpt-2"));
    assert_eq!(f.get_u32("gpt2.block_count").unwrap(), Some(12));
    assert_eq!(
        f.get_u32("tokenizer.ggml.bos_token_id").unwrap(),
        Some(50256)
    );
    assert_eq!(
        f.get_f32("gpt2.attention.layer_norm_epsilon").unwrap(),
        Some(9.999999747378752e-06_f64 as f32)
    );
    let tokens = f.get_array("tokenizer.ggml.tokens").unwrap().unwrap();
    let tokens = tokens.as_str_vec().unwrap();
    assert_eq!(tokens.len(), 50257);
    assert_eq!(&tokens[..3], ["!", "\"", "#"]);
    assert_eq!(tokens[220], "Ġ");
    assert_eq!(tokens[1000], "ale");
    assert_eq!(tokens[50255], "Ġgazed");
    assert_eq!(tokens[50256], "<|endoftext|>");
    let merges = f.get_array("tokenizer.ggml.merges").unwrap().unwrap();
    let merges = merges.as_str_vec().unwrap();
    assert_eq!(merges.len(), 50000);
    assert_eq!(&merges[..3], ["Ġ t", "Ġ a", "h e"]);
    assert_eq!(merges[49999], "Ġg azed");
    let tt = f.get_array("tokenizer.ggml.token_type").unwrap().unwrap();
    assert_eq!(tt.as_i32_vec().unwrap().len(), 50257);
    assert_eq!(tt.as_i32_slice().unwrap()[50256], 3);
}

fn check_tensors(f: &GgufFile, expect: &[(&str, &[i64], GgmlType, u64, usize)]) {
    for &(name, shape, ty, offset, size) in expect {
        let t = f.tensor(name).unwrap_or_else(|| panic!("missing {name}"));
        assert_eq!(t.shape(), shape, "{name}");
        assert_eq!(t.n_dims as usize, shape.len(), "{name}");
        assert_eq!(t.ty, ty, "{name}");
        assert_eq!(t.offset, offset, "{name}");
        assert_eq!(t.size, size, "{name}");
        assert_eq!(f.tensor_data(t).len(), size, "{name}");
    }
}
