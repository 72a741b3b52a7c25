//! The hazard detector: happens-before between the emulated streams and the
//! host by vector clocks, and the last writer and readers of every device
//! byte range.
//!
//! Clocks advance when work is *queued* (host program order), so a verdict
//! does not depend on the delays the streams happen to run with:
//! - queuing an operation on stream `s` first joins the host's clock into
//!   `s`'s (the host only queues after what it has waited for), then ticks
//!   `s`'s own component; the operation carries the result;
//! - recording an event copies the stream's clock; waiting on it joins the
//!   event's clock into the waiting stream's;
//! - synchronizing a stream or an event joins its clock into the host's.
//!
//! Every access of an operation to a device range is checked against the
//! recorded accesses overlapping it: two accesses conflict when either
//! writes, and a conflict is a hazard unless the earlier one is ordered
//! before the new operation (its stream's component of the new clock has
//! reached it). A hazard names both operations and their streams.
//! Records are bounded: a write removes the records it covers that are
//! ordered before it, and a read replaces an older read of the same range
//! from the same stream.
//!
//! A read the host cannot name when it queues the operation (the experts
//! `mul_mat_id`'s device-side ids select) is checked when the operation
//! runs ([`Tracker::access_late`]), against the writes recorded by then:
//! one queued later is not a hazard when it is ordered after the read,
//! which is why write records keep their operation's whole clock.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A vector clock: one component per emulated stream (by global id).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Clock(Vec<u64>);

impl Clock {
    /// Component `s` (0 when absent).
    pub fn get(&self, s: usize) -> u64 {
        self.0.get(s).copied().unwrap_or(0)
    }

    fn set(&mut self, s: usize, v: u64) {
        if self.0.len() <= s {
            self.0.resize(s + 1, 0);
        }
        self.0[s] = v;
    }

    /// Component-wise maximum with `other`.
    pub fn join(&mut self, other: &Clock) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, &b) in self.0.iter_mut().zip(other.0.iter()) {
            *a = (*a).max(b);
        }
    }
}

/// One recorded access to a device range.
#[derive(Clone, Debug)]
struct Record {
    lo: u64,
    hi: u64,
    write: bool,
    stream: usize,
    tick: u64,
    op: String,
    /// A write's clock (what it is ordered after), for reads checked late.
    after: Option<Arc<Clock>>,
}

/// What an access conflicted with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hazard {
    /// The new operation and its stream.
    pub op: String,
    /// The earlier, unordered operation and its stream.
    pub earlier: String,
    /// The overlapping bytes `[lo, hi)`.
    pub range: (u64, u64),
    /// `"write after read"`, `"read after write"` or `"write after write"`.
    pub kind: &'static str,
}

impl std::fmt::Display for Hazard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hazard ({}) on device bytes {:#x}..{:#x}: {} is not ordered after {}",
            self.kind, self.range.0, self.range.1, self.op, self.earlier
        )
    }
}

/// The clocks of the host and every stream, and the accesses of every
/// device allocation.
#[derive(Default)]
pub struct Tracker {
    host: Clock,
    streams: Vec<Clock>,
    /// Allocation base -> (size, records).
    allocs: BTreeMap<u64, (u64, Vec<Record>)>,
}

impl Tracker {
    /// A new stream's id.
    pub fn add_stream(&mut self) -> usize {
        self.streams.push(Clock::default());
        self.streams.len() - 1
    }

    /// A new device allocation (no accesses yet).
    pub fn add_alloc(&mut self, base: u64, size: u64) {
        self.allocs.insert(base, (size, Vec::new()));
    }

    /// A freed allocation: its records go.
    pub fn remove_alloc(&mut self, base: u64) {
        self.allocs.remove(&base);
    }

    /// Queue an operation on stream `s`: its clock (after joining the
    /// host's and ticking `s`).
    pub fn tick(&mut self, s: usize) -> Clock {
        let host = self.host.clone();
        let c = &mut self.streams[s];
        c.join(&host);
        let t = c.get(s) + 1;
        c.set(s, t);
        c.clone()
    }

