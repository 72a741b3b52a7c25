#!/usr/bin/env bash
# A model larger than the memory it may use, side by side with llama.cpp
# (issue 48): both engines in a memory cgroup whose limit is a fraction of
# the model file, the page cache dropped before every run, CPU only.
#
# Usage (as root: it makes a cgroup and drops the page cache):
#   scripts/bench-host-cache-vs-llama-cpp.sh [MODEL.gguf]
#
# Without a model it takes the Q4_K_M bench file of scripts/make-bench-models.sh
# (Qwen3-30B-A3B-shaped, 4 layers, 1.41 GiB).
#
# ROUNDS rounds alternate the engines (ours first in odd rounds, llama.cpp
# first in even ones). In each round, each engine runs tg$TG and pp$PP, each
# test its own process (llama-bench -r $REPS), each after `sync; echo 3 >
# /proc/sys/vm/drop_caches`, inside the cgroup; and `dd iflag=direct bs=4M`
# reads the whole file once (after dropping the cache) for the disk's rate in
# this run. Ours is our llama-bench with its defaults (no flag beyond -m and
# the test: a CPU-only file that does not fit turns the host expert cache on,
# as llama-run's default does), plus `--moe-host-cache-mib default` only to
# have its host-cache fields written; llama.cpp is its llama-bench with
# `--repack 0` (weights left in its mmap; its default repacks into anonymous
# memory, which the cgroup kills: THEIRS_SETTINGS="repack=0 repack=1" runs
# both).
#
# Environment:
#   ROUNDS=3  THREADS=2  PP=512  TG=64  REPS=1
#   LIMIT_DIV=2          cgroup limit = file size / LIMIT_DIV (4: the "4x" run)
#   THEIRS_SETTINGS="repack=0"
#   ENGINES="ours llama.cpp"   (ENGINES=ours: ours alone, e.g. for LIMIT_DIV=4)
#   OURS=target/release/llama-bench   LLAMA_CPP_DIR=... (default: what
#                        ../shared/tools/llama-cpp-ref.sh prints)
#   CGROUP=bench-host-cache   the cgroup's name (v1 memory controller, or v2)
#   OUT=bench-host-cache/<date>
#
# Results: $OUT/runs.jsonl has one JSON object a line per run: {"engine",
# "setting", "round", "test" ("tg64" | "pp512"), "avg_ts" (llama-bench's),
# "rc" (exit status; 137 = killed), "oom_kills" (the cgroup's oom_kill count
# during the run), "peak_bytes" (the cgroup's peak usage, page cache
# included: v1 memory.max_usage_in_bytes, v2 memory.peak), "peak_rss_kib"
# (the process's maximum resident set, /usr/bin/time's %M), "limit_bytes", "read_bytes"
# (/proc/PID/io of the process and its children, model load and warm-up
# included), "tokens" (tokens the process computed: warm-up and repetitions),
# "read_bytes_per_token", ours also "host_hit_rate",
# "host_disk_bytes_per_token" (its own counter, timed repetitions only),
# "host_read_rate" (bytes/s over the wall time of its batches of reads),
# "host_read_p50_us", "host_read_p99_us"; "load_before" (1-minute load)}, and
# one {"dd_bytes_per_s"} line per round. $OUT/table.md (also printed): per test,
# each engine's avg_ts per round and median, the ratio of the medians, bytes
# from disk per token, our read rate against dd's, peak memory, kills.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h | --help) sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
if [ $# -eq 0 ]; then
  M=$(scripts/make-bench-models.sh | head -1) || exit 1
else
  M=$1
fi
[ -f "$M" ] || { echo "bench-host-cache: no model file '$M'" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench-host-cache: needs root (a memory cgroup, drop_caches)" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-64}
REPS=${REPS:-1}
LIMIT_DIV=${LIMIT_DIV:-2}
THEIRS_SETTINGS=${THEIRS_SETTINGS:-repack=0}
ENGINES=${ENGINES:-"ours llama.cpp"}
OURS=${OURS:-target/release/llama-bench}
CGROUP=${CGROUP:-bench-host-cache}
OUT=${OUT:-bench-host-cache/$(date -u +%Y%m%dT%H%M%SZ)}
if [ ! -x "$OURS" ]; then
  echo "bench-host-cache: building our llama-bench" >&2
  cargo build --release -p tools --bin llama-bench >&2
fi
THEIRS=
case " $ENGINES " in *" llama.cpp "*)
  if [ -z "${LLAMA_CPP_DIR:-}" ]; then
    ref=${LLAMA_CPP_REF:-../shared/tools/llama-cpp-ref.sh}
    [ -x "$ref" ] || { echo "bench-host-cache: no $ref; set LLAMA_CPP_DIR" >&2; exit 2; }
    LLAMA_CPP_DIR=$("$ref")
  fi
  THEIRS=$LLAMA_CPP_DIR/llama-bench
  [ -x "$THEIRS" ] || { echo "bench-host-cache: no llama-bench in '$LLAMA_CPP_DIR'" >&2; exit 2; }
  ;;
esac
mkdir -p "$OUT"
file_bytes=$(stat -c %s "$M")
limit=$((file_bytes / LIMIT_DIV))

# the cgroup: v1 memory controller or v2
if [ -d /sys/fs/cgroup/memory ]; then
  CG=/sys/fs/cgroup/memory/$CGROUP
  mkdir -p "$CG"
  echo "$limit" >"$CG/memory.limit_in_bytes"
  peak_file=$CG/memory.max_usage_in_bytes
  reset_peak() { echo 0 >"$peak_file"; }
  oom_kills() { awk '$1 == "oom_kill" { print $2 }' "$CG/memory.oom_control"; }
else
  CG=/sys/fs/cgroup/$CGROUP
  mkdir -p "$CG"
  echo "$limit" >"$CG/memory.max"
  peak_file=$CG/memory.peak
  reset_peak() { echo reset >"$peak_file" 2>/dev/null || true; }
  oom_kills() { awk '$1 == "oom_kill" { print $2 }' "$CG/memory.events"; }
fi
echo "bench-host-cache: $M ($file_bytes bytes), cgroup $CG limit $limit bytes (1/$LIMIT_DIV), -t $THREADS, pp$PP tg$TG, $ROUNDS rounds; load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# run CMD... in the cgroup; stdout to $1, stderr to $2; prints "rc read_bytes"
in_cgroup() {
  local out=$1 err=$2
  shift 2
  # the child is reaped by this bash before it reads its own io counters,
  # so they include the child's reads
  bash -c 'echo $$ >"$1/cgroup.procs"; shift; out=$1 err=$2; shift 2
    "$@" >"$out" 2>"$err"; rc=$?
    echo "$rc $(awk "\$1 == \"read_bytes:\" { print \$2 }" /proc/$$/io)"' _ "$CG" "$out" "$err" "$@"
}

