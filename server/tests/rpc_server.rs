//! `llama-server --rpc`: the embedded default model on RPC workers (the
//! in-process fake worker, which computes with this engine's CPU kernels
//! at the other end of llama.cpp's protocol) answers as the CPU does, with
//! the layers on a worker, the experts in its RAM (`-ngl 0 -ot
//! exps=RPC0`), or the routed experts uploaded to its cache
//! (`--cpu-moe`); a worker that is not there stops the server at start
//! with an error naming it.

mod common;

use std::process::Command;

use common::{post, start};
use ggml_rpc::testkit::{FakeOptions, FakeWorker};
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
