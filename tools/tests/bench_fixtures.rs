//! llama-bench against llama.cpp's llama-bench: each command of
//! `tests/data/bench/*.cmd` (copied from the shared fixtures, run by
//! llama.cpp on the same model file) runs here, and its output is checked
//! against llama.cpp's `NAME.out`: row count and order, columns, field
//! names, types and value formats, numbers that depend on the clock or the
//! machine masked. json/jsonl/csv/sql are parsed by Python's json, csv and
//! sqlite3 (`common/bench_check.py`). Also: `-ot` rules split on `;` with a
//! device, and bad lists fail clearly.

mod common;
use common::*;

use std::path::{Path, PathBuf};

const BENCH: &str = env!("CARGO_BIN_EXE_llama-bench");

/// `bench/FILE`: the bench fixtures are in the lean set tracked in tests/data.
fn bench_file(file: &str) -> PathBuf {
    fixtures::lean_path(&format!("bench/{file}"))
}

/// The model llama.cpp's llama-bench ran the fixtures on, or why it is absent.
fn q4k_model() -> Result<String, fixtures::SkipReason> {
    Ok(model("tiny-qwen3moe-q4_k.gguf")?
        .to_string_lossy()
        .into_owned())
}

/// The fixture's arguments (after `llama-bench`), the model path pointed at
/// our copy; single quotes group as in a shell.
fn fixture_args(name: &str) -> Result<Vec<String>, fixtures::SkipReason> {
    let cmd = std::fs::read_to_string(bench_file(&format!("{name}.cmd")))
        .unwrap_or_else(|e| panic!("{name}.cmd: {e}"));
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in cmd.trim().chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    args.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        args.push(cur);
    }
    assert_eq!(args[0], "llama-bench");
    let model = q4k_model()?;
    Ok(args[1..]
        .iter()
        .map(|a| {
            if a == "models/tiny-qwen3moe-q4_k.gguf" {
                model.clone()
            } else {
                a.clone()
            }
        })
        .collect())
}

fn bench(args: &[String]) -> (String, String) {
    let cache = tempfile::tempdir().unwrap();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run(BENCH, &a, cache.path());
    ok(&o);
    (stdout(&o), stderr(&o))
}

/// The cells of a markdown table row, padding kept.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim_end();
    let inner = inner.strip_prefix('|').and_then(|l| l.strip_suffix('|'));
    let inner = inner.unwrap_or_else(|| panic!("not a table row: {line:?}"));
    inner
        .split('|')
        .map(|c| {
            c.strip_prefix(' ')
                .and_then(|c| c.strip_suffix(' '))
                .unwrap_or_else(|| panic!("cell {c:?} of {line:?} lacks its spaces"))
                .to_string()
        })
        .collect()
}

fn check_md(name: &str, ours: &str, threads_given: bool) {
    let reference = std::fs::read_to_string(bench_file(&format!("{name}.out"))).unwrap();
    let rows = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.starts_with('|'))
            .map(str::to_string)
            .collect()
    };
    let (r, o) = (rows(&reference), rows(ours));
    assert!(r.len() >= 3, "{name}: fixture has no table");
    assert_eq!(
        o.len(),
        r.len(),
        "{name}: row count\nours:\n{ours}\nllama.cpp:\n{reference}"
    );
    // header and separator: the same columns, titles, widths, alignment
    assert_eq!(o[0], r[0], "{name}: header");
    assert_eq!(o[1], r[1], "{name}: separator");
    let titles: Vec<String> = cells(&r[0]).iter().map(|c| c.trim().to_string()).collect();
    for (i, (rl, ol)) in r[2..].iter().zip(&o[2..]).enumerate() {
        let (rc, oc) = (cells(rl), cells(ol));
        assert_eq!(oc.len(), rc.len(), "{name} row {i}: {ol}");
        for ((t, rv), ov) in titles.iter().zip(&rc).zip(&oc) {
            assert_eq!(
                ov.chars().count(),
                rv.chars().count(),
                "{name} row {i} column {t}: width of {ov:?} vs {rv:?}"
            );
            match t.as_str() {
                "t/s" => {
                    let v = ov.trim();
                    let (a, b) = v
                        .split_once(" ± ")
                        .unwrap_or_else(|| panic!("{name}: t/s {v:?}"));
                    for x in [a, b] {
                        let (int, frac) = x.split_once('.').unwrap_or(("", ""));
                        assert!(
                            !int.is_empty()
                                && int.bytes().all(|c| c.is_ascii_digit())
                                && frac.len() == 2
                                && frac.bytes().all(|c| c.is_ascii_digit()),
                            "{name}: t/s {v:?} is not %.2f ± %.2f"
                        );
                    }
                    assert_eq!(ov.trim_end(), ov.as_str(), "{name}: t/s right-aligned");
                }
                "threads" if !threads_given => {
                    assert!(ov.trim().parse::<u32>().is_ok(), "{name}: threads {ov:?}");
                    assert_eq!(ov.trim_end(), ov.as_str(), "{name}: threads right-aligned");
                }
                // everything else is the same model and the same parameters:
                // exactly llama.cpp's text
                _ => assert_eq!(ov, rv, "{name} row {i} column {t}"),
            }
        }
    }
    // the footer: a blank line, then `build: COMMIT (NUMBER)`
    let tail: Vec<&str> = ours.lines().skip(o.len()).collect();
    assert_eq!(tail.len(), 2, "{name}: footer {tail:?}");
    assert_eq!(tail[0], "");
    let b = tail[1].strip_prefix("build: ").expect("build line");
    let (commit, num) = b.split_once(" (").expect("build: COMMIT (N)");
    assert!(!commit.is_empty() && !commit.contains(' '), "{b}");
    assert!(num.trim_end_matches(')').parse::<u64>().is_ok(), "{b}");
}

