//! llama-tokenize --ids against llama.cpp's tokenizer test vectors
//! (tests/data/tokenizer): add_special off (--no-bos), parse_special off,
//! each input given byte for byte through -f.

mod common;
use common::*;

const TOK: &str = env!("CARGO_BIN_EXE_llama-tokenize");

fn parse_ids(s: &str) -> Vec<i32> {
    let s = s.trim();
    let inner = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or_else(|| panic!("not a list: {s:?}"));
    inner
        .split(", ")
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().unwrap())
        .collect()
}

fn check_vocab(name: &str) {
    let file = |ext: &str| fixtures::fixture_path(&format!("tokenizer/ggml-vocab-{name}.{ext}"));
    let gguf = or_skip!(file("gguf"));
    let inp = std::fs::read_to_string(or_skip!(file("gguf.inp"))).unwrap();
    let out = std::fs::read_to_string(or_skip!(file("gguf.out"))).unwrap();
    let inputs: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    let expected: Vec<&str> = out.split('\n').collect();
    let n = expected.len() - 1; // trailing newline
    assert!(
        n >= 40 && inputs.len() > n,
        "{name}: {} inputs, {n} outputs",
        inputs.len()
    );
    let tmp = tempfile::tempdir().unwrap();
    let text_path = tmp.path().join("input.txt");
    let mut failures = Vec::new();
    for i in 0..n {
        std::fs::write(&text_path, inputs[i]).unwrap();
        let o = run(
            TOK,
            &[
                "-m",
                gguf.to_str().unwrap(),
                "-f",
                text_path.to_str().unwrap(),
                "--ids",
                "--no-bos",
                "--no-parse-special",
            ],
            tmp.path(),
        );
        ok(&o);
        let got = parse_ids(&stdout(&o));
        let want: Vec<i32> = expected[i]
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        if got != want {
            failures.push(format!("{:?}: got {got:?}, want {want:?}", inputs[i]));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {n} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn llama_spm_vectors() {
    check_vocab("llama-spm");
}

#[test]
fn gpt2_vectors() {
    check_vocab("gpt-2");
}

#[test]
fn qwen2_vectors() {
    check_vocab("qwen2");
}

#[test]
fn deepseek_llm_vectors() {
    check_vocab("deepseek-llm");
}

#[test]
fn pieces_are_printed_as_llama_cpp_does() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = fixtures::lean_path("tokenizer/ggml-vocab-llama-spm.gguf");
    let o = run(
        TOK,
        &["-m", gguf.to_str().unwrap(), "-p", "Hello world"],
        dir.path(),
    );
    ok(&o);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "     1 -> '<s>'",
            " 15043 -> ' Hello'",
            "  3186 -> ' world'"
        ],
        "{out}"
    );
    let o = run(
        TOK,
        &["-m", gguf.to_str().unwrap(), "-p", "Hello world", "--ids"],
        dir.path(),
    );
    ok(&o);
    assert_eq!(stdout(&o).trim(), "[1, 15043, 3186]");
    let o = run(
        TOK,
        &[
            "-m",
            gguf.to_str().unwrap(),
            "-p",
            "Hello world",
            "--ids",
            "--no-bos",
        ],
        dir.path(),
    );
    ok(&o);
    assert_eq!(stdout(&o).trim(), "[15043, 3186]");
}
