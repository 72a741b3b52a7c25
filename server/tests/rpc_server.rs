//! `llama-server --rpc`: the embedded default model on RPC workers (the
//! in-process fake worker, which computes with this engine's CPU kernels
//! at the other end of llama.cpp's protocol) answers as the CPU does, with
//! the layers on a worker, the experts in its RAM (`-ngl 0 -ot
//! exps=RPC0`), or the routed experts uploaded to its cache
//! (`--cpu-moe`); a worker that is not there stops the server at start
//! with an error naming it; a worker that dies or stalls in the middle of
//! a request fails that request (plain and streamed) with an error naming
//! the worker, within the timeout, and the server stays up to say so.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{post, request, start, start_with_env};
use ggml_rpc::testkit::{FakeFault, FakeOptions, FakeWorker};
use ggml_rpc::Cmd;
use serde_json::json;

fn complete(extra: &[&str]) -> String {
    let s = start(extra);
    let r = post(
        &s,
        "/completion",
        &json!({"prompt": "Once upon a time", "n_predict": 12, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{extra:?}: {}", r.body);
    r.json()["content"]
        .as_str()
        .unwrap_or_else(|| panic!("{extra:?}: {}", r.body))
        .to_string()
}

#[test]
fn the_server_on_rpc_workers_answers_as_the_cpu() {
    let cpu = complete(&[]);
    assert!(!cpu.is_empty());
    for extra in [
        &[][..],
        &["-ngl", "0", "-ot", "exps=RPC0"][..],
        &["--cpu-moe"][..],
    ] {
        let w = FakeWorker::start(FakeOptions::default()).expect("fake worker");
        let ep = w.endpoint();
        let mut args = vec!["--rpc", ep.as_str()];
        args.extend_from_slice(extra);
        assert_eq!(complete(&args), cpu, "{args:?}");
        assert!(w.count(Cmd::GraphCompute) > 0, "{args:?}: RPC0 computed");
    }
}

#[test]
fn an_absent_worker_stops_the_server_by_name() {
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let o = Command::new(env!("CARGO_BIN_EXE_llama-server"))
        .args(["--host", "127.0.0.1", "--port", "0", "--rpc", &gone])
        .output()
        .expect("run llama-server");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains(&gone) && e.contains("HELLO") && e.contains("gone"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}

/// A fake worker that injects `fault` on the `n`th GET_TENSOR after the
/// probe graph's (one per probed op).
fn faulty(fault: fn(Cmd, u64) -> FakeFault, n: u64) -> FakeWorker {
    let n_probe = ggml_rpc::probe::op_labels().len() as u64;
    FakeWorker::start(FakeOptions {
        fault: Some(fault(Cmd::GetTensor, n_probe + n)),
        ..FakeOptions::default()
    })
    .expect("fake worker")
}

fn long_request(stream: bool) -> serde_json::Value {
    json!({"prompt": "Once upon a time", "n_predict": 64, "temperature": 0,
           "ignore_eos": true, "stream": stream})
}

#[test]
fn a_worker_dying_mid_request_fails_it_by_name_and_the_server_stays_up() {
    for stream in [false, true] {
        // a few tokens' logits are read back, then the worker is gone
        let w = faulty(FakeFault::Die, 6);
        let ep = w.endpoint();
        let s = start(&["--rpc", ep.as_str()]);
        let t0 = Instant::now();
        let r = post(&s, "/completion", &long_request(stream));
        assert!(t0.elapsed() < Duration::from_secs(30), "stream {stream}");
        let named = format!("RPC0 ({ep})");
        if stream {
            // the stream started (200, some tokens) and ends on the error
            assert_eq!(r.status, 200, "{}", r.body);
            assert!(r.body.contains("\"content\""), "{}", r.body);
            let last = r
                .body
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .next_back()
                .unwrap_or_default();
            assert!(
                last.contains(&named) && last.contains("error"),
                "{}",
                r.body
            );
        } else {
            assert_eq!(r.status, 500, "{}", r.body);
            assert!(r.body.contains(&named), "{}", r.body);
        }
        assert!(!r.body.contains("panicked"), "{}", r.body);
        assert!(w.count(Cmd::GraphCompute) > 0);
        // the server is still there, and the next request also names
        // the worker that is gone rather than hanging
        let h = request(&s, "GET", "/health", None);
        assert_eq!(h.status, 200, "{}", h.body);
        let t0 = Instant::now();
        let r = post(&s, "/completion", &long_request(false));
        assert!(t0.elapsed() < Duration::from_secs(30));
        assert_eq!(r.status, 500, "{}", r.body);
        assert!(r.body.contains(&named), "{}", r.body);
    }
}

#[test]
fn a_stalled_worker_fails_the_request_within_the_timeout() {
    let w = faulty(FakeFault::Stall, 4);
    let ep = w.endpoint();
    let s = start_with_env(&["--rpc", ep.as_str()], &[("GGML_RPC_TIMEOUT", "1.5")]);
    let t0 = Instant::now();
    let r = post(&s, "/completion", &long_request(false));
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.body.contains(&format!("RPC0 ({ep})"))
            && r.body.contains("GET_TENSOR")
            && r.body.contains("no reply within 1.5 s"),
        "{}",
        r.body
    );
}
