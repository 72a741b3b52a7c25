//! A counting proxy in front of an RPC worker, for measuring any client's
//! wire traffic (llama.cpp's `llama-bench --rpc` as well as ours):
//!
//! ```sh
//! cargo run --release -p ggml-rpc --features testkit --example rpc-count-proxy -- TARGET PORTFILE
//! ```
//!
//! It listens on a free port of 127.0.0.1, writes `127.0.0.1:PORT` to
//! PORTFILE, forwards everything to TARGET (`host:port`), and on stdin's
//! end (or SIGTERM's broken pipe) prints one JSON line of what crossed:
//! bytes and messages each way and round trips.

use std::io::Read;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [target, portfile] = args.as_slice() else {
        eprintln!("usage: rpc-count-proxy TARGET PORTFILE");
        std::process::exit(2);
    };
    let p = match ggml_rpc::testkit::FaultProxy::start(target) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rpc-count-proxy: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = std::fs::write(portfile, p.endpoint()) {
        eprintln!("rpc-count-proxy: {portfile}: {e}");
        std::process::exit(1);
    }
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    let c = p.counts();
    println!(
        "{{\"bytes_sent\":{},\"bytes_received\":{},\"messages_sent\":{},\"messages_received\":{},\"round_trips\":{}}}",
        c.bytes_sent, c.bytes_received, c.messages_sent, c.messages_received, c.round_trips
    );
}
