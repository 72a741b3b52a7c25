//! `--rpc` through the tools, against the in-process fake worker (CI) and
//! the stock `ggml-rpc-server` where it is built: the same text as the
//! CPU, the RPC devices in `--list-devices`, `-ot exps=RPC0`, the wire
//! traffic in the summary and `--stats-out`, and every failure an error
//! naming the worker and the command (a worker of another version, one
//! gone, one killed in the middle of a generation) within the timeout.

mod common;
use common::*;

use std::time::{Duration, Instant};

use ggml_rpc::testkit::{FakeFault, FakeOptions, FakeWorker, StockWorker};
use ggml_rpc::{Cmd, Version};

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");
const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");

fn m() -> String {
    lean_model("tiny-qwen3moe-f32.gguf")
        .to_string_lossy()
        .into_owned()
}

fn gen(extra: &[&str]) -> (std::process::Output, Option<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("s.json");
    let sp = stats.to_string_lossy().into_owned();
    let model = m();
    let mut a = vec![
        "-m",
        &model,
        "-p",
        "Hello world",
        "--temp",
        "0",
        "--stats-out",
        &sp,
    ];
    if !extra.contains(&"-n") {
        a.extend(["-n", "12"]);
    }
    a.extend_from_slice(extra);
    let o = run(RUN, &a, dir.path());
    let s = std::fs::read_to_string(&stats)
        .ok()
        .map(|t| serde_json::from_str(&t).unwrap());
    (o, s)
}

fn fake() -> FakeWorker {
    FakeWorker::start(FakeOptions::default()).unwrap()
}

#[test]
fn generation_on_rpc_workers_is_the_cpus() {
    let (cpu, s_cpu) = gen(&[]);
    ok(&cpu);
    let s_cpu = s_cpu.unwrap();
    assert!(
        s_cpu.get("rpc_bytes_sent").is_none(),
        "no rpc keys without RPC"
    );
    let (w0, w1) = (fake(), fake());
    let (one, both) = (
        w0.endpoint(),
        format!("{},{}", w0.endpoint(), w1.endpoint()),
    );
    for extra in [
        vec!["--rpc", one.as_str()],
        vec![
            "--rpc",
            both.as_str(),
            "--device",
            "RPC0,RPC1",
            "-ts",
            "1,1",
        ],
        vec!["--rpc", one.as_str(), "-ngl", "0", "-ot", "exps=RPC0"],
        vec!["--rpc", one.as_str(), "--cpu-moe"],
    ] {
        let (o, s) = gen(&extra);
        ok(&o);
        assert_eq!(stdout(&o), stdout(&cpu), "{extra:?}");
        let s = s.unwrap();
        for k in [
            "rpc_bytes_sent",
            "rpc_bytes_received",
            "rpc_messages_sent",
            "rpc_messages_received",
            "rpc_round_trips",
            "rpc_bytes_sent_per_token",
            "rpc_bytes_received_per_token",
            "rpc_round_trips_per_token",
            "rpc_load_bytes_sent",
        ] {
            assert!(
                s[k].as_f64().is_some_and(|v| v > 0.0),
                "{extra:?}: {k} = {}",
                s[k]
            );
        }
        // existing keys keep their meaning
        assert_eq!(s["gen_tokens"], s_cpu["gen_tokens"]);
        let err = stderr(&o);
        assert!(err.contains("rpc           = RPC0"), "{err}");
    }
    assert!(w1.count(Cmd::GraphCompute) > 0, "RPC1 computed its layers");
}

