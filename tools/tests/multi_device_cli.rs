//! `--device A,B` with `-sm`, `-ts`, `-mg` on the tools: bad values are
//! clear errors naming them, and llama-run on `SIM0,SIM1` writes the CPU's
//! logits, byte for byte.

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");
const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");

#[test]
fn bad_device_lists_and_split_flags_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let m = m.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--device", "SIM0,SIM0"], "device 'SIM0' is listed twice"),
        (&["--device", "SIM0,GPU3"], "unknown device 'GPU3'"),
        (&["--device", "SIM0,,SIM1"], "empty device name"),
        (&["--device", "SIM0,CPU"], "'CPU' is not a device"),
        (
            &["--device", "SIM0,SIM1", "-ts", "3,-1"],
            "-1 is not a share",
        ),
        (
            &["--device", "SIM0,SIM1", "-ts", "0,0"],
            "every share is zero",
        ),
        (
            &["--device", "SIM0,SIM1", "-mg", "2"],
            "-mg 2: no such device",
        ),
        (&["--device", "SIM0,SIM1", "-sm", "row"], "'row'"),
        (
            &["--device", "SIM0,SIM1", "-sm", "tensor"],
            "'tensor' is not a split mode",
        ),
        (
            &["--device", "SIM0,SIM1", "-ot", "exps=SIM2"],
            "backend 'SIM2'",
        ),
    ];
    for (flags, want) in cases {
        let mut args = vec!["-m", m, "-p", "hi", "-n", "1"];
        args.extend_from_slice(flags);
        let o = run(RUN, &args, dir.path());
        let e = stderr(&o);
        assert!(!o.status.success(), "{flags:?}: {e}");
        assert!(e.contains(want), "{flags:?}: want '{want}' in: {e}");
        assert!(!e.contains("panicked"), "{e}");
    }
    for (flags, want) in [
        (vec!["-dev", "SIM0/SIM0"], "listed twice"),
        (
            vec!["-dev", "SIM0/SIM1", "-mg", "4"],
            "-mg 4: no such device",
        ),
    ] {
        let mut args = vec!["-m", m, "-p", "0", "-n", "1", "-r", "1"];
        args.extend_from_slice(&flags);
        let o = run(BENCH, &args, dir.path());
        let e = stderr(&o);
        assert!(!o.status.success(), "{flags:?}: {e}");
        assert!(e.contains(want), "{flags:?}: want '{want}' in: {e}");
        assert!(!e.contains("panicked"), "{e}");
    }
    // a -ts longer than the device list runs, its extra values ignored with
    // a warning, as llama.cpp does
    let args = [
        "-m",
        m,
        "-p",
        "hi",
        "-n",
        "1",
        "--device",
        "SIM0,SIM1",
        "-ts",
        "3,1,1",
    ];
    let o = run(RUN, &args, dir.path());
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(
        e.contains("warning: -ts 3,1,1: 3 values for 2 devices (SIM0,SIM1): the last 1 ignored"),
        "{e}"
    );
}

#[test]
fn two_sim_devices_write_the_cpus_logits() {
    let dir = tempfile::tempdir().unwrap();
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let m = m.to_str().unwrap();
    let logits = |flags: &[&str], name: &str| {
        let out = dir.path().join(format!("{name}.bin"));
        let mut args = vec![
            "-m",
            m,
            "-p",
            "Once upon a time",
            "-n",
            "6",
            "--temp",
            "0",
            "--logits-out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        let o = run(RUN, &args, dir.path());
        ok(&o);
        std::fs::read(&out).unwrap()
    };
    let cpu = logits(&["--device", "CPU"], "cpu");
    assert!(!cpu.is_empty());
    for (i, flags) in [
        &["--device", "SIM0,SIM1"][..],
        &["--device", "SIM0,SIM1", "-ts", "1,3"],
        &["--device", "SIM0,SIM1", "--cpu-moe", "--moe-cache-mib", "0"],
        &["-dev", "SIM0,SIM1", "-sm", "none", "-mg", "1"],
    ]
    .iter()
    .enumerate()
    {
        assert!(
            logits(flags, &format!("d{i}")) == cpu,
            "{flags:?}: logits differ from the CPU's"
        );
    }
}

/// `--stats-out` key `devices`: one object per `--device` with exactly
/// `name`, `layers`, `moe_cache_mib`, `moe_cache_hit_rate`,
/// `h2d_bytes_experts`; the expert bytes add up to the run's; an empty
/// list on the CPU; `--moe-cache-mib A,B` sizes each device's cache; the
/// activations between the devices counted as `d2d_bytes` (peer copies),
/// none in `d2d_bytes_via_host`.
#[test]
fn stats_out_has_a_devices_list() {
    let dir = tempfile::tempdir().unwrap();
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let m = m.to_str().unwrap();
    let stats = |flags: &[&str], name: &str| -> serde_json::Value {
        let out = dir.path().join(format!("{name}.json"));
        let mut args = vec![
            "-m",
            m,
            "-p",
            "Once upon a time",
            "-n",
            "8",
            "--temp",
            "0",
            "--stats-out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        let o = run(RUN, &args, dir.path());
        ok(&o);
        serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
    };
    let s = stats(
        &[
            "--device",
            "SIM0,SIM1",
            "-ts",
            "1,3",
            "--cpu-moe",
            "--moe-cache-mib",
            "1,0.5",
        ],
        "two",
    );
    let devs = s["devices"].as_array().expect("devices list");
    assert_eq!(devs.len(), 2, "{s}");
    let mut sum = 0;
    for (d, (name, mib)) in devs.iter().zip([("SIM0", 1.0), ("SIM1", 0.5)]) {
        let keys: Vec<&str> = d.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            [
                "h2d_bytes_experts",
                "layers",
                "moe_cache_hit_rate",
                "moe_cache_mib",
                "name"
            ],
            "{d}"
        );
        assert_eq!(d["name"], name, "{d}");
        assert_eq!(d["layers"], 1, "{d}");
        assert_eq!(d["moe_cache_mib"].as_f64(), Some(mib), "{d}");
        let hr = d["moe_cache_hit_rate"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&hr) && hr > 0.0, "{d}");
        let b = d["h2d_bytes_experts"].as_u64().unwrap();
        assert!(b > 0, "{d}");
        sum += b;
    }
    assert_eq!(Some(sum), s["h2d_bytes_experts"].as_u64(), "{s}");
    // the activations cross from SIM0 to SIM1 device to device
    assert!(s["d2d_bytes"].as_u64().is_some_and(|b| b > 0), "{s}");
    assert_eq!(s["d2d_bytes_via_host"].as_u64(), Some(0), "{s}");
    let cpu = stats(&["--device", "CPU"], "cpu");
    assert_eq!(cpu["devices"], serde_json::json!([]), "{cpu}");
    let one = stats(&["--device", "SIM0", "--cpu-moe"], "one");
    assert_eq!(one["devices"].as_array().map(Vec::len), Some(1), "{one}");
    assert_eq!(one["devices"][0]["layers"], 2, "{one}");
    assert_eq!(one["d2d_bytes"].as_u64(), Some(0), "{one}");
    assert_eq!(one["d2d_bytes_via_host"].as_u64(), Some(0), "{one}");

    let o = run(
        RUN,
        &[
            "-m",
            m,
            "-p",
            "hi",
            "-n",
            "1",
            "--device",
            "SIM0,SIM1",
            "--moe-cache-mib",
            "1,2,3",
        ],
        dir.path(),
    );
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("3 sizes for 2 devices (SIM0,SIM1)"),
        "{e}"
    );
}
