//! Link counters: what a backend whose device sits at the other end of a
//! network link (an RPC worker, `ggml-rpc`) sent and received.
//!
//! Such a backend counts, per connection, the bytes and messages each way
//! and the round trips (requests the host waited on a reply for), so that a
//! run can report its wire traffic per token
//! ([`crate::BackendDiagnostics::link_counters`]). Backends on the host's own buses
//! keep none.

use std::sync::atomic::{AtomicU64, Ordering};

/// The live counters of one link (shared, updated from any thread).
#[derive(Debug, Default)]
pub struct LinkCounters {
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    messages_sent: AtomicU64,
    messages_received: AtomicU64,
    round_trips: AtomicU64,
}

impl LinkCounters {
    /// One message of `bytes` (framing included) sent.
    pub fn add_sent(&self, bytes: u64) {
        self.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
        self.messages_sent.fetch_add(1, Ordering::Relaxed);
    }

    /// One message of `bytes` (framing included) received.
    pub fn add_received(&self, bytes: u64) {
        self.bytes_received.fetch_add(bytes, Ordering::Relaxed);
        self.messages_received.fetch_add(1, Ordering::Relaxed);
    }

    /// One request the host waited on a reply for.
    pub fn add_round_trip(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> LinkCounts {
        LinkCounts {
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            messages_sent: self.messages_sent.load(Ordering::Relaxed),
            messages_received: self.messages_received.load(Ordering::Relaxed),
            round_trips: self.round_trips.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of [`LinkCounters`] (or a sum or difference of them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkCounts {
    /// Bytes sent to the device's host, framing included.
    pub bytes_sent: u64,
    /// Bytes received from it, framing included.
    pub bytes_received: u64,
    /// Messages (requests) sent.
    pub messages_sent: u64,
    /// Messages (replies) received.
    pub messages_received: u64,
    /// Requests the host waited on a reply for.
    pub round_trips: u64,
}

impl LinkCounts {
    /// Field-wise sum.
    pub fn add(&mut self, o: &LinkCounts) {
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.messages_sent += o.messages_sent;
        self.messages_received += o.messages_received;
        self.round_trips += o.round_trips;
    }

    /// `self - earlier`, field by field (saturating).
    pub fn since(&self, earlier: &LinkCounts) -> LinkCounts {
        LinkCounts {
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
            messages_sent: self.messages_sent.saturating_sub(earlier.messages_sent),
            messages_received: self
                .messages_received
                .saturating_sub(earlier.messages_received),
            round_trips: self.round_trips.saturating_sub(earlier.round_trips),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_and_subtract() {
        let c = LinkCounters::default();
        c.add_sent(10);
        c.add_sent(5);
        c.add_received(8);
        c.add_round_trip();
        let a = c.snapshot();
        assert_eq!(
            a,
            LinkCounts {
                bytes_sent: 15,
                bytes_received: 8,
                messages_sent: 2,
                messages_received: 1,
                round_trips: 1
            }
        );
        c.add_sent(1);
        let d = c.snapshot().since(&a);
        assert_eq!((d.bytes_sent, d.messages_sent, d.round_trips), (1, 1, 0));
        let mut s = a;
        s.add(&d);
        assert_eq!(s, c.snapshot());
    }
}
