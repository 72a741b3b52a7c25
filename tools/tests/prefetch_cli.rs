//! The prefetch flags through the tools: a bad `--prefetch-experts-slots`
//! is a clear error naming the flag (exit 1, no panic), for llama-run and
//! llama-bench; a count that does not fit a sim device's memory is a
//! warning with the count used; `--stats-out` has the exact keys, and
//! the expert bytes add up; auto reports its choices and the prompt
//! guesses' recall (`--prefetch-selective on|off`).

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");
const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");

fn q4k_model() -> Result<String, fixtures::SkipReason> {
    Ok(model("tiny-qwen3moe-q4_k.gguf")?
        .to_string_lossy()
        .into_owned())
}

#[test]
fn bad_slot_counts_are_errors_naming_the_flag() {
    let m = or_skip!(q4k_model());
    for bin in [RUN, BENCH] {
        for bad in ["-7", "x"] {
            let dir = tempfile::tempdir().unwrap();
            let args = [
                "-m",
                &m,
                "--device",
                "SIM0",
                "--cpu-moe",
                "--prefetch-experts-slots",
                bad,
            ];
            let mut args: Vec<&str> = args.to_vec();
            if bin == RUN {
                args.extend(["-n", "1", "-p", "hi"]);
            } else {
                args.extend(["-p", "8", "-n", "0", "-r", "1"]);
            }
            let o = run(bin, &args, dir.path());
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{bin} {args:?}:\n{err}");
            assert!(!err.contains("panicked"), "{err}");
            assert!(
                err.contains("--prefetch-experts-slots") && err.contains(bad),
                "{err}"
            );
        }
    }
}

#[test]
fn slots_that_do_not_fit_warn_and_stats_add_up() {
    let m = or_skip!(q4k_model());
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("s.json");
    let stats_s = stats.to_string_lossy().into_owned();
    let prompt = vec!["word"; 40].join(" ");
    let args = [
        "-m",
        &m,
        "--device",
        "SIM0",
        "--cpu-moe",
        "-nomb",
        "1",
        "--moe-cache-mib",
        "0",
        "--moe-cache-max-batch",
        "1",
        "--sim-mem-mib",
        "40",
        "-p",
        &prompt,
        "-n",
        "3",
        "--prefetch-experts-slots",
        "100000",
        "--stats-out",
        &stats_s,
    ];
    let o = run(RUN, &args, dir.path());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: --prefetch-experts-slots 100000"),
        "{err}"
    );
    assert!(err.contains("using"), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let u = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
    assert!(u("prefetch_bytes") > 0, "{v}");
    assert_eq!(
        u("critical_path_h2d_bytes") + u("prefetch_bytes_used") + u("prefetch_bytes_wasted"),
        u("h2d_bytes_experts")
    );
    assert_eq!(
        u("prefetch_bytes_used") + u("prefetch_bytes_wasted"),
        u("prefetch_bytes")
    );
    assert!(v["moe_predict_recall"].is_null());
    assert!(err.contains("prefetch      = "), "{err}");
}

#[test]
fn auto_reports_its_choices_and_the_prompt_guesses() {
    let m = or_skip!(q4k_model());
    let dir = tempfile::tempdir().unwrap();
    let prompt = vec!["word"; 40].join(" ");
    for sel in ["on", "off"] {
        let stats = dir.path().join(format!("s-{sel}.json"));
        let stats_s = stats.to_string_lossy().into_owned();
        let args = [
            "-m",
            &m,
            "--device",
            "SIM0",
            "--cpu-moe",
            "-nomb",
            "1",
            "--moe-cache-mib",
            "0",
            "--moe-cache-max-batch",
            "1",
            "-p",
            &prompt,
            "-n",
            "3",
            "--prefetch-experts-slots",
            "-1",
            "--prefetch-selective",
            sel,
            "--stats-out",
            &stats_s,
        ];
        let o = run(RUN, &args, dir.path());
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{err}");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        let u = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k}: {v}"));
        let decided =
            u("prefetch_auto_none") + u("prefetch_auto_whole") + u("prefetch_auto_selective");
        assert!(decided > 0, "{v}");
        assert!(u("prefetch_selective_late_bytes") <= u("critical_path_h2d_bytes"));
        assert_eq!(
            u("critical_path_h2d_bytes") + u("prefetch_bytes_used") + u("prefetch_bytes_wasted"),
            u("h2d_bytes_experts")
        );
        if sel == "on" {
            // the prompt's guesses were measured against its ids
            let r = v["prefetch_predict_recall"].as_f64().expect("recall");
            assert!((0.0..=1.0).contains(&r), "{v}");
            assert!(err.contains("prompt guess recall"), "{err}");
        } else {
            assert!(v["prefetch_predict_recall"].is_null(), "{v}");
            assert_eq!(u("prefetch_auto_selective"), 0);
        }
        assert!(err.contains("; auto: "), "{err}");
    }
    // a bad value names the flag
    let o = run(
        RUN,
        &[
            "-m",
            &m,
            "--prefetch-selective",
            "maybe",
            "-p",
            "hi",
            "-n",
            "1",
        ],
        dir.path(),
    );
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("--prefetch-selective") && err.contains("maybe"),
        "{err}"
    );
}
