//! `--load-mode` on llama-run and `-lm` on llama-bench: a bad mode is a
//! clear error, `pin` on the sim device warns once and generates what
//! `mmap` generates, `dio` too.

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");
const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");

#[test]
fn a_bad_load_mode_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let m = m.to_str().unwrap();
    for (bin, args) in [
        (
            RUN,
            vec!["-m", m, "-p", "hi", "-n", "1", "--load-mode", "x"],
        ),
        (BENCH, vec!["-m", m, "-lm", "mmap,x"]),
    ] {
        let o = run(bin, &args, dir.path());
        let e = stderr(&o);
        assert!(!o.status.success(), "{e}");
        assert!(
            e.contains("unknown load mode 'x'") && e.contains("pin"),
            "{e}"
        );
        assert!(!e.contains("panicked"), "{e}");
    }
}

#[test]
fn pin_and_dio_generate_what_mmap_generates() {
    let dir = tempfile::tempdir().unwrap();
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let m = m.to_str().unwrap();
    let gen = |mode: &str| {
        let o = run(
            RUN,
            &[
                "-m",
                m,
                "-p",
                "Once upon a time",
                "-n",
                "8",
                "--temp",
                "0",
                "--device",
                "SIM0",
                "--cpu-moe",
                "--load-mode",
                mode,
            ],
            dir.path(),
        );
        ok(&o);
        (stdout(&o), stderr(&o))
    };
    let (base, _) = gen("mmap");
    for mode in ["pin", "dio", "none", "mlock"] {
        let (out, err) = gen(mode);
        assert_eq!(out, base, "--load-mode {mode}");
        if mode == "pin" {
            assert_eq!(err.matches("--load-mode pin").count(), 1, "{err}");
            assert!(
                err.contains("SIM0") && err.contains("behaves as mmap"),
                "{err}"
            );
        }
    }
}

#[test]
fn bench_reports_each_load_mode() {
    let dir = tempfile::tempdir().unwrap();
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let o = run(
        BENCH,
        &[
            "-m",
            m.to_str().unwrap(),
            "-lm",
            "mmap,pin,dio",
            "-p",
            "8",
            "-n",
            "2",
            "-r",
            "1",
            "-o",
            "jsonl",
        ],
        dir.path(),
    );
    ok(&o);
    let out = stdout(&o);
    for mode in ["mmap", "pin", "dio"] {
        assert!(
            out.contains(&format!("\"load_mode\": \"{mode}\""))
                || out.contains(&format!("\"load_mode\":\"{mode}\"")),
            "{mode}: {out}"
        );
    }
}
