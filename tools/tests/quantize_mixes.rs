//! llama.cpp's own per-tensor type choices for its mixes on a 48-layer,
//! 8-expert qwen3moe (`tests/data/quantize/qwen3moe-48L-mixes.json`): ours
//! match for every tensor name and shape, and so does `general.file_type`.
//! Then the binary: the mixes on the tiny fixture model, `--help`, input ==
//! output refused, re-quantizing refused without `--allow-requantize`.

use std::process::Command;

use ggml_core::gguf::GgufFile;
use ggml_core::GgmlType;
use tools::quantize::{Mix, ModelShape, TypeChooser};

const QUANTIZE: &str = env!("CARGO_BIN_EXE_llama-quantize");

/// A fixture of the lean set tracked in tests/data (the mixes' reference,
/// tiny-qwen3moe-f32).
fn data(p: &str) -> std::path::PathBuf {
    fixtures::lean_path(p)
}

/// File order as llama.cpp's converter writes it: token_embd, the layers
/// in order, then output_norm and output.
fn file_order(names: &mut [String]) {
    let key = |n: &String| -> (usize, usize, String) {
        if n == "token_embd.weight" {
            return (0, 0, n.clone());
        }
        if let Some(rest) = n.strip_prefix("blk.") {
            let (l, t) = rest.split_once('.').unwrap();
            return (1, l.parse().unwrap(), t.to_string());
        }
        (2, 0, n.clone())
    };
    names.sort_by_key(key);
}

#[test]
fn every_mix_chooses_llama_cpps_type_for_every_tensor() {
    let fx: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data("quantize/qwen3moe-48L-mixes.json")).unwrap(),
    )
    .unwrap();
    let shapes = fx["shapes_ne"].as_object().unwrap();
    let mut names: Vec<String> = shapes.keys().cloned().collect();
    file_order(&mut names);
    // the model as the fixture's README gives it: 48 layers, 8 experts, 4 heads / 2 KV heads
    let n_layer = names
        .iter()
        .filter_map(|n| {
            n.strip_prefix("blk.")?
                .split('.')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .max()
        .unwrap()
        + 1;
    assert_eq!(n_layer, 48);
    let shape = ModelShape {
        n_layer,
        n_expert: 8,
        n_gqa: 2,
    };
    let mixes = fx["types"].as_object().unwrap();
    assert!(mixes.len() >= 6);
    let mut wrong = Vec::new();
    for (mix_name, types) in mixes {
        let mix = Mix::parse(mix_name, false).unwrap_or_else(|| panic!("unknown mix {mix_name}"));
        assert!(matches!(mix, Mix::Named(_)), "{mix_name} is a mix");
        let want_ft = types["__file_type__"].as_u64().unwrap() as u32;
        assert_eq!(
            mix.file_type(),
            Some(want_ft),
            "{mix_name}: general.file_type"
        );
        let mut chooser = TypeChooser::new(mix, shape, names.iter().map(String::as_str));
        let mut n = 0;
        for name in &names {
            let ne: Vec<i64> = shapes[name]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            let got = chooser
                .choose(name, &ne, ne.len() as u32)
                .unwrap()
                .unwrap_or(GgmlType::F32); // not quantized: stays the source's F32
            let want = GgmlType::from_name(types[name].as_str().unwrap()).unwrap();
            if got != want {
                wrong.push(format!(
                    "{mix_name} {name} {ne:?}: ours {got}, llama.cpp {want}"
                ));
            }
            n += 1;
        }
        assert_eq!(
            n + 1,
            types.as_object().unwrap().len(),
            "{mix_name}: every tensor"
        );
    }
    assert!(
        wrong.is_empty(),
        "{} choices differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

fn quantize(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(QUANTIZE)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

#[test]
fn help_lists_the_mixes() {
    let o = Command::new(QUANTIZE).arg("--help").output().unwrap();
    assert!(o.status.success());
    let h = String::from_utf8_lossy(&o.stdout);
    for m in [
        "Q4_K_M",
        "Q4_K_S",
        "Q5_K_M",
        "Q6_K",
        "Q8_0",
        "Q3_K_M",
        "--allow-requantize",
        "--pure",
    ] {
        assert!(h.contains(m), "--help lacks {m}:\n{h}");
    }
}

#[test]
fn mixes_on_the_tiny_model_write_the_file_type_and_their_types() {
    let dir = tempfile::tempdir().unwrap();
    let input = data("models/tiny-qwen3moe-f32.gguf");
    let out = dir.path().join("q4km.gguf");
    let o = quantize(&[input.as_os_str(), out.as_os_str(), "Q4_K_M".as_ref()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let f = GgufFile::open(&out).unwrap();
    assert_eq!(f.get_u32("general.file_type").unwrap(), Some(15));
    for t in f.tensors() {
        // n_embd 64: no 256-element K blocks fit, so llama.cpp's fallbacks;
        // the 8-expert model's attn_k / attn_v and the output head get Q8_0
        let want = if t.n_dims < 2 || t.name.contains("ffn_gate_inp") {
            GgmlType::F32
        } else if t.name.contains("attn_k.weight")
            || t.name.contains("attn_v.weight")
            || t.name == "output.weight"
        {
            GgmlType::Q8_0
        } else if t.name.contains("attn_output") {
            GgmlType::Q5_1 // Q5_K -> Q5_1
        } else if t.name.starts_with("blk.1.ffn_down") {
            // 2 layers: use_more_bits holds for the last (i >= 7n/8) only:
            // Q6_K -> Q8_0
            GgmlType::Q8_0
        } else {
            GgmlType::Q5_0 // Q4_K -> Q5_0
        };
        assert_eq!(t.ty, want, "{}", t.name);
    }
    // no temporary file left beside it
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[test]
fn input_as_output_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("m.gguf");
    std::fs::copy(data("models/tiny-qwen3moe-f32.gguf"), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let link = dir.path().join("hard.gguf");
    std::fs::hard_link(&input, &link).unwrap();
    let dotted = dir.path().join(".").join("m.gguf");
    for out in [&input, &link, &dotted] {
        let o = quantize(&[input.as_os_str(), out.as_os_str(), "q8_0".as_ref()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{}: {err}", out.display());
        assert!(err.contains("is the input file"), "{err}");
    }
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input is untouched"
    );
}

#[test]
fn requantizing_needs_allow_requantize() {
    let dir = tempfile::tempdir().unwrap();
    let q = fixtures::or_skip!(fixtures::fixture_path("models/tiny-qwen3moe-q8_0.gguf"));
    let out = dir.path().join("q4.gguf");
    let o = quantize(&[q.as_os_str(), out.as_os_str(), "q4_0".as_ref()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("already quantized") && err.contains("--allow-requantize"),
        "{err}"
    );
    assert!(!out.exists(), "no output written");
    let o = quantize(&[
        "--allow-requantize".as_ref(),
        q.as_os_str(),
        out.as_os_str(),
        "q4_0".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        GgufFile::open(&out)
            .unwrap()
            .get_u32("general.file_type")
            .unwrap(),
        Some(2)
    );
}
