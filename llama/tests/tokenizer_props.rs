//! Tokenizer error reporting, every supported pre-tokenizer, and properties
//! over random input (no panics; exact round trips where the vocabulary is
//! lossless).

use std::sync::OnceLock;

use fixtures::{fixture_path, or_skip, SkipReason};
use ggml_core::gguf::{GgufFile, GgufWriter};
use llama::tokenizer::gguf::vocab_data_from_gguf;
use llama::tokenizer::{Tokenizer, TokenizerError, VocabData};
use proptest::prelude::*;

/// `tokenizer/ggml-vocab-NAME.gguf`, or why it is absent.
fn vocab_file(name: &str) -> Result<GgufFile, SkipReason> {
    let path = fixture_path(&format!("tokenizer/ggml-vocab-{name}.gguf"))?;
    Ok(GgufFile::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display())))
}

/// The SPM vocabulary, in the lean set tracked in tests/data.
fn spm_file() -> GgufFile {
    GgufFile::open(fixtures::lean_path("tokenizer/ggml-vocab-llama-spm.gguf")).expect("open")
}

fn vocab_data(name: &str) -> Result<VocabData, SkipReason> {
    Ok(vocab_data_from_gguf(&vocab_file(name)?).expect("vocab data"))
}

fn spm() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::from_gguf(&spm_file()).unwrap())
}

/// A vocabulary's tokenizer, or `None` (the reason printed once) when the
/// file is absent.
fn optional(cell: &'static OnceLock<Option<Tokenizer>>, name: &str) -> Option<&'static Tokenizer> {
    cell.get_or_init(|| match vocab_file(name) {
        Ok(f) => Some(Tokenizer::from_gguf(&f).unwrap()),
        Err(why) => {
            println!("skipped: {why}");
            None
        }
    })
    .as_ref()
}

fn qwen2() -> Option<&'static Tokenizer> {
    static T: OnceLock<Option<Tokenizer>> = OnceLock::new();
    optional(&T, "qwen2")
}

fn deepseek() -> Option<&'static Tokenizer> {
    static T: OnceLock<Option<Tokenizer>> = OnceLock::new();
    optional(&T, "deepseek-llm")
}

fn gpt2() -> Option<&'static Tokenizer> {
    static T: OnceLock<Option<Tokenizer>> = OnceLock::new();
    optional(&T, "gpt-2")
}

/// Rewrite one key of a vocabulary file (or drop it) and load the result.
fn load_edited(
    file: &GgufFile,
    edit: impl FnOnce(&mut GgufWriter),
) -> Result<Tokenizer, TokenizerError> {
    let mut w = GgufWriter::from_file(file);
    edit(&mut w);
    let f = GgufFile::from_bytes(w.to_bytes().expect("write")).expect("reparse");
    Tokenizer::from_gguf(&f)
}

fn malformed_key(r: Result<Tokenizer, TokenizerError>) -> String {
    match r {
        Err(TokenizerError::Malformed { key, .. }) => key.to_string(),
        Err(TokenizerError::MissingKey(key)) => key.to_string(),
        other => panic!("expected a malformed/missing key error, got {other:?}"),
    }
}

#[test]
fn unknown_pre_tokenizer_is_an_error_naming_it() {
    let qwen2 = or_skip!(vocab_file("qwen2"));
    let err = load_edited(&qwen2, |w| w.set_kv("tokenizer.ggml.pre", "no-such-pre")).unwrap_err();
    assert!(matches!(&err, TokenizerError::UnknownPreTokenizer(n) if n == "no-such-pre"));
    assert!(err.to_string().contains("no-such-pre"), "{err}");
}

#[test]
fn unsupported_model_is_an_error_naming_it() {
    let err = load_edited(&spm_file(), |w| w.set_kv("tokenizer.ggml.model", "t5")).unwrap_err();
    assert!(matches!(&err, TokenizerError::UnsupportedModel(m) if m == "t5"));
    assert!(err.to_string().contains("'t5'"), "{err}");
}

