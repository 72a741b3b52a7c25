#!/usr/bin/env python3
"""Check one llama-bench output of ours against llama.cpp's for the same
command: parse both with Python's json / csv / sqlite3, take the schema
(field names, order, value types, value formats) from llama.cpp's file and
check ours against it, timings and machine-dependent values masked.

usage: bench_check.py json|jsonl|csv|sql LLAMA_CPP_OUT OURS_OUT
Prints what differs and exits 1, or exits 0.
"""
import csv
import io
import json
import re
import sqlite3
import sys

# values that depend on the machine, the build or the clock: compared by
# type and format only
MASKED = {
    "build_commit", "build_number", "cpu_info", "model_filename", "n_threads",
    "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns",
    "samples_ts", "repack",
}

FORMATS = [
    ("iso8601", re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")),
    ("real6", re.compile(r"^-?\d+\.\d{6}$")),
    ("hex", re.compile(r"^0x[0-9a-fA-F]+$")),
    ("int", re.compile(r"^-?\d+$")),
    ("real2", re.compile(r"^\d+\.\d{2}(/\d+\.\d{2})*$")),
]

errors = []


GIT_HASH = re.compile(r"^[0-9a-f]{7,40}$")


def fmt_class(s, key=None):
    # a short commit hash may be all digits (9203507): still a hash
    if key == "build_commit" and GIT_HASH.match(s):
        return "git-hash"
    for name, rx in FORMATS:
        if rx.match(s):
            return name
    return "text"


def jtype(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number" if not isinstance(v, int) else "int"
    if isinstance(v, list):
        return "list"
    return type(v).__name__


def check_json_rows(ref, ours, what):
    if len(ref) != len(ours):
        errors.append(f"{what}: {len(ours)} results, llama.cpp has {len(ref)}")
        return
    for i, (r, o) in enumerate(zip(ref, ours)):
        rk = list(r.keys())
        ok = [k for k in o.keys() if k in r]
        if rk != ok:
            errors.append(f"{what}[{i}]: fields {ok} != llama.cpp's {rk}")
        for k in rk:
            if k not in o:
                continue
            rv, ov = r[k], o[k]
            if k in ("samples_ns", "samples_ts"):
                if not isinstance(ov, list) or len(ov) != len(rv):
                    errors.append(f"{what}[{i}].{k}: {ov!r} is not a list of {len(rv)}")
                    continue
                want = int if k == "samples_ns" else (int, float)
                if not all(isinstance(x, want) and not isinstance(x, bool) for x in ov):
                    errors.append(f"{what}[{i}].{k}: {ov!r} has a value of the wrong type")
                continue
            if k in ("avg_ts", "stddev_ts"):
                if not isinstance(ov, float):
                    errors.append(f"{what}[{i}].{k}: {ov!r} is not a real")
                continue
            if jtype(rv) != jtype(ov):
                errors.append(f"{what}[{i}].{k}: type {jtype(ov)} ({ov!r}), llama.cpp: {jtype(rv)} ({rv!r})")
                continue
            if isinstance(rv, str) and fmt_class(rv, k) != fmt_class(ov, k):
                errors.append(f"{what}[{i}].{k}: format of {ov!r} is not that of {rv!r}")
            if k not in MASKED and rv != ov:
                errors.append(f"{what}[{i}].{k}: {ov!r}, llama.cpp: {rv!r}")


def check_text_rows(ref_names, ref_rows, names, rows, what):
    if names[: len(ref_names)] != ref_names:
        errors.append(f"{what}: columns {names} do not start with llama.cpp's {ref_names}")
        return
    if len(rows) != len(ref_rows):
        errors.append(f"{what}: {len(rows)} rows, llama.cpp has {len(ref_rows)}")
        return
    for i, (r, o) in enumerate(zip(ref_rows, rows)):
        for j, k in enumerate(ref_names):
            rv, ov = r[j], o[j]
            if fmt_class(rv, k) != fmt_class(ov, k):
                errors.append(f"{what}[{i}].{k}: format of {ov!r} is not that of {rv!r}")
            elif k not in MASKED and rv != ov:
                errors.append(f"{what}[{i}].{k}: {ov!r}, llama.cpp: {rv!r}")


def sql_db(text, what):
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(text)
    except sqlite3.Error as e:
        errors.append(f"{what}: sqlite3 cannot run it: {e}")
        return None
    return db


def main():
    fmt, ref_path, ours_path = sys.argv[1:4]
    ref = open(ref_path, encoding="utf-8").read()
    ours = open(ours_path, encoding="utf-8").read()
    if fmt == "json":
        check_json_rows(json.loads(ref), json.loads(ours), "json")
    elif fmt == "jsonl":
        r = [json.loads(l) for l in ref.splitlines() if l.strip()]
        o = [json.loads(l) for l in ours.splitlines() if l.strip()]
        check_json_rows(r, o, "jsonl")
    elif fmt == "csv":
        r = list(csv.reader(io.StringIO(ref)))
        o = list(csv.reader(io.StringIO(ours)))
        check_text_rows(r[0], r[1:], o[0], o[1:], "csv")
    elif fmt == "sql":
        rdb, odb = sql_db(ref, "llama.cpp sql"), sql_db(ours, "sql")
        if rdb and odb:
            rcols = [(c[1], c[2]) for c in rdb.execute("PRAGMA table_info(llama_bench)")]
            ocols = [(c[1], c[2]) for c in odb.execute("PRAGMA table_info(llama_bench)")]
            if ocols[: len(rcols)] != rcols:
                errors.append(f"sql: columns {ocols} do not start with llama.cpp's {rcols}")
            names = [c[0] for c in rcols]
            sel = "SELECT " + ", ".join(f"{n}, typeof({n})" for n in names) + " FROM llama_bench"
            rrows = rdb.execute(sel).fetchall()
            try:
                orows = odb.execute(sel).fetchall()
            except sqlite3.Error as e:
                errors.append(f"sql: {e}")
                orows = []
            if len(orows) != len(rrows):
                errors.append(f"sql: {len(orows)} rows, llama.cpp has {len(rrows)}")
            for i, (r, o) in enumerate(zip(rrows, orows)):
                for j, k in enumerate(names):
                    rv, rt, ov, ot = r[2 * j], r[2 * j + 1], o[2 * j], o[2 * j + 1]
                    if rt != ot:
                        errors.append(f"sql[{i}].{k}: stored as {ot} ({ov!r}), llama.cpp: {rt} ({rv!r})")
                    elif rt == "text" and fmt_class(rv, k) != fmt_class(ov, k):
                        errors.append(f"sql[{i}].{k}: format of {ov!r} is not that of {rv!r}")
                    elif k not in MASKED and rv != ov:
                        errors.append(f"sql[{i}].{k}: {ov!r}, llama.cpp: {rv!r}")
    else:
        errors.append(f"unknown format {fmt}")
    for e in errors:
        print(e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
