//! The simulated clock: deterministic simulated time for a run over the CPU
//! and sim devices, advanced by a [`SimProfile`] per stream and honouring
//! events.
//!
//! The model, as CUDA behaves:
//! - The **host** thread issues all work. CPU ops run on it, so they advance
//!   host time. Work queued on a device stream does not: it starts at
//!   `max(host time at issue, the stream's previous work, events waited on)`.
//! - Each device has one **compute stream** and `copy_engines` **copy
//!   streams**. Host-to-device copies share the device's link (one copy at a
//!   time per direction; with one copy engine both directions share it).
//!   Several devices on one clock have a link each, or, with the profile's
//!   `shared_host_link`, one link for all: their copies then serialize.
//!   A peer copy between two devices holds the source's device-to-host
//!   direction and the destination's host-to-device one
//!   ([`SimClock::peer_copy`]).
//! - An **event** is the time a stream's queued work completes; a stream
//!   that waits on it starts its next work no earlier; the host waiting on
//!   it (or synchronizing a device) jumps to that time.
//!
//! The computation itself happens for real, at issue time, in program order,
//! so results never depend on the clock: only the simulated times do. The
//! same run gives the same simulated times on any machine.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::cost;
use super::node_span::node_detail;
use super::profile::SimProfile;
use crate::backend::{Backend, Stream};
use crate::clock::DeviceClock;
use crate::graph::Graph;
use crate::tensor::TensorId;
use crate::timeline::{overlap_ns, Span, SpanDetail, SpanKind, Timeline};

/// Direction of a copy over the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CopyDir {
    /// Host to device.
    H2D,
    /// Device to host.
    D2H,
}

/// Sums over the run so far, in simulated nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimTotals {
    /// Host time now.
    pub now_ns: u64,
    /// Time the host-to-device links were busy.
    pub link_busy_ns: u64,
    /// Time the devices' compute streams were busy.
    pub device_busy_ns: u64,
    /// Link time that overlapped compute on the same device.
    pub link_hidden_ns: u64,
    /// Time the CPU computed.
    pub cpu_busy_ns: u64,
    /// The host's own work that entered the clock through
    /// [`SimClock::host_work`] (graph building, planning, the copy hook):
    /// measured on the host's wall clock, an input of the simulation.
    pub host_work_ns: u64,
}

impl SimTotals {
    /// `self - earlier`, field by field (for one phase of a run).
    pub fn since(&self, earlier: &SimTotals) -> SimTotals {
        SimTotals {
            now_ns: self.now_ns.saturating_sub(earlier.now_ns),
            link_busy_ns: self.link_busy_ns.saturating_sub(earlier.link_busy_ns),
            device_busy_ns: self.device_busy_ns.saturating_sub(earlier.device_busy_ns),
            link_hidden_ns: self.link_hidden_ns.saturating_sub(earlier.link_hidden_ns),
            cpu_busy_ns: self.cpu_busy_ns.saturating_sub(earlier.cpu_busy_ns),
            host_work_ns: self.host_work_ns.saturating_sub(earlier.host_work_ns),
        }
    }
}

#[derive(Default)]
struct State {
    host: u64,
    seq: u64,
    streams: BTreeMap<(String, Stream), u64>,
    links: BTreeMap<(String, CopyDir), u64>,
    recording: bool,
    timeline: Timeline,
    compute_busy: BTreeMap<String, Vec<(u64, u64)>>,
    h2d_busy: BTreeMap<String, Vec<(u64, u64)>>,
    cpu_busy: u64,
    host_work: u64,
}

impl State {
    fn ready(&self, dev: &str, s: Stream) -> u64 {
        self.streams
            .get(&(dev.to_string(), s))
            .copied()
            .unwrap_or(0)
    }

    fn set_ready(&mut self, dev: &str, s: Stream, t: u64) {
        self.streams.insert((dev.to_string(), s), t);
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        dev: &str,
        stream: &str,
        kind: SpanKind,
        start: u64,
        end: u64,
        bytes: u64,
        detail: Option<SpanDetail>,
    ) {
        let seq = self.seq;
        self.seq += 1;
        if let (true, Some(d)) = (self.recording, detail) {
            self.timeline.spans.push(Span {
                seq,
                backend: dev.to_string(),
                stream: stream.to_string(),
                kind,
                name: d.name,
                start_ns: start,
                end_ns: end,
                bytes,
                reads: d.reads,
                writes: d.writes,
            });
        }
    }
}

/// The key of the one host link all devices use with
/// [`SimProfile::shared_host_link`].
const SHARED_LINK: &str = "host link";