json_num() { # FILE KEY: the first number of "KEY": in FILE (0 if absent)
  local v
  v=$({ grep -o "\"$2\": *[0-9.e+-]*" "$1" || true; } | head -1 | sed 's/.*: *//')
  echo "${v:-0}"
}

RUNS=$OUT/runs.jsonl
: >"$RUNS"
run_one() { # ENGINE SETTING ROUND TEST
  local engine=$1 setting=$2 round=$3 test=$4 np=0 ng=0 tokens
  case $test in tg*) ng=$TG; tokens=$((REPS * TG + 1)) ;; pp*) np=$PP; tokens=$(((REPS + 1) * PP)) ;; esac
  local tag="$OUT/$engine-$setting-r$round-$test"
  local cmd
  if [ "$engine" = ours ]; then
    cmd=("$OURS" -m "$M" -t "$THREADS" -p "$np" -n "$ng" -r "$REPS" -o jsonl --moe-host-cache-mib default)
  else
    cmd=("$THEIRS" -m "$M" -t "$THREADS" -p "$np" -n "$ng" -r "$REPS" -o jsonl --repack "${setting#repack=}")
  fi
  drop_caches
  reset_peak
  local load k0 rcio rc rb k1 peak
  load=$(cut -d' ' -f1 /proc/loadavg)
  k0=$(oom_kills)
  rcio=$(in_cgroup "$tag.json" "$tag.err" /usr/bin/time -f %M -o "$tag.rss" "${cmd[@]}")
  rc=${rcio%% *}
  rb=${rcio##* }
  k1=$(oom_kills)
  peak=$(cat "$peak_file" 2>/dev/null || echo 0)
  local rss
  rss=$({ grep -E '^[0-9]+$' "$tag.rss" 2>/dev/null || echo 0; } | tail -1)
  local ts host=""
  ts=$(json_num "$tag.json" avg_ts)
  if [ "$engine" = ours ]; then
    host=$(printf ', "host_hit_rate": %s, "host_disk_bytes_per_token": %s, "host_read_rate": %s, "host_read_p50_us": %s, "host_read_p99_us": %s' \
      "$(json_num "$tag.json" moe_host_cache_hit_rate)" "$(json_num "$tag.json" moe_host_cache_disk_bytes_per_token)" \
      "$(json_num "$tag.json" moe_host_cache_disk_read_rate)" "$(json_num "$tag.json" moe_host_cache_read_p50_us)" \
      "$(json_num "$tag.json" moe_host_cache_read_p99_us)")
  fi
  printf '{"engine": "%s", "setting": "%s", "round": %d, "test": "%s", "avg_ts": %s, "rc": %d, "oom_kills": %d, "peak_bytes": %d, "peak_rss_kib": %d, "limit_bytes": %d, "read_bytes": %d, "tokens": %d, "read_bytes_per_token": %.0f%s, "load_before": %s}\n' \
    "$engine" "$setting" "$round" "$test" "${ts:-0}" "$rc" "$((k1 - k0))" "$peak" "$rss" "$limit" "${rb:-0}" "$tokens" \
    "$(echo "${rb:-0} / $tokens" | bc -l)" "$host" "$load" | tee -a "$RUNS" >&2
}

