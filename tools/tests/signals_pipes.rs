//! Signals and pipes: Ctrl-C stops at the next token with the summary and
//! complete output files (exit 130); a second Ctrl-C exits at once (130, no
//! summary, nothing under the final output names); a closed stdout ends
//! quietly (141); a closed stderr never panics; a failed run leaves no
//! output files.

mod common;
use common::*;

use std::io::{BufRead, Read};
use std::process::{Command, Stdio};

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

fn m() -> String {
    lean_model("tiny-qwen3moe-f32.gguf")
        .to_string_lossy()
        .into_owned()
}

fn long_run(dir: &std::path::Path) -> Command {
    let mut c = Command::new(RUN);
    c.args([
        "-m",
        &m(),
        "-n",
        "-1",
        "--ignore-eos",
        "-c",
        "4096",
        "--temp",
        "0",
    ])
    .arg("--stats-out")
    .arg(dir.join("s.json"))
    .arg("--tokens-out")
    .arg(dir.join("t.bin"))
    .env("GGML_RS_CACHE", dir)
    .env_remove("RUST_BACKTRACE");
    c
}

fn stats(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("s.json")).unwrap()).unwrap()
}

fn check_files_complete(dir: &std::path::Path, s: &serde_json::Value) {
    let n = s["prompt_tokens"].as_u64().unwrap() + s["gen_tokens"].as_u64().unwrap();
    let t = std::fs::read(dir.join("t.bin")).unwrap();
    assert_eq!(t.len() as u64, 4 * n, "every token id in --tokens-out");
    let left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn sigint_stops_with_summary_and_complete_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = long_run(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // wait for generated text, then Ctrl-C
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 64];
    let mut got = 0;
    while got < 40 {
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "llama-run ended before generating");
        got += n;
    }
    // SAFETY: sending SIGINT to the child we spawned.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted"),
        "the summary says why it stopped: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let s = stats(dir.path());
    assert_eq!(s["stop"], "interrupted");
    assert!(s["gen_tokens"].as_u64().unwrap() < 4000);
    check_files_complete(dir.path(), &s);
}

/// The first SIGINT lands while a long prompt is being decoded (llama-run
/// only looks at it before the next sampled token, so the prompt goes on);
/// the second one, while the prompt still runs, ends the process at once:
/// exit 130, no summary, and neither `--stats-out` nor `--tokens-out`
/// appears under its final name. (With one SIGINT the same run would finish
/// the prompt, print the summary and write both: the test above.)
#[test]
fn second_sigint_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // ~3300 prompt tokens decoded one per ubatch on one thread: seconds
    let prompt = dir.path().join("p.txt");
    std::fs::write(
        &prompt,
        "The quick brown fox jumps over the lazy dog. ".repeat(200),
    )
    .unwrap();
    let mut child = long_run(dir.path())
        .args(["-b", "1", "-ub", "1", "-t", "1"])
        .arg("-f")
        .arg(&prompt)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // the placement line comes after the handler is installed and before
    // the prompt
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut head = String::new();
    while !head.contains("placement:") {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "llama-run ended early: {head}"
        );
        head.push_str(&line);
    }
    // SAFETY (both): sending SIGINT to the child we spawned.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{head}{rest}");
    assert!(!rest.contains("prompt eval"), "no summary: {rest}");
    assert!(!rest.contains("panicked"), "{rest}");
    assert!(!dir.path().join("s.json").exists(), "no --stats-out");
    assert!(!dir.path().join("t.bin").exists(), "no --tokens-out");
}

#[test]
fn closed_stdout_exits_141_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = long_run(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 10];
    out.read_exact(&mut buf).unwrap();
    drop(out); // `| head -c 10`
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(141), "{err}");
    assert!(!err.contains("error") && !err.contains("panicked"), "{err}");
    let s = stats(dir.path());
    assert_eq!(s["stop"], "stdout_closed");
    check_files_complete(dir.path(), &s);
}

#[test]
fn closed_stderr_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(RUN);
    c.args(["-m", &m(), "-n", "8", "-v"])
        .arg("--stats-out")
        .arg(dir.path().join("s.json"))
        .arg("--tokens-out")
        .arg(dir.path().join("t.bin"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    drop(child.stderr.take()); // `2>&1 >/dev/null | head -0`
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let s = stats(dir.path());
    assert_eq!(s["gen_tokens"], 8);
    check_files_complete(dir.path(), &s);
}

#[test]
fn a_failed_run_leaves_no_output_files() {
    let dir = tempfile::tempdir().unwrap();
    let (sp, tp) = (dir.path().join("s.json"), dir.path().join("t.bin"));
    let o = run(
        RUN,
        &[
            "-m",
            &m(),
            "-c",
            "4",
            "-p",
            "a prompt far longer than a context of four tokens",
            "--stats-out",
            &sp.to_string_lossy(),
            "--tokens-out",
            &tp.to_string_lossy(),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("more than the context"),
        "{}",
        stderr(&o)
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "models" && !n.to_string_lossy().starts_with("default"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
