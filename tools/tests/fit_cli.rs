//! `llama-run --fit on`: the plan is printed before loading, `--fit-out`
//! writes it as JSON with the documented keys, the run uses it (on one and
//! on two sim devices), and a device too small is an error naming the MiB
//! missing on it, with no file left behind.

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

fn json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("the plan file");
    serde_json::from_str(&text).expect("JSON")
}

/// `--fit on --fit-out DIR/plan.json` with `mib` MiB on each of `devices`,
/// `-c 512`, `extra` after: the run and the plan file's path.
fn run_fit(
    devices: &str,
    mib: &str,
    extra: &[&str],
    dir: &std::path::Path,
) -> (std::process::Output, std::path::PathBuf) {
    let plan = dir.join("plan.json");
    let mut args = vec![
        "--device",
        devices,
        "--sim-mem-mib",
        mib,
        "--fit",
        "on",
        "-c",
        "512",
        "-n",
        "4",
        "--fit-out",
        plan.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (run(RUN, &args, dir), plan)
}

#[test]
fn fit_plans_prints_writes_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (o, plan) = run_fit("SIM0", "64", &["--temp", "0"], dir.path());
    ok(&o);
    let e = stderr(&o);
    assert!(e.contains("llama-run: fit: SIM0"), "{e}");
    assert!(e.contains("fit: as flags:"), "{e}");
    // the table comes before the load
    assert!(
        e.find("fit: SIM0").unwrap() < e.find("placement:").unwrap(),
        "{e}"
    );
    let j = json(&plan);
    for key in [
        "n_layer",
        "n_ctx",
        "n_ubatch",
        "devices",
        "tensor_split",
        "host_expert_layers",
        "host_expert_bytes",
        "n_cpu_moe",
        "override_tensor",
        "moe_cache_mib",
    ] {
        assert!(j.get(key).is_some(), "no {key} in {j}");
    }
    let d = &j["devices"][0];
    for key in [
        "name",
        "free_bytes",
        "margin_bytes",
        "first_layer",
        "n_layers",
        "output",
        "dense_bytes",
        "experts_bytes",
        "kv_bytes",
        "compute_bytes",
        "staging_bytes",
        "cache_bytes",
        "cache_overhead_bytes",
        "total_bytes",
        "host_expert_layers",
    ] {
        assert!(d.get(key).is_some(), "no {key} in {d}");
    }
    assert_eq!(d["name"], "SIM0");
    assert_eq!(j["n_ctx"], 512);
    let free = d["free_bytes"].as_u64().unwrap();
    let total = d["total_bytes"].as_u64().unwrap();
    let margin = d["margin_bytes"].as_u64().unwrap();
    assert_eq!(free, 64 << 20);
    assert!(total + margin <= free, "{j}");
    // the run used the plan: its host expert layers and its cache
    if let Some(n) = j["n_cpu_moe"].as_u64() {
        assert!(n > 0);
        assert!(e.contains("in host memory"), "{e}");
    }
}

#[test]
fn fit_splits_two_devices() {
    let dir = tempfile::tempdir().unwrap();
    let (o, plan) = run_fit("SIM0,SIM1", "64", &["--temp", "0"], dir.path());
    ok(&o);
    let j = json(&plan);
    let ts: Vec<f64> = j["tensor_split"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let n_layer = j["n_layer"].as_u64().unwrap() as f64;
    assert_eq!(ts.len(), 2, "{j}");
    assert_eq!(ts.iter().sum::<f64>(), n_layer + 1.0, "layers and the head");
    let e = stderr(&o);
    assert!(e.contains("fit: as flags: -ts"), "{e}");
    assert!(e.contains("on SIM0") && e.contains("on SIM1"), "{e}");
}

#[test]
fn too_small_a_device_is_an_error_naming_the_shortfall() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    fails_with_exit_1(
        RUN,
        &[
            "--device",
            "SIM0",
            "--sim-mem-mib",
            "3",
            "--fit",
            "on",
            "-c",
            "512",
            "-n",
            "4",
            "--fit-out",
            plan.to_str().unwrap(),
        ],
        &["MiB on SIM0 missing", "SIM0: 3.00 MiB free"],
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().contains("plan"))
        .collect();
    assert!(left.is_empty(), "no plan file on an error: {left:?}");
    // flags that need --fit on, and a device whose memory is unknown
    fails_with_exit_1(RUN, &["--fit-out", "x.json", "-n", "1"], &["--fit on"]);
    fails_with_exit_1(
        RUN,
        &["--device", "SIM0", "--fit", "on", "-n", "1"],
        &["--sim-mem-mib"],
    );
    fails_with_exit_1(
        RUN,
        &[
            "--device",
            "SIM0",
            "--sim-mem-mib",
            "64",
            "--fit",
            "on",
            "-ngl",
            "2",
        ],
        &["-ngl"],
    );
    // a bad value is clap's usage error
    let o = run(RUN, &["--fit", "maybe"], dir.path());
    let e = stderr(&o);
    assert!(!o.status.success() && !e.contains("panicked"), "{e}");
    assert!(e.contains("'maybe'") && e.contains("on or off"), "{e}");
}

/// `llama-run` on emulated CUDA devices of `mib` MiB each
/// (`GGML_CUDA_EMULATOR_MEM_MIB`), with `args`.
fn run_emulated(
    n_devices: u32,
    mib: u32,
    args: &[&str],
    dir: &std::path::Path,
) -> std::process::Output {
    std::process::Command::new(RUN)
        .args(args)
        .env("GGML_RS_CACHE", dir)
        .env("GGML_CUDA_EMULATOR", "1")
        .env("GGML_CUDA_EMULATOR_DEVICES", n_devices.to_string())
        .env("GGML_CUDA_EMULATOR_MEM_MIB", mib.to_string())
        .env_remove("GGML_CUDA_EMULATOR_DROP_WAIT")
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run llama-run")
}

/// On (emulated) CUDA the plan starts from the free memory the driver
/// reports (`cuMemGetInfo`), not from `--sim-mem-mib`: one and two devices
/// of 64 MiB plan within that, run with the plan, and 3 MiB is the error
/// naming the MiB missing on CUDA0.
#[test]
fn fit_plans_from_the_cuda_drivers_free_memory() {
    let dir = tempfile::tempdir().unwrap();
    for (n, devices) in [(1, "CUDA0"), (2, "CUDA0,CUDA1")] {
        let plan = dir.path().join(format!("plan{n}.json"));
        let o = run_emulated(
            n,
            64,
            &[
                "--device",
                devices,
                "--fit",
                "on",
                "-c",
                "512",
                "-n",
                "4",
                "--temp",
                "0",
                "--fit-out",
                plan.to_str().unwrap(),
            ],
            dir.path(),
        );
        ok(&o);
        let e = stderr(&o);
        assert!(e.contains("llama-run: fit: CUDA0"), "{e}");
        let j = json(&plan);
        let devs = j["devices"].as_array().expect("devices");
        assert_eq!(devs.len(), n as usize, "{j}");
        for d in devs {
            let free = d["free_bytes"].as_u64().unwrap();
            let total = d["total_bytes"].as_u64().unwrap();
            let margin = d["margin_bytes"].as_u64().unwrap();
            assert!(free > 0 && free <= 64 << 20, "{d}");
            assert!(total + margin <= free, "{d}");
        }
    }
    let o = run_emulated(
        1,
        3,
        &["--device", "CUDA0", "--fit", "on", "-c", "512", "-n", "4"],
        dir.path(),
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(e.contains("MiB on CUDA0 missing"), "{e}");
}
