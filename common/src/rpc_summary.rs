//! The RPC workers' wire traffic, for `llama-run`'s summary and
//! `--stats-out`: bytes and messages each way and round trips (requests
//! waited on) over the run and per generated token, from the devices'
//! [`ggml_core::LinkCounters`]. Present only when a device is an RPC
//! worker's, so every other run's output is unchanged.

use ggml_core::LinkCounts;
use serde::Serialize;

use crate::cli::fmt_bytes;

/// The wire traffic; field names are `--stats-out` keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct RpcSummary {
    /// Bytes sent to the workers before the prompt: connect, the probe
    /// graph and the weights.
    pub rpc_load_bytes_sent: u64,
    /// Bytes sent to the workers during the prompt and generation
    /// (framing included).
    pub rpc_bytes_sent: u64,
    /// Bytes received from the workers during the prompt and generation.
    pub rpc_bytes_received: u64,
    /// Messages (requests) sent during the prompt and generation.
    pub rpc_messages_sent: u64,
    /// Messages (replies) received during the prompt and generation.
    pub rpc_messages_received: u64,
    /// Requests waited on a reply for during the prompt and generation.
    pub rpc_round_trips: u64,
    /// Bytes sent per generated-token decode.
    pub rpc_bytes_sent_per_token: f64,
    /// Bytes received per generated-token decode.
    pub rpc_bytes_received_per_token: f64,
    /// Messages sent per generated-token decode.
    pub rpc_messages_sent_per_token: f64,
    /// Messages received per generated-token decode.
    pub rpc_messages_received_per_token: f64,
    /// Round trips per generated-token decode.
    pub rpc_round_trips_per_token: f64,
}

impl RpcSummary {
    /// From the counts at the prompt's start (`start`), at generation's
    /// start (`gen_start`) and at the end (`end`), over `decodes`
    /// generated-token decodes.
    pub fn of(
        start: &LinkCounts,
        gen_start: &LinkCounts,
        end: &LinkCounts,
        decodes: usize,
    ) -> RpcSummary {
        let run = end.since(start);
        let gen = end.since(gen_start);
        let per = |v: u64| {
            if decodes > 0 {
                v as f64 / decodes as f64
            } else {
                0.0
            }
        };
        RpcSummary {
            rpc_load_bytes_sent: start.bytes_sent,
            rpc_bytes_sent: run.bytes_sent,
            rpc_bytes_received: run.bytes_received,
            rpc_messages_sent: run.messages_sent,
            rpc_messages_received: run.messages_received,
            rpc_round_trips: run.round_trips,
            rpc_bytes_sent_per_token: per(gen.bytes_sent),
            rpc_bytes_received_per_token: per(gen.bytes_received),
            rpc_messages_sent_per_token: per(gen.messages_sent),
            rpc_messages_received_per_token: per(gen.messages_received),
            rpc_round_trips_per_token: per(gen.round_trips),
        }
    }

    /// The summary's lines.
    pub fn to_text(&self, devices: &str) -> String {
        format!(
            "rpc           = {devices} per generated token: {} sent in {:.1} messages, {} received in {:.1} messages, {:.1} round trips\n\
             rpc run       = {} sent in {} messages, {} received in {} messages, {} round trips (prompt and generation; {} sent at load: probe and weights)\n",
            fmt_bytes(self.rpc_bytes_sent_per_token),
            self.rpc_messages_sent_per_token,
            fmt_bytes(self.rpc_bytes_received_per_token),
            self.rpc_messages_received_per_token,
            self.rpc_round_trips_per_token,
            fmt_bytes(self.rpc_bytes_sent as f64),
            self.rpc_messages_sent,
            fmt_bytes(self.rpc_bytes_received as f64),
            self.rpc_messages_received,
            self.rpc_round_trips,
            fmt_bytes(self.rpc_load_bytes_sent as f64),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(b: u64, m: u64, r: u64) -> LinkCounts {
        LinkCounts {
            bytes_sent: b,
            bytes_received: b / 2,
            messages_sent: m,
            messages_received: r,
            round_trips: r,
        }
    }

    #[test]
    fn per_token_figures_are_generations() {
        let s = RpcSummary::of(&c(1000, 10, 5), &c(1400, 14, 7), &c(2200, 22, 11), 4);
        assert_eq!(s.rpc_load_bytes_sent, 1000);
        assert_eq!(
            (s.rpc_bytes_sent, s.rpc_messages_sent, s.rpc_round_trips),
            (1200, 12, 6)
        );
        assert_eq!(s.rpc_bytes_sent_per_token, 200.0);
        assert_eq!(s.rpc_bytes_received_per_token, 100.0);
        assert_eq!(s.rpc_messages_sent_per_token, 2.0);
        assert_eq!(s.rpc_round_trips_per_token, 1.0);
        let t = s.to_text("RPC0");
        assert!(
            t.contains("RPC0 per generated token") && t.contains("1.0 round trips"),
            "{t}"
        );
        let j = serde_json::to_value(s).unwrap();
        assert!(j.get("rpc_round_trips_per_token").is_some());
    }
}