#[test]
fn malformed_vocabularies_name_the_key() {
    let r = load_edited(&spm_file(), |w| {
        w.remove_kv("tokenizer.ggml.tokens");
    });
    assert_eq!(malformed_key(r), "tokenizer.ggml.tokens");

    let r = load_edited(&spm_file(), |w| {
        w.set_kv("tokenizer.ggml.tokens", vec![1u32, 2])
    });
    assert_eq!(malformed_key(r), "tokenizer.ggml.tokens");

    let r = load_edited(&spm_file(), |w| {
        w.set_kv("tokenizer.ggml.scores", vec![0.5f32; 10])
    });
    assert_eq!(malformed_key(r), "tokenizer.ggml.scores");

    let r = load_edited(&spm_file(), |w| {
        w.set_kv("tokenizer.ggml.token_type", vec![1i32; 10])
    });
    assert_eq!(malformed_key(r), "tokenizer.ggml.token_type");

    let r = load_edited(&spm_file(), |w| {
        w.set_kv("tokenizer.ggml.bos_token_id", "one")
    });
    assert_eq!(malformed_key(r), "tokenizer.ggml.bos_token_id");

    let mut d = vocab_data_from_gguf(&spm_file()).expect("vocab data");
    d.tokens[5] = d.tokens[6].clone();
    let err = Tokenizer::from_vocab_data(d).unwrap_err();
    assert!(err.to_string().contains("duplicate"), "{err}");

    let gpt2 = or_skip!(vocab_file("gpt-2"));
    let r = load_edited(&gpt2, |w| {
        w.remove_kv("tokenizer.ggml.merges");
    });
    assert_eq!(malformed_key(r), "tokenizer.ggml.merges");

    let r = load_edited(&gpt2, |w| {
        w.set_kv("tokenizer.ggml.merges", vec!["a b", "nospace"])
    });
    assert_eq!(malformed_key(r), "tokenizer.ggml.merges");

    let r = load_edited(&gpt2, |w| w.set_kv("tokenizer.ggml.merges", vec![3u32]));
    assert_eq!(malformed_key(r), "tokenizer.ggml.merges");
}

#[test]
fn out_of_range_special_ids_keep_llama_cpp_defaults() {
    let t = load_edited(&spm_file(), |w| {
        w.set_kv("tokenizer.ggml.bos_token_id", 99_999u32)
    })
    .unwrap();
    assert_eq!(t.bos(), Some(1));
}

/// The pre-tokenizers the engine must support, loaded over the Qwen2
/// byte-level vocabulary: each compiles, tokenizes every test input and
/// gives it back exactly (byte-level BPE is lossless; `clean_spaces`
/// vocabularies are checked on inputs it leaves alone).
#[test]
fn every_supported_pre_tokenizer_round_trips() {
    let names = [
        "default",
        "llama3",
        "llama-bpe",
        "llama-v3",
        "deepseek-llm",
        "deepseek-coder",
        "deepseek-v3",
        "gpt-2",
        "phi-2",
        "qwen2",
        "qwen35",
        "gpt-4o",
        "llama4",
        "falcon",
        "starcoder",
        "mpt",
        "olmo",
        "stablelm2",
        "command-r",
        "chatglm-bpe",
        "viking",
        "tekken",
        "bloom",
        "seed-coder",
        "bailingmoe",
        "grok-2",
        "minimax-m2",
    ];
    let base = or_skip!(vocab_data("qwen2"));
    let inp = or_skip!(fixture_path("tokenizer/ggml-vocab-qwen2.gguf.inp"));
    let inp = std::fs::read_to_string(inp).unwrap();
    let texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    for name in names {
        let mut d = base.clone();
        d.pre = Some(name.to_string());
        if name == "chatglm-bpe" {
            d.add_bos = Some(false);
        }
        let t = Tokenizer::from_vocab_data(d).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.pre_name(), name);
        for text in &texts {
            let ids = t.tokenize(text, false, false).unwrap();
            let back = t.detokenize(&ids, false, false).unwrap();
            let cleans = matches!(
                name,
                "default"
                    | "llama3"
                    | "llama-bpe"
                    | "llama-v3"
                    | "gpt-2"
                    | "phi-2"
                    | "falcon"
                    | "starcoder"
                    | "mpt"
                    | "olmo"
                    | "stablelm2"
                    | "chatglm-bpe"
                    | "bloom"
            );
            if !cleans || !text.contains([' ']) {
                assert_eq!(String::from_utf8_lossy(&back), *text, "{name}");
            }
        }
    }
}