/// Simulated seconds to whole nanoseconds (rounded; deterministic).
pub fn ns(seconds: f64) -> u64 {
    if seconds.is_finite() && seconds > 0.0 {
        (seconds * 1e9).round() as u64
    } else {
        0
    }
}

/// Name of a stream on the timeline.
pub fn stream_name(s: Stream) -> String {
    match s {
        Stream::Compute => "compute".to_string(),
        Stream::Copy(k) => format!("copy{k}"),
    }
}

/// A simulated clock shared by the backends of one run.
pub struct SimClock {
    profile: SimProfile,
    st: Mutex<State>,
}

impl std::fmt::Debug for SimClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimClock({})", self.profile.name)
    }
}

impl SimClock {
    /// A clock at time zero with `profile`.
    pub fn new(profile: SimProfile) -> Arc<SimClock> {
        Arc::new(SimClock {
            profile,
            st: Mutex::new(State::default()),
        })
    }

    /// The simulated clock `backend` advances, if it is one (a sim device,
    /// or a CPU backend that joined a sim device's clock).
    pub fn of(backend: &dyn Backend) -> Option<Arc<SimClock>> {
        backend
            .diagnostics()?
            .device_clock()?
            .into_any()
            .downcast::<SimClock>()
            .ok()
    }

    /// The timing profile.
    pub fn profile(&self) -> &SimProfile {
        &self.profile
    }