fn python_check(format: &str, name: &str, ours: &str) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(format!("ours.{format}"));
    std::fs::write(&p, ours).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/bench_check.py");
    let o = std::process::Command::new("python3")
        .arg(&script)
        .arg(format)
        .arg(bench_file(&format!("{name}.out")))
        .arg(&p)
        .output()
        .expect("python3 runs (the schema check parses with Python's json/csv/sqlite3)");
    assert!(
        o.status.success(),
        "{name}: {}{}\nours:\n{ours}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn markdown_fixtures() {
    for name in [
        "md-default",
        "md-lists",
        "md-range",
        "md-batch",
        "md-cpumoe",
        "md-pg",
        "md-depth",
        "md-ot",
        "md-ctk",
    ] {
        let args = or_skip!(fixture_args(name));
        let threads_given = args.iter().any(|a| a == "-t");
        let (out, _) = bench(&args);
        check_md(name, &out, threads_given);
    }
}

#[test]
fn json_jsonl_csv_sql_fixtures_parse_with_python_and_match_llama_cpp_schema() {
    for f in ["json", "jsonl", "csv", "sql"] {
        let (out, _) = bench(&or_skip!(fixture_args(f)));
        python_check(f, f, &out);
    }
}

#[test]
fn second_format_on_stderr() {
    let mut args = or_skip!(fixture_args("csv"));
    args.extend(["-oe".into(), "json".into()]);
    let (out, err) = bench(&args);
    python_check("csv", "csv", &out);
    let json = &err[err.find("[\n").expect("json on stderr")..];
    python_check("json", "json", json);
}

