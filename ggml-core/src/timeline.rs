//! A timeline of a run: one span per op, copy and wait, on a track per
//! backend and stream, written in the Chrome trace event format (Perfetto,
//! `chrome://tracing`), and checked for ordering hazards.
//!
//! Backend-neutral: the simulator's clock fills one in simulated time
//! (`sim::SimClock`, the CPU backend's ops joining it), the CUDA backend
//! fills one from CUDA events in wall-clock time
//! ([`crate::backend::BackendDiagnostics::take_event_timeline`]). This module names no
//! backend; whoever records says what its nanoseconds are (the trace's
//! title).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What a span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpanKind {
    /// A node computed by a backend.
    Op,
    /// Bytes moved host to device.
    CopyH2D,
    /// Bytes moved device to host.
    CopyD2H,
    /// Bytes moved from one device to another (a peer copy), on the
    /// destination's track.
    CopyD2D,
    /// A stream (or the host) waiting for an event.
    Wait,
}

impl SpanKind {
    /// The trace category.
    pub fn category(self) -> &'static str {
        match self {
            SpanKind::Op => "op",
            SpanKind::CopyH2D => "h2d",
            SpanKind::CopyD2H => "d2h",
            SpanKind::CopyD2D => "d2d",
            SpanKind::Wait => "wait",
        }
    }
}

/// A byte range in the process's address space (host memory, or the sim
/// device's memory, which the CPU can address too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemRange {
    /// First byte's address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

impl MemRange {
    /// Whether two ranges share a byte.
    pub fn overlaps(&self, o: &MemRange) -> bool {
        self.len > 0 && o.len > 0 && self.addr < o.addr + o.len && o.addr < self.addr + self.len
    }
}

/// One span of work on one track.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// Issue order (program order of the host thread).
    pub seq: u64,
    /// Backend name (`CPU`, `SIM0`, `CUDA0`).
    pub backend: String,
    /// Stream name (`host`, `compute`, `copy0`, ...).
    pub stream: String,
    /// What it is.
    pub kind: SpanKind,
    /// Op and tensor name, or copy label.
    pub name: String,
    /// Start, nanoseconds (simulated or wall-clock: the recorder's clock).
    pub start_ns: u64,
    /// End, nanoseconds (as `start_ns`).
    pub end_ns: u64,
    /// Bytes moved (copies) or touched (ops).
    pub bytes: u64,
    /// Memory read.
    pub reads: Vec<MemRange>,
    /// Memory written.
    pub writes: Vec<MemRange>,
}

/// Spans in issue order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// Every recorded span.
    pub spans: Vec<Span>,
}

/// What a span is about, as its recorder builds it (only while recording):
/// the clock adds where and when.
#[derive(Clone, Debug, Default)]
pub struct SpanDetail {
    /// Op and tensor name, or copy label.
    pub name: String,
    /// Memory read.
    pub reads: Vec<MemRange>,
    /// Memory written.
    pub writes: Vec<MemRange>,
}

impl Timeline {
    /// Check that every pair of spans that touch the same memory, one of
    /// them writing, runs in issue order: the earlier-issued one ends before
    /// the later one starts (no op reads a copy or op result before it is
    /// complete, no copy or op overwrites memory an unfinished op or copy
    /// still reads). Returns the first violation found.
    pub fn check_hazards(&self) -> Result<(), String> {
        let mut sp: Vec<&Span> = self
            .spans
            .iter()
            .filter(|s| s.kind != SpanKind::Wait)
            .collect();
        sp.sort_by_key(|s| s.seq);
        for (i, a) in sp.iter().enumerate() {
            for b in &sp[i + 1..] {
                if a.end_ns <= b.start_ns {
                    continue;
                }
                let clash = |x: &[MemRange], y: &[MemRange]| {
                    x.iter().any(|r| y.iter().any(|q| r.overlaps(q)))
                };
                let what = if clash(&a.writes, &b.reads) {
                    "reads what the earlier one writes"
                } else if clash(&a.reads, &b.writes) {
                    "overwrites what the earlier one reads"
                } else if clash(&a.writes, &b.writes) {
                    "writes what the earlier one writes"
                } else {
                    continue;
                };
                return Err(format!(
                    "hazard: {} '{}' on {}/{} [{}..{} ns] {what}: {} '{}' on {}/{} [{}..{} ns]",
                    b.kind.category(),
                    b.name,
                    b.backend,
                    b.stream,
                    b.start_ns,
                    b.end_ns,
                    a.kind.category(),
                    a.name,
                    a.backend,
                    a.stream,
                    a.start_ns,
                    a.end_ns
                ));
            }
        }
        Ok(())
    }