    /// Host time now, in simulated nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.st.lock().host
    }

    /// Start or stop recording spans (off by default).
    pub fn set_recording(&self, on: bool) {
        self.st.lock().recording = on;
    }

    /// Whether spans are being recorded (callers build [`SpanDetail`]s only
    /// then).
    pub fn recording(&self) -> bool {
        self.st.lock().recording
    }

    /// The spans recorded so far, leaving none behind.
    pub fn take_timeline(&self) -> Timeline {
        std::mem::take(&mut self.st.lock().timeline)
    }

    /// The run's sums so far.
    pub fn totals(&self) -> SimTotals {
        let st = self.st.lock();
        let mut t = SimTotals {
            now_ns: st.host,
            cpu_busy_ns: st.cpu_busy,
            host_work_ns: st.host_work,
            ..SimTotals::default()
        };
        for (dev, c) in &st.compute_busy {
            t.device_busy_ns += c.iter().map(|&(s, e)| e - s).sum::<u64>();
            if let Some(l) = st.h2d_busy.get(dev) {
                t.link_hidden_ns += overlap_ns(l, c);
            }
        }
        for l in st.h2d_busy.values() {
            t.link_busy_ns += l.iter().map(|&(s, e)| e - s).sum::<u64>();
        }
        t
    }

    /// An op queued on a device stream, lasting `dur_ns` (on the compute
    /// stream it counts as device busy; elsewhere, e.g. a copy inside device
    /// memory on a copy stream, it does not). Returns its `(start, end)`.
    pub fn device_op(
        &self,
        dev: &str,
        stream: Stream,
        dur_ns: u64,
        bytes: u64,
        detail: Option<SpanDetail>,
    ) -> (u64, u64) {
        let mut st = self.st.lock();
        let start = st.host.max(st.ready(dev, stream));
        let end = start + dur_ns;
        st.set_ready(dev, stream, end);
        if dur_ns > 0 && stream == Stream::Compute {
            let v = st.compute_busy.entry(dev.to_string()).or_default();
            match v.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => v.push((start, end)),
            }
        }
        st.push(
            dev,
            &stream_name(stream),
            SpanKind::Op,
            start,
            end,
            bytes,
            detail,
        );
        (start, end)
    }

    /// An op the host thread computes itself (the CPU backend).
    pub fn host_op(
        &self,
        dev: &str,
        dur_ns: u64,
        bytes: u64,
        detail: Option<SpanDetail>,
    ) -> (u64, u64) {
        let mut st = self.st.lock();
        let start = st.host;
        let end = start + dur_ns;
        st.host = end;
        st.cpu_busy += dur_ns;
        st.push(dev, "host", SpanKind::Op, start, end, bytes, detail);
        (start, end)
    }

    /// The host thread's own work (`what`: graph building, planning, the
    /// copy hook's decisions), measured on the host's wall clock by the
    /// caller: host time advances by `dur_ns` as it would on a GPU run,
    /// where the host does the same work before and between its launches.
    /// Unlike the profile's constants this input is measured, so a
    /// simulated figure that includes it varies a little from run to run;
    /// the profile's `host_time_scale` weighs it (0: left out).
    pub fn host_work(&self, what: &str, dur_ns: u64) {
        let dur_ns = (dur_ns as f64 * self.profile.host_time_scale).round() as u64;
        if dur_ns == 0 {
            return;
        }
        let mut st = self.st.lock();
        let start = st.host;
        let end = start + dur_ns;
        st.host = end;
        st.host_work += dur_ns;
        let detail = st.recording.then(|| SpanDetail {
            name: format!("host: {what}"),
            reads: Vec::new(),
            writes: Vec::new(),
        });
        st.push("CPU", "host", SpanKind::Op, start, end, 0, detail);
    }

    /// Simulated duration of a copy of `bytes` over the link.
    pub fn copy_ns(&self, dir: CopyDir, bytes: usize) -> u64 {
        let l = &self.profile.link;
        let bw = match dir {
            CopyDir::H2D => l.h2d_bw,
            CopyDir::D2H => l.d2h_bw,
        };
        ns(l.latency_s + bytes as f64 / bw)
    }

    /// A copy over `dev`'s link queued on `stream`. With `blocking`, the host
    /// waits for it (a synchronous copy, which also waits for every stream of
    /// the device first, as a synchronous `cudaMemcpy` does).
    pub fn copy(
        &self,
        dev: &str,
        stream: Stream,
        dir: CopyDir,
        bytes: usize,
        blocking: bool,
        detail: Option<SpanDetail>,
    ) -> (u64, u64) {
        let dur = self.copy_ns(dir, bytes);
        let link_key = if self.profile.copy_engines <= 1 {
            CopyDir::H2D
        } else {
            dir
        };
        let mut st = self.st.lock();
        let mut start = st.host.max(st.ready(dev, stream));
        if blocking {
            let all = st
                .streams
                .iter()
                .filter(|((d, _), _)| d == dev)
                .map(|(_, &t)| t)
                .max()
                .unwrap_or(0);
            start = start.max(all);
        }
        // the link: the device's own, or the one all devices share
        let link_dev = if self.profile.shared_host_link {
            SHARED_LINK
        } else {
            dev
        };
        let link = st
            .links
            .get(&(link_dev.to_string(), link_key))
            .copied()
            .unwrap_or(0);
        start = start.max(link);
        let end = start + dur;
        st.links.insert((link_dev.to_string(), link_key), end);
        st.set_ready(dev, stream, end);
        if blocking {
            st.host = end;
        }
        if dir == CopyDir::H2D {
            let v = st.h2d_busy.entry(dev.to_string()).or_default();
            match v.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => v.push((start, end)),
            }
        }
        let kind = match dir {
            CopyDir::H2D => SpanKind::CopyH2D,
            CopyDir::D2H => SpanKind::CopyD2H,
        };
        let name = if blocking {
            format!("{} (sync)", stream_name(stream))
        } else {
            stream_name(stream)
        };
        st.push(dev, &name, kind, start, end, bytes as u64, detail);
        (start, end)
    }

    /// A peer copy of `bytes` from device `src` to device `dst`, queued on
    /// `dst`'s `stream` at the profile's peer rate `bw` (bytes/s): it holds
    /// `src`'s device-to-host link direction and `dst`'s host-to-device one
    /// (with `shared_host_link`, the shared link's), see
    /// [`SimProfile`]'s module docs. Returns its `(start, end)`.
    pub fn peer_copy(
        &self,
        src: &str,
        dst: &str,
        stream: Stream,
        bytes: usize,
        bw: f64,
        detail: Option<SpanDetail>,
    ) -> (u64, u64) {
        let dur = ns(self.profile.link.latency_s + bytes as f64 / bw);
        let key = |dir: CopyDir| {
            if self.profile.copy_engines <= 1 {
                CopyDir::H2D
            } else {
                dir
            }
        };
        let link = |dev: &str| {
            if self.profile.shared_host_link {
                SHARED_LINK.to_string()
            } else {
                dev.to_string()
            }
        };
        let out = (link(src), key(CopyDir::D2H));
        let inn = (link(dst), key(CopyDir::H2D));
        let mut st = self.st.lock();
        let busy = |st: &State, k: &(String, CopyDir)| st.links.get(k).copied().unwrap_or(0);
        let start = st
            .host
            .max(st.ready(dst, stream))
            .max(busy(&st, &out))
            .max(busy(&st, &inn));
        let end = start + dur;
        st.links.insert(out, end);
        st.links.insert(inn, end);
        st.set_ready(dst, stream, end);
        let v = st.h2d_busy.entry(dst.to_string()).or_default();
        match v.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => v.push((start, end)),
        }
        st.push(
            dst,
            &stream_name(stream),
            SpanKind::CopyD2D,
            start,
            end,
            bytes as u64,
            detail,
        );
        (start, end)
    }

    /// Time at which the work queued so far on `stream` completes (an
    /// event's time).
    pub fn record(&self, dev: &str, stream: Stream) -> u64 {
        let st = self.st.lock();
        st.ready(dev, stream)
    }

    /// Host time now, as an event the CPU records.
    pub fn record_host(&self) -> u64 {
        self.now_ns()
    }

    /// Make `stream`'s later work start no earlier than `t`.
    pub fn wait(&self, dev: &str, stream: Stream, t: u64) {
        let mut st = self.st.lock();
        let from = st.host.max(st.ready(dev, stream));
        if t > from {
            st.set_ready(dev, stream, t);
            let detail = SpanDetail {
                name: "wait for event".into(),
                ..SpanDetail::default()
            };
            st.push(
                dev,
                &stream_name(stream),
                SpanKind::Wait,
                from,
                t,
                0,
                Some(detail),
            );
        }
    }

    /// The host waits until `t`.
    pub fn host_wait(&self, dev: &str, t: u64) {
        let mut st = self.st.lock();
        if t > st.host {
            let from = st.host;
            st.host = t;
            let detail = SpanDetail {
                name: format!("host waits for {dev}"),
                ..SpanDetail::default()
            };
            st.push("CPU", "host", SpanKind::Wait, from, t, 0, Some(detail));
        }
    }

    /// The host waits for every stream of `dev`.
    pub fn sync_device(&self, dev: &str) {
        let t = {
            let st = self.st.lock();
            st.streams
                .iter()
                .filter(|((d, _), _)| d == dev)
                .map(|(_, &t)| t)
                .max()
                .unwrap_or(0)
        };
        self.host_wait(dev, t);
    }
}

