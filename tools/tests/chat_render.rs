//! `llama-run --chat-template-file FILE --chat-render MESSAGES.json`: every
//! reference case of `tests/data/chat/cases.json` through the binary, byte
//! for byte (exit 0), or the template's own error (exit 1); and the bad
//! inputs of the render mode.

mod common;
use common::*;

use std::path::Path;
use std::process::{Command, Output};

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

/// 2026-12-01 00:00:00 UTC, the date the reference rendered at.
const REFERENCE_NOW: &str = "1796083200";

/// `chat/FILE`: the chat fixtures are in the lean set tracked in tests/data.
fn chat_file(file: &str) -> std::path::PathBuf {
    fixtures::lean_path(&format!("chat/{file}"))
}

fn render(args: &[&str]) -> Output {
    Command::new(RUN)
        .args(args)
        .env("SOURCE_DATE_EPOCH", REFERENCE_NOW)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run llama-run")
}

fn write_json(dir: &Path, name: &str, v: &serde_json::Value) -> String {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string(v).unwrap()).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn every_reference_case_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chat_file("cases.json")).unwrap()).unwrap();
    let bos = cases["bos_token"].as_str().unwrap();
    let eos = cases["eos_token"].as_str().unwrap();
    let mut failures = Vec::new();
    let list = cases["cases"].as_array().unwrap();
    assert_eq!(list.len(), 90);
    for case in list {
        let name = case["template"].as_str().unwrap();
        let conv = case["conversation"].as_str().unwrap();
        let gen = case["add_generation_prompt"].as_bool().unwrap();
        let msgs = write_json(
            dir.path(),
            &format!("{conv}.json"),
            &cases["conversations"][conv],
        );
        let tmpl = chat_file(&format!("{name}.jinja"));
        let tmpl = tmpl.to_string_lossy();
        let mut args = vec![
            "--chat-template-file",
            &tmpl,
            "--chat-render",
            &msgs,
            "--chat-bos",
            bos,
            "--chat-eos",
            eos,
        ];
        if !gen {
            args.push("--no-generation-prompt");
        }
        let o = render(&args);
        let label = format!("{name} / {conv} / gen={gen}");
        if let Some(file) = case["output"].as_str() {
            let want = std::fs::read(chat_file(file)).unwrap();
            if o.status.code() != Some(0) {
                failures.push(format!("{label}: exit {:?}: {}", o.status, stderr(&o)));
            } else if o.stdout != want {
                failures.push(format!("{label}: output differs"));
            }
        } else {
            let err = case["error"].as_str().unwrap();
            if o.status.code() != Some(1) || !stderr(&o).contains(err) || !o.stdout.is_empty() {
                failures.push(format!(
                    "{label}: want exit 1 with {err:?}, got {:?}: {}",
                    o.status,
                    stderr(&o)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bos_and_eos_default_to_the_models_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let tmpl = dir.path().join("t.jinja");
    std::fs::write(
        &tmpl,
        "{{ bos_token }}|{{ eos_token }}|{{ messages | length }}",
    )
    .unwrap();
    let msgs = write_json(dir.path(), "m.json", &serde_json::json!([]));
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let o = render(&[
        "-m",
        &m.to_string_lossy(),
        "--chat-template-file",
        &tmpl.to_string_lossy(),
        "--chat-render",
        &msgs,
    ]);
    ok(&o);
    // the SPM vocabulary's BOS and EOS texts
    assert_eq!(stdout(&o), "<s>|</s>|0");
    // no model: empty
    let o = render(&[
        "--chat-template-file",
        &tmpl.to_string_lossy(),
        "--chat-render",
        &msgs,
    ]);
    ok(&o);
    assert_eq!(stdout(&o), "||0");
}

#[test]
fn a_model_without_a_template_falls_back_to_chatml() {
    let dir = tempfile::tempdir().unwrap();
    let msgs = write_json(
        dir.path(),
        "m.json",
        &serde_json::json!({"messages": [{"role": "user", "content": "Hi"}]}),
    );
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let o = render(&[
        "-m",
        &m.to_string_lossy(),
        "--chat-render",
        &msgs,
        "--no-generation-prompt",
    ]);
    ok(&o);
    assert_eq!(stdout(&o), "<|im_start|>user\nHi<|im_end|>\n");
}

#[test]
fn bad_inputs_fail_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_json(
        dir.path(),
        "m.json",
        &serde_json::json!([{"role": "user", "content": "x"}]),
    );
    let tmpl = chat_file("Qwen-Qwen3-0.6B.jinja");
    let tmpl = tmpl.to_string_lossy().into_owned();
    let bad_json = dir.path().join("bad.json");
    std::fs::write(&bad_json, "[{").unwrap();
    let no_role = write_json(dir.path(), "r.json", &serde_json::json!([{"content": "x"}]));
    let bad_tmpl = dir.path().join("bad.jinja");
    std::fs::write(&bad_tmpl, "{% for %}").unwrap();
    let undefined = dir.path().join("undef.jinja");
    std::fs::write(&undefined, "{{ messages[0].nope.deeper }}").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--chat-template-file".into(),
                "/nonexistent.jinja".into(),
                "--chat-render".into(),
                good.clone(),
            ],
            "not found",
        ),
        (
            vec![
                "--chat-template-file".into(),
                tmpl.clone(),
                "--chat-render".into(),
                "/nonexistent.json".into(),
            ],
            "not found",
        ),
        (
            vec![
                "--chat-template-file".into(),
                tmpl.clone(),
                "--chat-render".into(),
                bad_json.to_string_lossy().into(),
            ],
            "not valid JSON",
        ),
        (
            vec![
                "--chat-template-file".into(),
                tmpl.clone(),
                "--chat-render".into(),
                no_role,
            ],
            "role",
        ),
        (
            vec![
                "--chat-template-file".into(),
                bad_tmpl.to_string_lossy().into(),
                "--chat-render".into(),
                good.clone(),
            ],
            "does not compile",
        ),
        (
            vec![
                "--chat-template-file".into(),
                undefined.to_string_lossy().into(),
                "--chat-render".into(),
                good.clone(),
            ],
            "failed to render",
        ),
    ];
    for (args, needle) in cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = render(&a);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{a:?}: {err}");
        assert!(
            err.contains(needle),
            "{a:?}: stderr lacks {needle:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(o.stdout.is_empty(), "{a:?}");
    }
}