    /// Stream `s`'s clock now (what an event recorded on it captures).
    pub fn clock_of(&mut self, s: usize) -> Clock {
        let host = self.host.clone();
        let c = &mut self.streams[s];
        c.join(&host);
        c.clone()
    }

    /// Stream `s` waits for work with clock `c`.
    pub fn stream_waits(&mut self, s: usize, c: &Clock) {
        self.streams[s].join(c);
    }

    /// The host waited for work with clock `c`.
    pub fn host_waits(&mut self, c: &Clock) {
        self.host.join(c);
    }

    /// The host waited for everything queued on stream `s`.
    pub fn host_waits_stream(&mut self, s: usize) {
        let c = self.streams[s].clone();
        self.host.join(&c);
    }

    /// Check and record operation `op` (with clock `clk`, on stream `s`)
    /// accessing `[ptr, ptr+len)`. Errs with the first hazard, or when the
    /// range is not inside one device allocation.
    pub fn access(
        &mut self,
        s: usize,
        clk: &Clock,
        op: &str,
        ptr: u64,
        len: u64,
        write: bool,
    ) -> Result<(), String> {
        if len == 0 {
            return Ok(());
        }
        let (lo, hi) = (ptr, ptr.saturating_add(len));
        let Some((_, (size, recs))) = self
            .allocs
            .range_mut(..=ptr)
            .next_back()
            .filter(|(&b, (sz, _))| hi <= b + *sz)
            .map(|(b, v)| (*b, v))
        else {
            return Err(format!(
                "{op} accesses device bytes {lo:#x}..{hi:#x}, outside every device allocation"
            ));
        };
        let _ = size;
        for r in recs.iter() {
            if r.hi <= lo || hi <= r.lo || !(r.write || write) {
                continue;
            }
            if r.tick <= clk.get(r.stream) {
                continue;
            }
            let h = Hazard {
                op: op.to_string(),
                earlier: r.op.clone(),
                range: (lo.max(r.lo), hi.min(r.hi)),
                kind: match (r.write, write) {
                    (true, true) => "write after write",
                    (true, false) => "read after write",
                    _ => "write after read",
                },
            };
            return Err(h.to_string());
        }
        let tick = clk.get(s);
        if write {
            recs.retain(|r| !(lo <= r.lo && r.hi <= hi && r.tick <= clk.get(r.stream)));
        } else {
            recs.retain(|r| !(r.lo == lo && r.hi == hi && !r.write && r.stream == s));
        }
        recs.push(Record {
            lo,
            hi,
            write,
            stream: s,
            tick,
            op: op.to_string(),
            after: write.then(|| Arc::new(clk.clone())),
        });
        Ok(())
    }

