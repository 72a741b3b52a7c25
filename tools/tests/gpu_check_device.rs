//! The GPU check cannot pass without a GPU, and a machine with only a
//! driver runs CUDA0 from the shipped kernels:
//!
//! - `scripts/gpu-check-run`'s step 0 (run as a piece: `GPU_CHECK_BIN`
//!   points at this build's `llama-run`, `GPU_CHECK_ONLY=device` stops after
//!   it): with a fake `nvidia-smi` on `PATH` that lists a GPU and no CUDA
//!   driver here, CUDA0 cannot open, so step 0 FAILs with the reason and
//!   the run exits non-zero; without the fake, the device steps SKIP and
//!   it exits 0.
//! - `env -i` with the emulator and an empty `LD_LIBRARY_PATH` (no NVRTC on
//!   any search path): `--list-devices` says CUDA0 runs the shipped cubin,
//!   and a fixture runs on CUDA0 with the text the CPU gives.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu-check-run")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr)
}

/// Step 0 of the GPU check in `dir`, `PATH` led by `path_head`.
fn step0(dir: &Path, path_head: Option<&Path>) -> (Output, String) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("llama-run");
    if !link.exists() {
        std::os::unix::fs::symlink(RUN, &link).unwrap();
    }
    let path = match path_head {
        Some(p) => format!("{}:/usr/local/bin:/usr/bin:/bin", p.display()),
        None => "/usr/local/bin:/usr/bin:/bin".to_string(),
    };
    let o = Command::new("bash")
        .arg(script())
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir)
        .env("GPU_CHECK_BIN", &bin)
        .env("GPU_CHECK_ONLY", "device")
        .env("GPU_CHECK_WORK", dir.join("work"))
        .env("OUT", dir.join("out"))
        .output()
        .expect("bash runs the script");
    let summary = std::fs::read_to_string(dir.join("out/summary.md")).unwrap_or_default();
    (o, summary)
}

fn no_cuda_driver_here() -> Option<String> {
    // the piece needs a machine where CUDA0 cannot open
    match ggml_cuda::probe_driver() {
        Ok(()) => None,
        Err(e) => Some(e.to_string()),
    }
}

#[test]
fn a_listed_gpu_that_does_not_open_fails_step_0_and_the_run() {
    let Some(why) = no_cuda_driver_here() else {
        println!("skipped: a CUDA driver is present (CUDA0 may open here)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    let smi = fake.join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-00000000-fake)'\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (o, summary) = step0(dir.path(), Some(&fake));
    let out = text(&o);
    println!("{out}");
    assert!(!o.status.success(), "the run passed without a GPU:\n{out}");
    let row = summary
        .lines()
        .find(|l| l.starts_with("| 0-device |"))
        .unwrap_or_else(|| panic!("no step 0 row:\n{summary}\n{out}"));
    assert!(row.contains("| FAIL |"), "{row}");
    assert!(
        row.contains("CUDA0 did not open though nvidia-smi lists a GPU"),
        "{row}"
    );
    // the reason: this machine has no driver
    assert!(
        row.contains("no CUDA device"),
        "{row} (expected the reason: {why})"
    );
}

#[test]
fn without_a_gpu_the_device_steps_skip_and_the_run_exits_0() {
    if no_cuda_driver_here().is_none() {
        println!("skipped: a CUDA driver is present");
        return;
    }
    if Command::new("sh")
        .args(["-c", "command -v nvidia-smi"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        println!("skipped: an nvidia-smi is on PATH here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (o, summary) = step0(dir.path(), None);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for step in [
        "0-device",
        "1-cuda-ops",
        "2-fixtures",
        "5-bench",
        "9-kernels",
    ] {
        let row = summary
            .lines()
            .find(|l| l.starts_with(&format!("| {step} |")))
            .unwrap_or_else(|| panic!("no {step} row:\n{summary}"));
        assert!(row.contains("| SKIP |"), "{row}");
        assert!(row.contains("nvidia-smi not found"), "{row}");
    }
}

/// `env -i`: only what the command line sets.
fn bare(args: &[&str], emulated: bool) -> Output {
    let mut c = Command::new(RUN);
    c.args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LD_LIBRARY_PATH", "");
    if emulated {
        c.env("GGML_CUDA_EMULATOR", "1");
    }
    c.output().expect("llama-run runs")
}

#[test]
fn with_only_a_driver_cuda0_runs_a_fixture_from_the_shipped_kernels() {
    // NVRTC on none of the folders this environment searches
    let env = ggml_cuda::libraries::SearchEnv {
        usr_local_cuda: Some(PathBuf::from("/usr/local/cuda")),
        system_dirs: [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
            "/lib64",
            "/lib",
        ]
        .map(PathBuf::from)
        .to_vec(),
        python_dirs: vec![PathBuf::from("/usr/lib/python3/dist-packages")],
        ..Default::default()
    };
    if let Some(f) = ggml_cuda::libraries::find_library("nvrtc", &env, None) {
        println!("skipped: an NVRTC is installed system-wide here ({f})");
        return;
    }
    let o = bare(&["--list-devices"], true);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("CUDA0:"))
        .unwrap_or_else(|| panic!("no CUDA0 line:\n{out}"));
    assert!(
        line.contains("kernels: cubin sm_90 (shipped sm_90.cubin.xz)"),
        "{line}"
    );
    assert!(
        line.contains("compute capability 9.0, CUDA driver 12.9"),
        "{line}"
    );
    let model = match fixtures::fixture_path("models/tiny-qwen3moe-f32.gguf") {
        Ok(p) => p,
        Err(e) => {
            println!("skipped: {e}");
            return;
        }
    };
    let m = model.display().to_string();
    let args = |dev: &'static str| {
        vec![
            "-m".to_string(),
            m.clone(),
            "-p".into(),
            "The quick brown fox".into(),
            "-n".into(),
            "8".into(),
            "--temp".into(),
            "0".into(),
            "--device".into(),
            dev.into(),
            "-ngl".into(),
            "99".into(),
        ]
    };
    let run = |dev: &'static str, emulated: bool| {
        let a = args(dev);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        bare(&a, emulated)
    };
    let cuda = run("CUDA0", true);
    assert!(cuda.status.success(), "{}", text(&cuda));
    let cpu = run("CPU", false);
    assert!(cpu.status.success(), "{}", text(&cpu));
    assert_eq!(
        String::from_utf8_lossy(&cuda.stdout),
        String::from_utf8_lossy(&cpu.stdout),
        "CUDA0 (shipped kernels, no NVRTC) and the CPU differ"
    );
    let err = String::from_utf8_lossy(&cuda.stderr);
    assert!(!err.contains("NVRTC"), "{err}");
}