#[test]
fn override_rules_split_on_semicolons_with_a_device() {
    let m = or_skip!(q4k_model());
    let args: Vec<String> = [
        "-m",
        &m,
        "-r",
        "1",
        "-p",
        "16",
        "-n",
        "0",
        "--no-warmup",
        "-ot",
        "exps=CPU;norm=CPU",
        "-dev",
        "SIM0",
        "-v",
        "-o",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (out, err) = bench(&args);
    // -v: every tensor and where it went
    let mut seen = (0, 0, 0);
    for line in err.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || !(f[0].starts_with("blk.") || f[0].starts_with("output")) {
            continue;
        }
        let (name, target) = (f[0], *f.last().unwrap());
        if name.contains("exps") {
            assert_eq!(target, "host", "{line}");
            seen.0 += 1;
        } else if name.contains("norm") {
            assert_eq!(target, "host", "{line}");
            seen.1 += 1;
        } else if name.starts_with("blk.") {
            assert_eq!(target, "SIM0", "{line}");
            seen.2 += 1;
        }
    }
    assert!(seen.0 >= 6 && seen.1 >= 4 && seen.2 >= 4, "{seen:?}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r = &v[0];
    assert_eq!(r["tensor_buft_overrides"], "exps=CPU;norm=CPU");
    assert_eq!(r["devices"], "SIM0");
    assert_eq!(r["backends"], "SIM");
    // our own fields where a device is in use
    for k in [
        "offload_min_batch",
        "h2d_bytes_experts_per_token",
        "experts_copied_per_token",
    ] {
        assert!(r.get(k).is_some_and(|x| x.is_number()), "{k}: {r}");
    }
}

#[test]
fn own_fields_only_where_they_apply() {
    let m = or_skip!(q4k_model());
    let args: Vec<String> = [
        "-m",
        &m,
        "-r",
        "1",
        "-p",
        "8",
        "-n",
        "0",
        "--no-warmup",
        "-dev",
        "none,SIM0",
        "-o",
        "jsonl",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (out, _) = bench(&args);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert!(
        rows[0].get("h2d_bytes_experts_per_token").is_none(),
        "{}",
        rows[0]
    );
    assert_eq!(rows[0]["backends"], "CPU");
    assert!(
        rows[1]["h2d_bytes_experts_per_token"].is_number(),
        "{}",
        rows[1]
    );
    assert_eq!(rows[1]["backends"], "SIM");
}

fn fails(args: &[&str], needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let o = run(BENCH, args, dir.path());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks {n:?}:\n{err}");
    }
}

#[test]
fn bad_lists_fail_clearly() {
    let m = or_skip!(q4k_model());
    fails(&["-m", &m, "-t", "8-1"], &["-t 8-1", "below"]);
    fails(
        &["-m", &m, "-p", "16,abc"],
        &["-p 16,abc", "'abc' is not a number"],
    );
    fails(
        &["-m", &m, "-ncmoe", "x"],
        &["-ncmoe x", "'x' is not a number"],
    );
    fails(
        &["-m", &m, "-o", "xml"],
        &["-o xml", "unknown output format 'xml'"],
    );
    fails(
        &["-m", &m, "-ctk", "q5_1"],
        &["q5_1", "not supported by this engine's KV cache"],
    );
    fails(
        &["-m", &m, "-ctk", "q9"],
        &["-ctk q9", "unknown cache type"],
    );
    fails(
        &["-m", &m, "-ctv", "q8_0", "-fa", "0"],
        &["-ctv q8_0", "requires flash attention"],
    );
    fails(
        &["-m", &m, "-fa", "sometimes"],
        &["-fa sometimes", "'sometimes'"],
    );
    fails(&["-m", &m, "-ot", "exps=SIM0"], &["SIM0", "available: CPU"]);
    fails(&["-m", &m, "-p", "0", "-n", "0"], &["no tests"]);
}

#[test]
fn no_op_offload_stops_expert_copies() {
    let m = or_skip!(q4k_model());
    let args: Vec<String> = [
        "-m",
        &m,
        "-r",
        "1",
        "-p",
        "64",
        "-n",
        "0",
        "--no-warmup",
        "-dev",
        "SIM0",
        "--cpu-moe",
        "-nomb",
        "1",
        "-nopo",
        "0,1",
        "-o",
        "jsonl",
        "--progress",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (out, err) = bench(&args);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["no_op_offload"], 0);
    assert_eq!(rows[0]["cpu_moe"], true);
    let copied = |r: &serde_json::Value| r["h2d_bytes_experts_per_token"].as_f64().unwrap();
    assert!(copied(&rows[0]) > 0.0, "{}", rows[0]);
    assert_eq!(rows[1]["no_op_offload"], 1);
    assert_eq!(copied(&rows[1]), 0.0, "{}", rows[1]);
    // --progress: llama.cpp's lines
    for l in [
        "llama-bench: benchmark 1/2: starting",
        "llama-bench: benchmark 1/2: prompt run 1/1",
        "llama-bench: benchmark 2/2: starting",
    ] {
        assert!(err.contains(l), "{l}\n{err}");
    }
}

#[test]
fn help_and_list_devices() {
    let (out, _) = bench(&["--help".to_string()]);
    for f in [
        "-ncmoe",
        "-fa",
        "-ot",
        "-ctk",
        "-ctv",
        "-dev",
        "-nopo",
        "-nomb",
        "-pg",
        "-oe",
        "--progress",
        "--list-devices",
        "--delay",
        "-d, --n-depth",
    ] {
        assert!(out.contains(f), "--help lacks {f}:\n{out}");
    }
    let (out, _) = bench(&["--list-devices".to_string()]);
    assert!(
        out.starts_with("Available devices:") && out.contains("SIM0"),
        "{out}"
    );
}