#[test]
fn qwen35_keeps_combining_marks_in_words() {
    // Qwen3.5 adds \p{M} to the word class; Qwen2 splits a combining mark
    // off the letters before it.
    use llama::tokenizer::pretokenize::PreTokenizer;
    use llama::tokenizer::PreType;
    let text = "cafe\u{301} nai\u{308}ve";
    let q35 = PreTokenizer::new(PreType::Qwen35).unwrap().split(text);
    let q2 = PreTokenizer::new(PreType::Qwen2).unwrap().split(text);
    assert_eq!(q35, ["cafe\u{301}", " nai\u{308}ve"]);
    assert_eq!(q2, ["cafe", "\u{301}", " nai", "\u{308}ve"]);
    let mut d = or_skip!(vocab_data("qwen2"));
    d.pre = Some("qwen35".into());
    let t = Tokenizer::from_vocab_data(d).unwrap();
    let ids = t.tokenize(text, false, false).unwrap();
    assert_eq!(t.detokenize(&ids, false, false).unwrap(), text.as_bytes());
}

/// Strings of arbitrary codepoints, and bytes read as Latin-1.
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| b.into_iter().map(char::from).collect()),
        "[ a-zA-Z0-9'.,!?\\n\\t]{0,40}",
        "[ \\PC]{0,24}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, .. ProptestConfig::default() })]

    #[test]
    fn spm_round_trips(text in any_text()) {
        // A literal '▁' is SPM's space marker and comes back as a space.
        prop_assume!(!text.contains('\u{2581}'));
        let t = spm();
        let ids = t.tokenize(&text, false, false).unwrap();
        prop_assert_eq!(t.detokenize(&ids, false, false).unwrap(), text.as_bytes());
        let with_bos = t.tokenize(&text, true, true).unwrap();
        prop_assert_eq!(with_bos.first().copied(), t.bos());
    }

    #[test]
    fn byte_level_bpe_round_trips(text in any_text()) {
        for t in [qwen2(), deepseek()].into_iter().flatten() {
            let ids = t.tokenize(&text, false, false).unwrap();
            prop_assert!(ids.iter().all(|&id| (id as usize) < t.n_vocab()));
            prop_assert_eq!(t.detokenize(&ids, false, false).unwrap(), text.as_bytes());
        }
        // GPT-2 cleans up spaces on output; it must still never fail.
        if let Some(gpt2) = gpt2() {
            let ids = gpt2.tokenize(&text, true, true).unwrap();
            gpt2.detokenize(&ids, true, true).unwrap();
        }
    }

    #[test]
    fn random_ids_never_panic(ids in proptest::collection::vec(-5i32..160_000, 0..32)) {
        for t in [Some(spm()), qwen2()].into_iter().flatten() {
            let n = t.n_vocab() as i32;
            let r = t.detokenize(&ids, true, true);
            prop_assert_eq!(r.is_ok(), ids.iter().all(|&i| (0..n).contains(&i)));
            for &id in &ids {
                let _ = t.token_to_piece(id, true);
                let _ = t.is_eog(id);
            }
        }
    }
}
