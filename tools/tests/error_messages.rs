//! Errors printed once, magic bytes in hex; `--synth` refuses a model too
//! large for memory before allocating it (an error naming the size).

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

#[test]
fn bad_magic_is_printed_once_in_hex() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUX0123456789abcdef").unwrap();
    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    for (p, needle) in [
        (&bad, "bad magic 0x47 0x47 0x55 0x58 (\"GGUX\")"),
        (&empty, "bad magic (the file is empty)"),
    ] {
        let o = run(RUN, &["-m", &p.to_string_lossy(), "-n", "1"], dir.path());
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(needle), "{err}");
        assert!(err.contains("0x46"), "expected bytes in hex: {err}");
        assert_eq!(err.matches("bad magic").count(), 1, "printed once: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn synth_too_large_is_an_error_naming_the_size() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.gguf");
    let o = run(
        RUN,
        &[
            "--synth",
            &out.to_string_lossy(),
            "--embd",
            "1000000",
            "--ff",
            "1000000",
        ],
        dir.path(),
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--synth: the model would take") && err.contains("TiB"),
        "{err}"
    );
    assert!(!out.exists());
}