/// The fixture model with `tokenizer.chat_template` set to `template`.
fn model_with_template(dir: &Path, template: &str) -> std::path::PathBuf {
    use ggml_core::gguf::{GgufFile, GgufValue, GgufWriter};
    let src = GgufFile::open(lean_model("tiny-qwen3moe-f32.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.set_kv(k.clone(), v.clone());
    }
    w.set_kv("tokenizer.chat_template", GgufValue::from(template));
    for t in src.tensors() {
        w.add_tensor(t.name.clone(), t.shape(), t.ty, src.tensor_data(t).to_vec())
            .unwrap();
    }
    let p = dir.join("with-template.gguf");
    w.write_file(&p).unwrap();
    p
}

#[test]
fn the_models_own_template_is_read_from_the_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let tmpl = std::fs::read_to_string(chat_file("Qwen-Qwen3-0.6B.jinja")).unwrap();
    let m = model_with_template(dir.path(), &tmpl);
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chat_file("cases.json")).unwrap()).unwrap();
    let msgs = write_json(dir.path(), "m.json", &cases["conversations"]["multi-turn"]);
    let o = render(&[
        "-m",
        &m.to_string_lossy(),
        "--chat-render",
        &msgs,
        "--chat-bos",
        "<BOS>",
        "--chat-eos",
        "<EOS>",
    ]);
    ok(&o);
    let want = std::fs::read(chat_file("Qwen-Qwen3-0.6B.multi-turn.gen.txt")).unwrap();
    assert_eq!(o.stdout, want);
    // a named template that the model lacks is an error naming it
    let o = render(&[
        "-m",
        &m.to_string_lossy(),
        "--chat-render",
        &msgs,
        "--chat-template",
        "tool_use",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--chat-template tool_use"),
        "{}",
        stderr(&o)
    );
}
