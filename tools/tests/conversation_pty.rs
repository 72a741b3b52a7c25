//! `llama-run -m tiny-qwen3moe-q4_k.gguf -cnv` driven through a
//! pseudo-terminal: two turns, the second decodes only its own tokens (the
//! KV cache keeps the first), `/exit` prints the summary.

mod common;
use common::*;

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

/// A pseudo-terminal pair: (master, slave).
fn openpty() -> (std::fs::File, OwnedFd) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two descriptors we then own; null name,
    // termios and window size ask for the defaults.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are fresh and owned by nothing else.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

fn wait_for(buf: &Arc<Mutex<Vec<u8>>>, what: &str, count: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
        if text.matches(what).count() >= count {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what:?} x{count}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `(new prompt tokens, generated, in the cache)` of turn `n`.
fn turn(text: &str, n: usize) -> (usize, usize, usize) {
    let key = format!("turn {n}: ");
    let line = text
        .lines()
        .find_map(|l| l.split_once(&key).map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| panic!("no {key:?} line:\n{text}"));
    let nums: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    (nums[0], nums[1], nums[2])
}

#[test]
fn two_turns_through_a_pty_reuse_the_cache() {
    let m = or_skip!(model("tiny-qwen3moe-q4_k.gguf"));
    let (mut master, slave) = openpty();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(RUN)
        .args(["-m", &m.to_string_lossy(), "-cnv", "-n", "6", "--temp", "0"])
        .env("GGML_RS_CACHE", dir.path())
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let buf = Arc::new(Mutex::new(Vec::new()));
    let mut reader = master.try_clone().unwrap();
    let b2 = Arc::clone(&buf);
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = reader.read(&mut chunk) {
            if n == 0 {
                break;
            }
            b2.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    wait_for(&buf, "> ", 1);
    master.write_all(b"Hello there\n").unwrap();
    wait_for(&buf, "turn 1:", 1);
    wait_for(&buf, "> ", 2);
    master.write_all(b"And again\n").unwrap();
    wait_for(&buf, "turn 2:", 1);
    wait_for(&buf, "> ", 3);
    master.write_all(b"/exit\n").unwrap();
    let text = wait_for(&buf, "stopped by", 1);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{text}");

    let (p1, g1, c1) = turn(&text, 1);
    let (p2, g2, c2) = turn(&text, 2);
    // the first turn decodes the whole rendering (ChatML: the model has no
    // template of its own), with its BOS
    let tok = ::common::tok::load_vocab(&m).unwrap();
    let first = "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(
        p1,
        ::common::tok::tokenize(&tok, first, true, true)
            .unwrap()
            .len(),
        "{text}"
    );
    // the second only the text the new turn adds after the cached reply
    let added = "<|im_end|>\n<|im_start|>user\nAnd again<|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(
        p2,
        ::common::tok::tokenize(&tok, added, false, true)
            .unwrap()
            .len(),
        "{text}"
    );
    assert!(g1 >= 1 && g2 >= 1);
    // the cache grew by exactly the new turn: its prompt and its reply
    // (an end-of-generation token is sampled but not decoded)
    let grown = c2 - c1;
    assert!(
        grown == p2 + g2 || grown == p2 + g2 - 1,
        "{c1} -> {c2}: {text}"
    );
    assert!(
        text.contains("2 turns") && text.contains("stopped by    = exit"),
        "{text}"
    );
    assert!(!text.contains("panicked"), "{text}");
}

#[test]
fn stdin_script_and_end_of_input() {
    let m = or_skip!(model("tiny-qwen3moe-q4_k.gguf"));
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(RUN)
        .args([
            "-m",
            &m.to_string_lossy(),
            "-cnv",
            "-n",
            "4",
            "--temp",
            "0",
            "-sys",
            "Be brief.",
        ])
        .env("GGML_RS_CACHE", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"One\n").unwrap(); // then end of input (Ctrl-D)
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("1 turns") && err.contains("stopped by    = eof"),
        "{err}"
    );
    let tok = ::common::tok::load_vocab(&m).unwrap();
    let first = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nOne<|im_end|>\n<|im_start|>assistant\n";
    let (p1, _, _) = turn(&err, 1);
    assert_eq!(
        p1,
        ::common::tok::tokenize(&tok, first, true, true)
            .unwrap()
            .len(),
        "{err}"
    );
}
