//! Drawing a timeline (the Chrome trace JSON of `--timeline-out`) as an
//! SVG picture: one lane per backend and stream, one box per span coloured
//! by kind (op, host-to-device copy, device-to-host copy, wait), a time axis
//! in simulated microseconds. `llama-timeline` is the command-line front.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{bail, Context as _, Result};
use serde::Deserialize;

#[derive(Deserialize)]
struct Trace {
    #[serde(rename = "traceEvents")]
    events: Vec<Ev>,
    #[serde(rename = "otherData", default)]
    other: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Ev {
    ph: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    cat: String,
    #[serde(default)]
    pid: u64,
    #[serde(default)]
    tid: u64,
    #[serde(default)]
    ts: f64,
    #[serde(default)]
    dur: f64,
    #[serde(default)]
    args: serde_json::Value,
}

/// One span to draw.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Lane label (`SIM0 copy0`).
    pub lane: String,
    /// Category (`op`, `h2d`, `d2h`, `wait`).
    pub cat: String,
    /// Name.
    pub name: String,
    /// Start, microseconds.
    pub ts: f64,
    /// Duration, microseconds.
    pub dur: f64,
}

/// The spans of a trace and its title.
pub fn parse(json: &str) -> Result<(String, Vec<Bar>)> {
    let t: Trace = serde_json::from_str(json).context("not a Chrome trace (JSON)")?;
    let mut procs: BTreeMap<u64, String> = BTreeMap::new();
    let mut threads: BTreeMap<(u64, u64), String> = BTreeMap::new();
    for e in &t.events {
        if e.ph == "M" {
            let n = e.args["name"].as_str().unwrap_or("").to_string();
            match e.name.as_str() {
                "process_name" => {
                    procs.insert(e.pid, n);
                }
                "thread_name" => {
                    threads.insert((e.pid, e.tid), n);
                }
                _ => {}
            }
        }
    }
    let bars = t
        .events
        .iter()
        .filter(|e| e.ph == "X")
        .map(|e| Bar {
            lane: format!(
                "{} {}",
                procs
                    .get(&e.pid)
                    .cloned()
                    .unwrap_or_else(|| e.pid.to_string()),
                threads
                    .get(&(e.pid, e.tid))
                    .cloned()
                    .unwrap_or_else(|| e.tid.to_string())
            ),
            cat: e.cat.clone(),
            name: e.name.clone(),
            ts: e.ts,
            dur: e.dur,
        })
        .collect();
    let title = t
        .other
        .as_ref()
        .and_then(|o| o["clock"].as_str())
        .unwrap_or("timeline")
        .to_string();
    Ok((title, bars))
}