impl DeviceClock for SimClock {
    fn now_ns(&self) -> u64 {
        SimClock::now_ns(self)
    }

    /// The node's roofline time by the profile's CPU numbers, on the host.
    fn host_work(&self, what: &str, dur_ns: u64) {
        SimClock::host_work(self, what, dur_ns);
    }

    fn host_compute(&self, backend: &str, g: &Graph, node: TensorId) {
        let p = self.profile.cpu;
        let w = cost::node_work(g, node);
        let dur = ns(cost::roofline_s(w, p.flops, p.mem_bw, p.op_s));
        let detail = self.recording().then(|| node_detail(g, node));
        self.host_op(backend, dur, w.bytes as u64, detail);
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(copy_engines: usize) -> Arc<SimClock> {
        let mut p = SimProfile::default_profile();
        p.link.latency_s = 0.0;
        p.link.h2d_bw = 1e9; // 1 byte per ns
        p.link.d2h_bw = 1e9;
        p.copy_engines = copy_engines;
        SimClock::new(p)
    }

    #[test]
    fn device_work_does_not_advance_the_host() {
        let c = clock(2);
        let (s, e) = c.device_op("SIM0", Stream::Compute, 100, 0, None);
        assert_eq!((s, e), (0, 100));
        assert_eq!(c.now_ns(), 0);
        let (s, e) = c.host_op("CPU", 30, 0, None);
        assert_eq!((s, e), (0, 30));
        c.sync_device("SIM0");
        assert_eq!(c.now_ns(), 100);
    }

    #[test]
    fn host_work_advances_the_host_by_its_weight() {
        let c = clock(2);
        c.device_op("SIM0", Stream::Compute, 100, 0, None);
        c.host_work("graph", 40);
        assert_eq!(c.now_ns(), 40);
        assert_eq!(c.totals().host_work_ns, 40);
        // device work queued after it starts no earlier
        let (s, _) = c.device_op("SIM0", Stream::Copy(0), 10, 0, None);
        assert_eq!(s, 40);
        let mut p = SimProfile::from_json(r#"{"host_time_scale": 0}"#).unwrap();
        let z = SimClock::new(p.clone());
        z.host_work("graph", 40);
        assert_eq!((z.now_ns(), z.totals().host_work_ns), (0, 0));
        p.host_time_scale = 2.0;
        let d = SimClock::new(p);
        d.host_work("graph", 40);
        assert_eq!(d.now_ns(), 80);
        let e = SimProfile::from_json(r#"{"host_time_scale": -1}"#).unwrap_err();
        assert!(e.contains("host_time_scale"), "{e}");
    }

    #[test]
    fn copies_share_the_link_and_events_order_streams() {
        let c = clock(2);
        c.copy("SIM0", Stream::Copy(0), CopyDir::H2D, 50, false, None);
        c.copy("SIM0", Stream::Copy(1), CopyDir::H2D, 50, false, None);
        // the second waits for the link
        assert_eq!(c.record("SIM0", Stream::Copy(1)), 100);
        // d2h has its own engine with two copy engines
        let (s, _) = c.copy("SIM0", Stream::Copy(1), CopyDir::D2H, 10, false, None);
        assert_eq!(s, 100);
        let ev = c.record("SIM0", Stream::Copy(0));
        c.wait("SIM0", Stream::Compute, ev);
        let (s, e) = c.device_op("SIM0", Stream::Compute, 10, 0, None);
        assert_eq!((s, e), (50, 60));
        let t = c.totals();
        assert_eq!(t.link_busy_ns, 100);
        assert_eq!(t.device_busy_ns, 10);
        assert_eq!(t.link_hidden_ns, 10);
    }

    #[test]
    fn one_copy_engine_serializes_both_directions() {
        let c = clock(1);
        c.copy("SIM0", Stream::Copy(0), CopyDir::H2D, 40, false, None);
        let (s, e) = c.copy("SIM0", Stream::Copy(0), CopyDir::D2H, 10, true, None);
        assert_eq!((s, e), (40, 50));
        assert_eq!(c.now_ns(), 50);
    }

    #[test]
    fn devices_have_a_link_each_unless_they_share_one() {
        for (shared, second_end) in [(false, 50), (true, 100)] {
            let mut p = SimProfile::default_profile();
            p.link.h2d_bw = 1e9;
            p.link.latency_s = 0.0;
            p.shared_host_link = shared;
            let c = SimClock::new(p);
            let (s0, e0) = c.copy("SIM0", Stream::Copy(0), CopyDir::H2D, 50, false, None);
            let (_, e1) = c.copy("SIM1", Stream::Copy(0), CopyDir::H2D, 50, false, None);
            assert_eq!((s0, e0), (0, 50));
            assert_eq!(e1, second_end, "shared_host_link {shared}");
            // each device's link time is its own copies' either way
            assert_eq!(c.totals().link_busy_ns, 100);
        }
        let p = SimProfile::from_json(r#"{"shared_host_link": true}"#).unwrap();
        assert!(p.shared_host_link);
        assert!(!SimProfile::default_profile().shared_host_link);
    }

    #[test]
    fn a_peer_copy_holds_the_source_outbound_and_the_destination_inbound() {
        for shared in [false, true] {
            let mut p = SimProfile::default_profile();
            p.link.h2d_bw = 1e9;
            p.link.d2h_bw = 1e9;
            p.link.latency_s = 0.0;
            p.shared_host_link = shared;
            p.d2d_bw = Some(2e9); // 2 bytes per ns
            let bw = p.peer_bw().unwrap();
            let c = SimClock::new(p);
            // SIM0 reads 30 bytes back; SIM1 uploads 40
            c.copy("SIM0", Stream::Copy(1), CopyDir::D2H, 30, false, None);
            c.copy("SIM1", Stream::Copy(0), CopyDir::H2D, 40, false, None);
            // the peer copy waits for both directions it holds
            let (s, e) = c.peer_copy("SIM0", "SIM1", Stream::Copy(0), 100, bw, None);
            assert_eq!((s, e), (40, 90), "shared {shared}");
            // an upload into SIM0 uses the other direction of its link: free
            // unless the link is the shared one
            let (s, _) = c.copy("SIM0", Stream::Copy(0), CopyDir::H2D, 10, false, None);
            assert_eq!(s, if shared { 90 } else { 0 }, "shared {shared}");
            // SIM1's inbound direction is held until the peer copy ends
            let (s, _) = c.copy("SIM1", Stream::Copy(1), CopyDir::H2D, 10, false, None);
            assert_eq!(s, 90.max(if shared { 100 } else { 0 }), "shared {shared}");
        }
        let p = SimProfile::from_json(r#"{"d2d_bw": 0}"#).unwrap();
        assert_eq!(p.peer_bw(), None);
        let d = SimProfile::default_profile();
        assert_eq!(d.peer_bw(), Some(d.link.h2d_bw.min(d.link.d2h_bw)));
        let e = SimProfile::from_json(r#"{"d2d_bw": -1}"#).unwrap_err();
        assert!(e.contains("d2d_bw"), "{e}");
    }
}