dd_rate() {
  drop_caches
  local line
  line=$(dd if="$M" of=/dev/null bs=4M iflag=direct 2>&1 | tail -1)
  # "N bytes (...) copied, S s, R GB/s"
  local bytes secs
  bytes=$(echo "$line" | awk '{ print $1 }')
  secs=$(echo "$line" | sed 's/.*copied, \([0-9.e+-]*\) s.*/\1/')
  printf '{"round": %d, "dd_bytes_per_s": %.0f, "dd": "%s"}\n' "$1" "$(echo "$bytes / $secs" | bc -l)" "$line" | tee -a "$RUNS" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  order=$ENGINES
  if [ $((round % 2)) = 0 ]; then order=$(echo "$ENGINES" | tr ' ' '\n' | tac | tr '\n' ' '); fi
  dd_rate "$round"
  for engine in $order; do
    for test in "tg$TG" "pp$PP"; do
      if [ "$engine" = ours ]; then
        run_one ours default "$round" "$test"
      else
        for s in $THEIRS_SETTINGS; do run_one llama.cpp "$s" "$round" "$test"; done
      fi
    done
  done
done
echo "bench-host-cache: load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$RUNS" "$M" "$limit" "$file_bytes" "$THREADS" >"$OUT/table.md" <<'EOF'
import json, statistics, sys
runs, model, limit, fbytes, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rows = [json.loads(l) for l in open(runs) if l.strip()]
dd = [r["dd_bytes_per_s"] for r in rows if "dd_bytes_per_s" in r]
runs = [r for r in rows if "engine" in r]
med = lambda v: statistics.median(v) if v else 0.0
print(f"model {model} ({fbytes} bytes), cgroup limit {limit} bytes = {limit/1048576:.0f} MiB ({fbytes/limit:.2f}x smaller than the file), -t {threads}, page cache dropped before each run")
print(f"dd iflag=direct bs=4M of the file, per round: {', '.join(f'{x/1e6:.0f} MB/s' for x in dd)}; median {med(dd)/1e6:.0f} MB/s\n")
print("| engine, setting | test | t/s per round (load) | median t/s | disk bytes/token (process) | ours: host hit rate, disk bytes/token, read rate (vs dd) | peak cgroup MiB | peak RSS MiB | killed |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
tests = sorted({r["test"] for r in runs}, key=lambda t: (t[:2] != "tg", t))
meds = {}
for t in tests:
    for key in sorted({(r["engine"], r["setting"]) for r in runs}, key=lambda k: (k[0] != "ours", k)):
        rs = [r for r in runs if r["test"] == t and (r["engine"], r["setting"]) == key]
        ok = [r for r in rs if r["rc"] == 0]
        m = med([r["avg_ts"] for r in ok])
        meds[(t,) + key] = m
        per = ", ".join(f"{r['avg_ts']:.2f} ({r['load_before']})" if r["rc"] == 0 else f"rc {r['rc']}" for r in rs)
        bpt = med([r["read_bytes_per_token"] for r in ok])
        host = "-"
        if key[0] == "ours" and ok:
            rate = med([r["host_read_rate"] for r in ok])
            host = (f"{med([r['host_hit_rate'] for r in ok]):.3f}, {med([r['host_disk_bytes_per_token'] for r in ok])/1e6:.2f} MB, "
                    f"{rate/1e6:.0f} MB/s ({rate/med(dd):.0%} of dd)" if dd else "")
        peak = max((r["peak_bytes"] for r in rs), default=0) / 1048576
        rss = max((r["peak_rss_kib"] for r in rs), default=0) / 1024
        kills = sum(r["oom_kills"] for r in rs) + sum(1 for r in rs if r["rc"] == 137)
        print(f"| {key[0]} {key[1]} | {t} | {per} | {m:.2f} | {bpt/1e6:.2f} MB | {host} | {peak:.0f} | {rss:.0f} | {kills} |")
print()
for t in tests:
    o = meds.get((t, "ours", "default"), 0)
    for k, v in meds.items():
        if k[0] == t and k[1] == "llama.cpp" and v > 0:
            print(f"{t}: ours / llama.cpp {k[2]} = {o / v:.1f}x")
EOF
cat "$OUT/table.md"