fn colour(cat: &str) -> &'static str {
    match cat {
        "op" => "#4e79a7",
        "h2d" => "#f28e2b",
        "d2h" => "#59a14f",
        "d2d" => "#b07aa1",
        "wait" => "#d3d3d3",
        _ => "#999999",
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Draw the bars whose time range meets `[from_us, to_us]` (whole trace when
/// `None`).
pub fn render(
    title: &str,
    bars: &[Bar],
    from_us: Option<f64>,
    to_us: Option<f64>,
) -> Result<String> {
    if bars.is_empty() {
        bail!("the trace has no spans to draw");
    }
    let lo = from_us.unwrap_or_else(|| bars.iter().map(|b| b.ts).fold(f64::INFINITY, f64::min));
    let hi = to_us.unwrap_or_else(|| {
        bars.iter()
            .map(|b| b.ts + b.dur)
            .fold(f64::NEG_INFINITY, f64::max)
    });
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        bail!("empty time range {lo}..{hi} us");
    }
    let shown: Vec<&Bar> = bars
        .iter()
        .filter(|b| b.ts + b.dur >= lo && b.ts <= hi)
        .collect();
    let mut lanes: Vec<&str> = Vec::new();
    for b in &shown {
        if !lanes.contains(&b.lane.as_str()) {
            lanes.push(&b.lane);
        }
    }
    lanes.sort_unstable();
    let (left, width, lane_h, top) = (150.0, 1000.0, 28.0, 50.0);
    let height = top + lane_h * lanes.len() as f64 + 60.0;
    let x = |t: f64| left + (t.clamp(lo, hi) - lo) / (hi - lo) * width;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">",
        left + width + 20.0
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"10\" y=\"20\" font-size=\"14\">{} ({:.1} us shown)</text>",
        esc(title),
        hi - lo
    );
    for (i, l) in lanes.iter().enumerate() {
        let y = top + lane_h * i as f64;
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"{}\">{}</text><line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#eee\"/>",
            y + lane_h * 0.6,
            esc(l),
            left + width,
            y + lane_h,
            y + lane_h
        );
    }
    for b in &shown {
        let Some(i) = lanes.iter().position(|l| *l == b.lane) else {
            continue;
        };
        let y = top + lane_h * i as f64 + 3.0;
        let (x0, x1) = (x(b.ts), x(b.ts + b.dur));
        let _ = writeln!(
            s,
            "<rect x=\"{x0:.2}\" y=\"{y:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"{}\" stroke=\"white\" stroke-width=\"0.3\"><title>{} ({}, {:.2} us)</title></rect>",
            (x1 - x0).max(0.3),
            lane_h - 6.0,
            colour(&b.cat),
            esc(&b.name),
            b.cat,
            b.dur
        );
    }
    // axis with 5 ticks, legend
    let ay = top + lane_h * lanes.len() as f64 + 15.0;
    for k in 0..=5 {
        let t = lo + (hi - lo) * k as f64 / 5.0;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{ay}\" text-anchor=\"middle\">{:.0} us</text>",
            x(t),
            t - lo
        );
    }
    let ly = ay + 25.0;
    for (k, (cat, label)) in [
        ("op", "op"),
        ("h2d", "host→device copy"),
        ("d2h", "device→host copy"),
        ("d2d", "device→device copy"),
        ("wait", "wait"),
    ]
    .iter()
    .enumerate()
    {
        let lx = left + 180.0 * k as f64;
        let _ = writeln!(
            s,
            "<rect x=\"{lx}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{label}</text>",
            ly - 11.0,
            colour(cat),
            lx + 20.0,
            ly
        );
    }
    s.push_str("</svg>\n");
    Ok(s)
}

/// The last decode step of a trace: the spans after the last host wait that
/// ends a graph before the final one (graphs end with the host waiting for
/// the device), as a time range in microseconds.
pub fn last_graph_range(bars: &[Bar]) -> Option<(f64, f64)> {
    let mut ends: Vec<f64> = bars
        .iter()
        .filter(|b| b.cat == "wait" && b.lane.starts_with("CPU host"))
        .map(|b| b.ts + b.dur)
        .collect();
    ends.sort_by(f64::total_cmp);
    let end = *ends.last()?;
    let start = ends.iter().rev().nth(1).copied().unwrap_or(0.0);
    Some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = r#"{"otherData":{"clock":"simulated"},"traceEvents":[
{"ph":"M","name":"process_name","pid":1,"args":{"name":"SIM0"}},
{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"compute"}},
{"ph":"X","name":"MUL_MAT <x>","cat":"op","pid":1,"tid":1,"ts":1.0,"dur":2.0}]}"#;

    #[test]
    fn draws_lanes_and_boxes() {
        let (title, bars) = parse(TRACE).unwrap();
        assert_eq!(title, "simulated");
        assert_eq!(bars[0].lane, "SIM0 compute");
        let svg = render(&title, &bars, None, None).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("MUL_MAT &lt;x&gt;"));
        assert!(svg.contains("SIM0 compute"));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(parse("{").is_err());
        let (t, b) = parse(r#"{"traceEvents":[]}"#).unwrap();
        assert!(render(&t, &b, None, None).is_err());
    }
}