#[test]
fn fit_plans_the_workers_devices() {
    let (cpu, _) = gen(&[]);
    ok(&cpu);
    let (w0, w1) = (fake(), fake());
    let both = format!("{},{}", w0.endpoint(), w1.endpoint());
    // --rpc without --device: the plan is over every worker's device
    for extra in [
        vec!["--rpc", both.as_str(), "--fit", "on"],
        vec!["--rpc", both.as_str(), "--device", "RPC1", "--fit", "on"],
    ] {
        let (o, s) = gen(&extra);
        ok(&o);
        assert_eq!(stdout(&o), stdout(&cpu), "{extra:?}");
        let e = stderr(&o);
        assert!(e.contains("fit: RPC1"), "{extra:?}: {e}");
        assert_eq!(
            e.contains("fit: RPC0"),
            !extra.contains(&"--device"),
            "{extra:?}: {e}"
        );
        assert!(s.unwrap()["rpc_round_trips"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn list_devices_shows_the_workers() {
    let w = fake();
    let dir = tempfile::tempdir().unwrap();
    let o = run(RUN, &["--list-devices", "--rpc", &w.endpoint()], dir.path());
    ok(&o);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("RPC0: RPC worker {}", w.endpoint())),
        "{out}"
    );
    let o = run(
        BENCH,
        &["--list-devices", "--rpc", &w.endpoint()],
        dir.path(),
    );
    ok(&o);
    assert!(stdout(&o).contains("RPC0: RPC worker"), "{}", stdout(&o));
}

#[test]
fn bench_runs_tests_on_rpc_devices() {
    let (w0, w1) = (fake(), fake());
    let both = format!("{},{}", w0.endpoint(), w1.endpoint());
    let dir = tempfile::tempdir().unwrap();
    let model = m();
    let o = run(
        BENCH,
        &[
            "-m",
            &model,
            "--rpc",
            &both,
            "-dev",
            "RPC0/RPC1,RPC0",
            "-p",
            "8",
            "-n",
            "4",
            "-r",
            "1",
            "-o",
            "jsonl",
        ],
        dir.path(),
    );
    ok(&o);
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{}", stdout(&o));
    for l in &lines {
        assert_eq!(l["backends"], "RPC");
        assert!(l["avg_ts"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(lines[0]["devices"], "RPC0/RPC1");
    assert!(w1.count(Cmd::GraphCompute) > 0);
}

#[test]
fn other_versions_and_absent_workers_are_named() {
    for (v, want) in [
        ((6, 0, 0), "6.0.0"),
        ((7, 1, 0), "7.1.0"),
        ((8, 0, 0), "8.0.0"),
    ] {
        let w = FakeWorker::start(FakeOptions {
            version: Version {
                major: v.0,
                minor: v.1,
                patch: v.2,
            },
            ..FakeOptions::default()
        })
        .unwrap();
        let (o, _) = gen(&["--rpc", &w.endpoint()]);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains(&w.endpoint())
                && e.contains("HELLO")
                && e.contains(want)
                && e.contains("exactly 7.0.0"),
            "{e}"
        );
        assert!(!e.contains("panicked"), "{e}");
    }
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (o, _) = gen(&["--rpc", &gone]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains(&gone) && e.contains("gone"), "{e}");
    for bad in ["localhost", "h:0", "a:1,,b:2"] {
        let (o, _) = gen(&["--rpc", bad]);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains("--rpc") && !e.contains("panicked"), "{bad}: {e}");
    }
    let w = fake();
    let (o, _) = gen(&["--rpc", &w.endpoint(), "--device", "RPC3"]);
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("RPC3") && e.contains("RPC0"),
        "{e}"
    );
    let (o, _) = gen(&["--device", "RPC0"]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("--rpc"), "{e}");
}

#[test]
fn a_worker_dying_mid_generation_is_an_error_within_the_timeout() {
    // the fake worker dies on a read: the probe graph takes the first
    // ones, then the prompt's logits and a few generated tokens'
    let n_probe = ggml_rpc::probe::op_labels().len() as u64;
    let w = FakeWorker::start(FakeOptions {
        fault: Some(FakeFault::Die(Cmd::GetTensor, n_probe + 8)),
        ..FakeOptions::default()
    })
    .unwrap();
    let t0 = Instant::now();
    let (o, _) = gen(&["--rpc", &w.endpoint(), "-n", "64", "--ignore-eos"]);
    assert!(t0.elapsed() < Duration::from_secs(20));
    assert!(
        !o.status.success(),
        "{} computes, {} probe ops\n{}",
        w.count(Cmd::GraphCompute),
        n_probe,
        stderr(&o)
    );
    let e = stderr(&o);
    assert!(e.contains(&format!("RPC0 ({})", w.endpoint())), "{e}");
    assert!(
        !stdout(&o).is_empty(),
        "some tokens came before the worker died"
    );
    // a worker that stops answering: the timeout names it
    let w = FakeWorker::start(FakeOptions {
        fault: Some(FakeFault::Stall(Cmd::GetTensor, n_probe + 4)),
        ..FakeOptions::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model = m();
    let t0 = Instant::now();
    let o = std::process::Command::new(RUN)
        .args([
            "-m",
            &model,
            "-p",
            "Hello",
            "-n",
            "32",
            "--rpc",
            &w.endpoint(),
        ])
        .env("GGML_RS_CACHE", dir.path())
        .env("GGML_RPC_TIMEOUT", "1.5")
        .output()
        .unwrap();
    let took = t0.elapsed();
    assert!(!o.status.success());
    assert!(took < Duration::from_secs(15), "{took:?}");
    let e = stderr(&o);
    assert!(
        e.contains("GET_TENSOR") && e.contains("no reply within 1.5 s"),
        "{e}"
    );
}

#[test]
fn a_stock_worker_killed_mid_generation_is_an_error_within_the_timeout() {
    let mut w = match StockWorker::start(1, false) {
        Ok(w) => w,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let model = m();
    let mut child = std::process::Command::new(RUN)
        .args([
            "-m",
            &model,
            "-p",
            "Hello",
            "-n",
            "-1",
            "--ignore-eos",
            "-c",
            "4096",
            "--rpc",
            &w.endpoint(),
        ])
        .env("GGML_RS_CACHE", dir.path())
        .env("GGML_RPC_TIMEOUT", "5")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // let it generate, then kill the worker
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 64];
    use std::io::Read;
    let n = out.read(&mut first).unwrap();
    assert!(n > 0);
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    w.kill();
    let o = child.wait_with_output().unwrap();
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains(&format!("RPC0 ({})", w.endpoint())), "{e}");
    assert!(e.contains("gone") || e.contains("closed"), "{e}");
}
