//! llama-bench's `-dev` and `-ts` lists: one test per combination, each
//! written with llama.cpp's `devices` and `tensor_split` fields (json, csv)
//! and its `dev` and `ts` columns (md), and `backends` / `gpu_info` naming
//! every device of the test's set.

mod common;
use common::*;

const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");

fn bench(args: &[&str], dir: &std::path::Path) -> String {
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let mut all = vec!["-m", m.to_str().unwrap(), "-p", "4", "-n", "0", "-r", "1"];
    all.extend_from_slice(args);
    let o = run(BENCH, &all, dir);
    ok(&o);
    stdout(&o)
}

/// The value of a string field in one JSON object of llama-bench's output.
fn field<'a>(obj: &'a str, key: &str) -> &'a str {
    let pat = format!("\"{key}\": \"");
    let start = obj
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {obj}"))
        + pat.len();
    let end = obj[start..].find('"').unwrap() + start;
    &obj[start..end]
}

#[test]
fn dev_and_ts_lists_make_one_test_per_combination() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["-dev", "SIM0/SIM1,SIM1/SIM0", "-ts", "1/1,3/1"];
    // json: four tests, in llama.cpp's nesting order (devices outside
    // tensor_split), each with its own fields
    let mut args = flags.to_vec();
    args.extend_from_slice(&["-o", "json"]);
    let out = bench(&args, dir.path());
    let objs: Vec<&str> = out
        .split("\n  }")
        .filter(|o| o.contains("\"devices\""))
        .collect();
    assert_eq!(objs.len(), 4, "{out}");
    let got: Vec<(&str, &str)> = objs
        .iter()
        .map(|o| (field(o, "devices"), field(o, "tensor_split")))
        .collect();
    assert_eq!(
        got,
        [
            ("SIM0/SIM1", "1.00/1.00"),
            ("SIM0/SIM1", "3.00/1.00"),
            ("SIM1/SIM0", "1.00/1.00"),
            ("SIM1/SIM0", "3.00/1.00"),
        ]
    );
    for o in &objs {
        assert_eq!(field(o, "backends"), "SIM", "{o}");
        let gpu = field(o, "gpu_info");
        assert!(gpu.contains("SIM0") && gpu.contains("SIM1"), "{gpu}");
    }
    // csv: the same values under llama.cpp's header names
    let mut args = flags.to_vec();
    args.extend_from_slice(&["-o", "csv"]);
    let out = bench(&args, dir.path());
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (dc, tc) = (col("devices"), col("tensor_split"));
    assert!(
        dc < tc,
        "llama.cpp's field order: devices, then tensor_split"
    );
    let rows: Vec<(String, String)> = lines
        .map(|l| {
            let v: Vec<&str> = l.split("\",\"").collect();
            (v[dc].to_string(), v[tc].to_string())
        })
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    assert_eq!(rows[1], ("SIM0/SIM1".into(), "3.00/1.00".into()));
    // md: the dev and ts columns, as llama.cpp shows parameters that differ
    // from their defaults
    let mut args = flags.to_vec();
    args.extend_from_slice(&["-o", "md"]);
    let out = bench(&args, dir.path());
    let head = out.lines().find(|l| l.contains("| model")).unwrap();
    let cols: Vec<&str> = head.split('|').map(str::trim).collect();
    let (d, t) = (
        cols.iter().position(|c| *c == "dev").expect("dev column"),
        cols.iter().position(|c| *c == "ts").expect("ts column"),
    );
    assert!(d < t, "{head}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.contains("SIM0/SIM1") || l.contains("SIM1/SIM0"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    assert_eq!((rows[3][d], rows[3][t]), ("SIM1/SIM0", "3.00/1.00"));
}

/// One `-ts` list for device sets of different sizes (a sweep llama.cpp
/// runs): each test takes a share per device of its own set, the extra
/// values ignored with a warning, as llama.cpp ignores them.
#[test]
fn a_split_longer_than_a_device_set_is_fitted_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let m = lean_model("tiny-qwen3moe-f32.gguf");
    let o = run(
        BENCH,
        &[
            "-m",
            m.to_str().unwrap(),
            "-p",
            "4",
            "-n",
            "0",
            "-r",
            "1",
            "-dev",
            "SIM0/SIM1,SIM0",
            "-ts",
            "1/1",
            "-o",
            "json",
        ],
        dir.path(),
    );
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    let warning = "2 values for 1 device (SIM0): the last 1 ignored, as llama.cpp does";
    assert_eq!(e.matches(warning).count(), 1, "one warning: {e}");
    let out = stdout(&o);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let tests = v.as_array().expect("a list of tests");
    let devices: Vec<&str> = tests
        .iter()
        .map(|t| t["devices"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(devices, ["SIM0/SIM1", "SIM0"], "{out}");
    assert!(
        tests
            .iter()
            .all(|t| t["avg_ts"].as_f64().is_some_and(|x| x > 0.0)),
        "{out}"
    );
}

/// On a sim device the md table's `t/s` is the wall clock (the CPU standing
/// in for the device); the simulated clock's rate follows it in its own
/// column, `t/s simulated`, as json's `sim_avg_ts`. A run without a sim
/// device has no such column.
#[test]
fn md_labels_the_simulated_rate_in_its_own_column() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(&["-dev", "SIM0,none"], dir.path());
    let head: Vec<&str> = out
        .lines()
        .next()
        .unwrap()
        .split('|')
        .map(str::trim)
        .collect();
    let ts = head.iter().position(|c| *c == "t/s").expect("t/s column");
    assert_eq!(head[ts + 1], "t/s simulated", "{out}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(2)
        .filter(|l| l.starts_with('|'))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    let sim: f64 = rows[0][ts + 1].parse().expect("a simulated rate on SIM0");
    assert!(sim > 0.0, "{out}");
    assert_eq!(rows[1][ts + 1], "-", "no simulated rate on the CPU: {out}");
    let cpu_only = bench(&[], dir.path());
    assert!(!cpu_only.contains("simulated"), "{cpu_only}");
}