    /// The spans in the Chrome trace event format: one process per backend,
    /// one thread per stream, times in microseconds of the recorder's clock.
    pub fn to_chrome_json(&self, title: &str) -> String {
        let mut pids: BTreeMap<&str, usize> = BTreeMap::new();
        let mut tids: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for s in &self.spans {
            let n = pids.len();
            pids.entry(&s.backend).or_insert(n + 1);
            let n = tids.len();
            tids.entry((&s.backend, &s.stream)).or_insert(n + 1);
        }
        let mut out = String::from("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"clock\":");
        out.push_str(&json_str(title));
        out.push_str("},\"traceEvents\":[\n");
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !first {
                out.push_str(",\n");
            }
            first = false;
        };
        for (b, pid) in &pids {
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":{}}}}}",
                json_str(b)
            );
        }
        for ((b, st), tid) in &tids {
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{tid},\"args\":{{\"name\":{}}}}}",
                pids[b],
                json_str(st)
            );
        }
        for s in &self.spans {
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"ph\":\"X\",\"name\":{},\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"seq\":{},\"bytes\":{}}}}}",
                json_str(&s.name),
                s.kind.category(),
                pids[s.backend.as_str()],
                tids[&(s.backend.as_str(), s.stream.as_str())],
                s.start_ns as f64 / 1e3,
                (s.end_ns - s.start_ns) as f64 / 1e3,
                s.seq,
                s.bytes
            );
        }
        out.push_str("\n]}\n");
        out
    }
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Total length of the intersection of two lists of intervals, each sorted
/// by start and non-overlapping within itself.
pub fn overlap_ns(a: &[(u64, u64)], b: &[(u64, u64)]) -> u64 {
    let (mut i, mut j, mut total) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if hi > lo {
            total += hi - lo;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(seq: u64, s: u64, e: u64, reads: &[(usize, usize)], writes: &[(usize, usize)]) -> Span {
        let r = |v: &[(usize, usize)]| {
            v.iter()
                .map(|&(addr, len)| MemRange { addr, len })
                .collect()
        };
        Span {
            seq,
            backend: "SIM0".into(),
            stream: "compute".into(),
            kind: SpanKind::Op,
            name: format!("s{seq}"),
            start_ns: s,
            end_ns: e,
            bytes: 0,
            reads: r(reads),
            writes: r(writes),
        }
    }

    #[test]
    fn hazards_are_found_in_both_directions() {
        // write then an overlapping read that starts too early
        let t = Timeline {
            spans: vec![
                span(0, 0, 10, &[], &[(100, 8)]),
                span(1, 5, 20, &[(104, 4)], &[]),
            ],
        };
        assert!(t.check_hazards().unwrap_err().contains("reads what"));
        // read then a write into it before the read ends
        let t = Timeline {
            spans: vec![
                span(0, 0, 10, &[(100, 8)], &[]),
                span(1, 9, 20, &[], &[(96, 8)]),
            ],
        };
        assert!(t.check_hazards().unwrap_err().contains("overwrites"));
        // ordered, or disjoint, or both reads: fine
        let t = Timeline {
            spans: vec![
                span(0, 0, 10, &[(100, 8)], &[(200, 8)]),
                span(1, 10, 20, &[(200, 8)], &[(100, 8)]),
                span(2, 0, 30, &[(500, 8)], &[(300, 8)]),
                span(3, 15, 16, &[(500, 8)], &[(400, 8)]),
            ],
        };
        t.check_hazards().unwrap();
    }

    #[test]
    fn overlap_of_interval_lists() {
        assert_eq!(overlap_ns(&[(0, 10), (20, 30)], &[(5, 25)]), 10);
        assert_eq!(overlap_ns(&[(0, 10)], &[(10, 20)]), 0);
        assert_eq!(overlap_ns(&[], &[(0, 1)]), 0);
    }

    #[test]
    fn chrome_json_parses_and_names_tracks() {
        let t = Timeline {
            spans: vec![span(0, 1000, 2500, &[], &[])],
        };
        let j = t.to_chrome_json("simulated: test \"x\"");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        assert_eq!(ev.len(), 3);
        assert_eq!(ev[2]["ts"], 1.0);
        assert_eq!(ev[2]["dur"], 1.5);
        assert_eq!(ev[1]["args"]["name"], "compute");
    }
}
