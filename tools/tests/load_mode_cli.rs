//! `--load-mode` on llama-run and `-lm` on llama-bench: a bad mode is a
//! clear error, `pin` on the sim device warns once and generates what
//! `mmap` generates, `dio` too. `--no-host` (llama.cpp's flag): the
//! emulated CUDA0 with experts in host memory uploads them from pinned
//! memory by default and pageable with it, and the summary and
//! `--stats-out` (`host_weights_upload`) say which.

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

#[test]
fn the_summary_and_stats_say_whether_host_weights_upload_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let m = m.to_str().unwrap();
    let gen = |device: &str, extra: &[&str]| {
        let stats = dir
            .path()
            .join(format!("stats-{device}-{}.json", extra.len()));
        let st = stats.to_str().unwrap().to_string();
        let mut args = vec![
            "-m",
            m,
            "-p",
            "Once upon a time",
            "-n",
            "6",
            "--temp",
            "0",
            "--device",
            device,
            "--stats-out",
            &st,
        ];
        if device != "CPU" {
            args.push("--cpu-moe");
        }
        args.extend_from_slice(extra);
        let o = std::process::Command::new(RUN)
            .args(&args)
            .env("GGML_RS_CACHE", dir.path())
            .env("GGML_CUDA_EMULATOR", "1")
            .env_remove("GGML_CUDA_REQUIRE_DEVICE")
            .output()
            .unwrap();
        ok(&o);
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let key = json["host_weights_upload"].as_str().map(str::to_string);
        (stdout(&o), stderr(&o), key)
    };
    let (text, err, key) = gen("CUDA0", &[]);
    assert_eq!(key.as_deref(), Some("pinned"), "{err}");
    assert!(
        err.contains("host weights  = pinned: page-locked for CUDA0"),
        "{err}"
    );
    let (text2, err, key) = gen("CUDA0", &["--no-host"]);
    assert_eq!(key.as_deref(), Some("pageable"), "{err}");
    assert!(
        err.contains("host weights  = pageable: uploads to CUDA0 copy from pageable memory"),
        "{err}"
    );
    assert_eq!(text, text2, "--no-host changed the text");
    // every weight on the CPU: nothing to upload, no line
    let (_, err, key) = gen("CPU", &[]);
    assert_eq!(key.as_deref(), Some("none"), "{err}");
    assert!(!err.contains("host weights  ="), "{err}");
}
