//! `--expert-trace-in FILE` on llama-run and llama-bench: the run is routed
//! by the trace and says so (summary line, `"forced_routing": true` in
//! `--stats-out` and in llama-bench's JSON); a missing or unfit trace is an
//! error naming the flag (exit 1, no panic).

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");
const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");
const TOOL: &str = env!("CARGO_BIN_EXE_llama-moe-cache");

fn synth(dir: &std::path::Path, model: &str, kind: &str) -> String {
    let out = dir.join(format!("{kind}.trace"));
    let o = run(
        TOOL,
        &[
            "--synth-trace",
            kind,
            "-m",
            model,
            "--tokens",
            "64",
            "--trace-out",
            out.to_str().unwrap(),
            "--no-replay",
        ],
        dir,
    );
    ok(&o);
    out.to_string_lossy().into_owned()
}

fn stats(dir: &std::path::Path, extra: &[&str]) -> (serde_json::Value, String) {
    let m = f32_model();
    let s = dir.join("s.json");
    let mut args = vec![
        "-m",
        &m,
        "-p",
        "hello world",
        "-n",
        "4",
        "--temp",
        "0",
        "--device",
        "SIM0",
        "--cpu-moe",
        "--stats-out",
        s.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run(RUN, &args, dir);
    ok(&o);
    let v = serde_json::from_str(&std::fs::read_to_string(&s).unwrap()).unwrap();
    (v, stderr(&o))
}

#[test]
fn llama_run_says_its_routing_is_forced() {
    let dir = tempfile::tempdir().unwrap();
    let t = synth(dir.path(), &f32_model(), "topic");
    let (v, err) = stats(dir.path(), &["--expert-trace-in", &t]);
    assert_eq!(v["forced_routing"], serde_json::json!(true), "{v}");
    assert!(
        err.contains("forced routing = every MoE layer uses the expert ids of"),
        "{err}"
    );
    assert!(
        err.contains("(64 tokens, wrapping); the text is not the model's"),
        "{err}"
    );
    let (v, err) = stats(dir.path(), &[]);
    assert_eq!(v["forced_routing"], serde_json::json!(false), "{v}");
    assert!(!err.contains("forced routing"), "{err}");
}

#[test]
fn llama_bench_writes_forced_routing_per_test() {
    let dir = tempfile::tempdir().unwrap();
    let m = f32_model();
    let t = synth(dir.path(), &m, "zipf");
    let o = run(
        BENCH,
        &[
            "-m",
            &m,
            "-dev",
            "SIM0",
            "-cmoe",
            "1",
            "-p",
            "16",
            "-n",
            "2",
            "-r",
            "1",
            "-o",
            "json",
            "--expert-trace-in",
            &t,
        ],
        dir.path(),
    );
    ok(&o);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let tests = v.as_array().unwrap();
    assert_eq!(tests.len(), 2);
    for r in tests {
        assert_eq!(r["forced_routing"], serde_json::json!(true), "{r}");
    }
}

#[test]
fn a_missing_or_unfit_trace_is_an_error_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let m = f32_model();
    let missing = dir.path().join("none.trace");
    let missing = missing.to_str().unwrap();
    fails_with_exit_1(
        RUN,
        &["-m", &m, "-n", "1", "--expert-trace-in", missing],
        &["--expert-trace-in", "none.trace"],
    );
    fails_with_exit_1(
        BENCH,
        &[
            "-m",
            &m,
            "-p",
            "0",
            "-n",
            "1",
            "-r",
            "1",
            "--expert-trace-in",
            missing,
        ],
        &["--expert-trace-in", "none.trace"],
    );
    // a trace of 16 experts, 4 used, on a model of 8 experts, 2 used
    let q = lean_model("tiny-qwen3moe-q4_k.gguf")
        .to_string_lossy()
        .into_owned();
    let other = synth(dir.path(), &q, "random");
    fails_with_exit_1(
        RUN,
        &["-m", &m, "-n", "1", "--expert-trace-in", &other],
        &[
            "--expert-trace-in",
            "cannot route this model",
            "picks 4 experts per token, the model 2",
        ],
    );
    let junk = dir.path().join("junk.trace");
    std::fs::write(&junk, b"not a trace").unwrap();
    fails_with_exit_1(
        RUN,
        &[
            "-m",
            &m,
            "-n",
            "1",
            "--expert-trace-in",
            junk.to_str().unwrap(),
        ],
        &["--expert-trace-in", "MOETRACE"],
    );
}