    /// Check and record a read of `[ptr, ptr+len)` by operation `op` (clock
    /// `clk`, queued on stream `s`) that is known only now, as the
    /// operation runs: it conflicts with a recorded write ordered neither
    /// before it nor after it (a write queued later that waited for it).
    pub fn access_late(
        &mut self,
        s: usize,
        clk: &Clock,
        op: &str,
        ptr: u64,
        len: u64,
    ) -> Result<(), String> {
        if len == 0 {
            return Ok(());
        }
        let (lo, hi) = (ptr, ptr.saturating_add(len));
        let Some((_, recs)) = self
            .allocs
            .range_mut(..=ptr)
            .next_back()
            .filter(|(&b, (sz, _))| hi <= b + *sz)
            .map(|(_, v)| v)
        else {
            return Err(format!(
                "{op} accesses device bytes {lo:#x}..{hi:#x}, outside every device allocation"
            ));
        };
        let tick = clk.get(s);
        for r in recs.iter() {
            if r.hi <= lo || hi <= r.lo || !r.write {
                continue;
            }
            let before = r.tick <= clk.get(r.stream);
            let after = r.after.as_ref().is_some_and(|c| c.get(s) >= tick);
            if before || after {
                continue;
            }
            let h = Hazard {
                op: op.to_string(),
                earlier: r.op.clone(),
                range: (lo.max(r.lo), hi.min(r.hi)),
                kind: "read unordered with a write",
            };
            return Err(h.to_string());
        }
        recs.retain(|r| !(r.lo == lo && r.hi == hi && !r.write && r.stream == s));
        recs.push(Record {
            lo,
            hi,
            write: false,
            stream: s,
            tick,
            op: op.to_string(),
            after: None,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unordered_write_after_read_is_a_hazard_and_an_event_orders_it() {
        let mut t = Tracker::default();
        let (a, b) = (t.add_stream(), t.add_stream());
        t.add_alloc(0x1000, 256);
        let c = t.tick(a);
        t.access(a, &c, "k_read (A)", 0x1000, 64, false).unwrap();
        // b writes the range without waiting: hazard naming both
        let c = t.tick(b);
        let e = t.access(b, &c, "upload (B)", 0x1020, 64, true).unwrap_err();
        assert!(e.contains("write after read") && e.contains("k_read (A)"));
        assert!(e.contains("upload (B)"), "{e}");
        // with b waiting on an event recorded after the read: ordered
        let ev = t.clock_of(a);
        t.stream_waits(b, &ev);
        let c = t.tick(b);
        t.access(b, &c, "upload (B)", 0x1020, 64, true).unwrap();
        // a reads what b wrote without waiting: read after write
        let c = t.tick(a);
        let e = t
            .access(a, &c, "k_read2 (A)", 0x1000, 64, false)
            .unwrap_err();
        assert!(e.contains("read after write"), "{e}");
        // the host synchronized b: later work on a is ordered after it
        t.host_waits_stream(b);
        let c = t.tick(a);
        t.access(a, &c, "k_read2 (A)", 0x1000, 64, false).unwrap();
        // disjoint ranges and same-stream accesses never conflict
        let c = t.tick(b);
        t.access(b, &c, "w (B)", 0x1080, 16, true).unwrap();
        let e = t.access(b, &c, "w (B)", 0x2000, 16, true).unwrap_err();
        assert!(e.contains("outside every device allocation"), "{e}");
    }

    #[test]
    fn a_read_checked_when_it_runs_sees_unordered_writes_only() {
        let mut t = Tracker::default();
        let (a, b) = (t.add_stream(), t.add_stream());
        t.add_alloc(0x1000, 256);
        // a kernel on a is queued; its read is known only when it runs
        let k = t.tick(a);
        // b writes slot 0x1000.. after waiting for it: ordered after
        let ev = t.clock_of(a);
        t.stream_waits(b, &ev);
        let c = t.tick(b);
        t.access(b, &c, "upload (B)", 0x1000, 64, true).unwrap();
        t.access_late(a, &k, "k_mmvq_id (A)", 0x1000, 64).unwrap();
        // a second kernel, and a write to the same slot queued without a wait
        let k2 = t.tick(a);
        let c = t.tick(b);
        t.access(b, &c, "upload2 (B)", 0x1000, 64, true).unwrap();
        let e = t
            .access_late(a, &k2, "k_mmvq_id2 (A)", 0x1000, 64)
            .unwrap_err();
        assert!(
            e.contains("upload2 (B)") && e.contains("k_mmvq_id2 (A)"),
            "{e}"
        );
        // another slot is no conflict
        t.access_late(a, &k2, "k_mmvq_id2 (A)", 0x1080, 64).unwrap();
        // a write queued after the read ran, without a wait: caught at its
        // own check
        let c = t.tick(b);
        let e = t
            .access(b, &c, "upload3 (B)", 0x1080, 16, true)
            .unwrap_err();
        assert!(e.contains("write after read"), "{e}");
    }
}
