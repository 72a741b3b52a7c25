//! Every error a user can act on: non-zero exit, the message on stderr, no
//! panic and no backtrace.

mod common;
use common::*;

use ggml_core::gguf::GgufWriter;
use ggml_core::GgmlType;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");
const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");
const TOK: &str = env!("CARGO_BIN_EXE_llama-tokenize");

fn fails_with(bin: &str, args: &[&str], needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let o = run(bin, args, dir.path());
    let err = stderr(&o);
    assert!(!o.status.success(), "{bin} {args:?} succeeded:\n{err}");
    assert_ne!(
        o.status.code(),
        Some(101),
        "{bin} {args:?} panicked:\n{err}"
    );
    assert!(!err.contains("panicked"), "{bin} {args:?}:\n{err}");
    assert!(!err.contains("stack backtrace"), "{bin} {args:?}:\n{err}");
    for n in needles {
        assert!(
            err.to_lowercase().contains(&n.to_lowercase()),
            "{bin} {args:?}: stderr lacks {n:?}:\n{err}"
        );
    }
}

fn f32_model() -> String {
    lean_model("tiny-qwen3moe-f32.gguf")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn missing_model_file() {
    let needles = ["not found", "/nonexistent/model.gguf"];
    fails_with(RUN, &["-m", "/nonexistent/model.gguf"], &needles);
    fails_with(BENCH, &["-m", "/nonexistent/model.gguf"], &needles);
    fails_with(TOK, &["-m", "/nonexistent/model.gguf", "-p", "x"], &needles);
}

#[test]
fn not_a_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("notes.gguf");
    std::fs::write(&p, "these are not the weights you are looking for").unwrap();
    let p = p.to_str().unwrap();
    fails_with(RUN, &["-m", p], &["not a GGUF"]);
    fails_with(BENCH, &["-m", p, "-r", "1"], &["not a GGUF"]);
    fails_with(TOK, &["-m", p, "-p", "x"], &["not a GGUF"]);
}

#[test]
fn unsupported_architecture_names_the_supported_ones() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("gpt9.gguf");
    let mut w = GgufWriter::new();
    w.set_kv("general.architecture", "gpt9");
    w.add_tensor("token_embd.weight", &[4, 4], GgmlType::F32, vec![0u8; 64])
        .unwrap();
    w.write_file(&p).unwrap();
    fails_with(
        RUN,
        &["-m", p.to_str().unwrap()],
        &["gpt9", "qwen3moe", "olmoe"],
    );
}

#[test]
fn bad_flag_values() {
    let m = f32_model();
    fails_with(RUN, &["-m", &m, "-t", "abc"], &["invalid value", "abc"]);
    fails_with(RUN, &["-m", &m, "-t", "0"], &["-t"]);
    fails_with(RUN, &["-m", &m, "-n", "-5"], &["-n -5"]);
    fails_with(RUN, &["-m", &m, "--top-p", "2"], &["--top-p"]);
    fails_with(RUN, &["-m", &m, "-ub", "0"], &["-ub"]);
    fails_with(RUN, &["-m", &m, "--no-such-flag"], &["--no-such-flag"]);
    fails_with(
        RUN,
        &["-m", &m, "-p", "x", "-f", "y.txt"],
        &["cannot be used with"],
    );
    fails_with(
        RUN,
        &["-m", &m, "-f", "/nonexistent/prompt.txt"],
        &["not found"],
    );
    fails_with(BENCH, &["-m", &m, "-o", "csvx"], &["csvx"]);
    fails_with(BENCH, &["-m", &m, "-r", "0"], &["-r"]);
    fails_with(BENCH, &["-m", &m, "-p", "x1"], &["x1"]);
    fails_with(TOK, &["-m", &m], &["-p", "-f"]);
    fails_with(
        RUN,
        &["--synth", "/tmp/never.gguf", "--type", "Q9_Z"],
        &["Q9_Z", "F16"],
    );
    fails_with(
        RUN,
        &[
            "--synth",
            "/tmp/never.gguf",
            "--experts",
            "4",
            "--used",
            "8",
        ],
        &["--used"],
    );
    fails_with(
        RUN,
        &["--synth", "/tmp/never.gguf", "--arch", "gpt9"],
        &["gpt9", "qwen3moe"],
    );
}

#[test]
fn override_regex_that_does_not_compile() {
    let m = f32_model();
    fails_with(
        RUN,
        &["-m", &m, "-ot", "blk\\.(0=CPU"],
        &["does not compile"],
    );
    fails_with(RUN, &["-m", &m, "-ot", "exps"], &["REGEX=BACKEND"]);
    // no -m: the flag error comes before the default model is generated
    fails_with(BENCH, &["-ot", "(=CPU", "-r", "1"], &["does not compile"]);
}

#[test]
fn backend_that_does_not_exist() {
    let m = f32_model();
    fails_with(RUN, &["-m", &m, "--device", "FOO"], &["FOO", "SIM0"]);
    fails_with(RUN, &["-m", &m, "--device", "CUDA7"], &["CUDA7"]);
    fails_with(
        RUN,
        &["-m", &m, "-ot", "exps=CUDA3"],
        &["CUDA3", "available: CPU"],
    );
    fails_with(BENCH, &["-m", &m, "-dev", "FOO", "-r", "1"], &["FOO"]);
}

#[test]
fn help_documents_every_flag() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(RUN, &["-h"], dir.path());
    ok(&o);
    let h = stdout(&o);
    for f in [
        "-m",
        "-p",
        "-f",
        "-n",
        "-t",
        "-c",
        "-b",
        "-ub",
        "--seed",
        "--temp",
        "--top-k",
        "--top-p",
        "--min-p",
        "--repeat-penalty",
        "-ngl",
        "--cpu-moe",
        "--n-cpu-moe",
        "-ot",
        "--override-tensor",
        "--device",
        "--no-expert-copy",
        "--offload-min-batch",
        "--logits-out",
        "--tokens-out",
        "--stats-out",
        "--synth",
        "--verbose",
    ] {
        assert!(h.contains(f), "help lacks {f}:\n{h}");
    }
}

#[test]
fn prompt_longer_than_the_context() {
    let m = f32_model();
    fails_with(
        RUN,
        &[
            "-m",
            &m,
            "-c",
            "8",
            "-p",
            "this prompt is much longer than eight tokens, surely",
        ],
        &["more than the context of 8"],
    );
}
