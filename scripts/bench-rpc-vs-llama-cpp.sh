#!/usr/bin/env bash
# Side by side with llama.cpp's own RPC client on the same stock workers:
# our llama-bench --rpc against llama.cpp's llama-bench --rpc, in one run.
#
# Usage: scripts/bench-rpc-vs-llama-cpp.sh [MODEL.gguf]
#
# Default model: the bench-shaped Q4_K_M file (scripts/make-bench-models.sh).
# Two stock `ggml-rpc-server -d CPU -t 1` workers on loopback; in front of
# each a counting proxy (ggml-rpc's examples/rpc-count-proxy), started anew
# for every llama-bench run, so the bytes and messages of both clients are
# counted the same way, at the wire.
#
# Two placements: "layers" (-dev RPC0/RPC1 -ngl 99: the layers split over
# the two workers) and "exps" (-dev RPC0 -ngl 0 -ot exps=RPC0: everything on
# the CPU but the experts, which stay in RPC0's memory and are multiplied
# there; llama.cpp spells that buffer RPC0[host:port]). For each, ROUNDS rounds alternate the engines (ours first in odd
# rounds): a timed run (pp$PP and tg$TG, $REPS repetitions) and two untimed
# runs of -n $N1 and -n $N2 (-p 0, -r 1, no warm-up), whose difference of
# wire traffic over N2 - N1 tokens is the traffic per generated token (the
# model load, the warm-up and the prompt cancel out).
#
# Environment: ROUNDS=3 PP=64 TG=32 REPS=3 N1=16 N2=48
#   OURS=target/release/llama-bench  LLAMA_CPP_DIR=... (llama-cpp-ref.sh's)
#   OUT=bench-rpc-vs-llama-cpp/<date>: runs.jsonl (one line per run) and table.md
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-bench-models/q3-4l-Q4_K_M.gguf}
ROUNDS=${ROUNDS:-3} PP=${PP:-64} TG=${TG:-32} REPS=${REPS:-3} N1=${N1:-16} N2=${N2:-48}
OURS=${OURS:-target/release/llama-bench}
LLAMA_CPP_DIR=${LLAMA_CPP_DIR:-$(../shared/tools/llama-cpp-ref.sh)}
THEIRS=$LLAMA_CPP_DIR/llama-bench
SERVER=$LLAMA_CPP_DIR/ggml-rpc-server
PROXY=target/release/examples/rpc-count-proxy
OUT=${OUT:-bench-rpc-vs-llama-cpp/$(date +%Y%m%d-%H%M%S)}
[ -f "$MODEL" ] || { echo "no model $MODEL (scripts/make-bench-models.sh makes it)" >&2; exit 2; }
[ -x "$OURS" ] || cargo build --release -p tools --bin llama-bench
[ -x "$PROXY" ] || cargo build --release -p ggml-rpc --features testkit --example rpc-count-proxy
mkdir -p "$OUT"
runs=$OUT/runs.jsonl
: >"$runs"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
workers=()
for i in 0 1; do
  port=$(free_port)
  "$SERVER" -d CPU -t 1 -H 127.0.0.1 -p "$port" >"$OUT/worker$i.log" 2>&1 &
  pids+=($!)
  workers+=("127.0.0.1:$port")
done
for w in "${workers[@]}"; do
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/${w%:*}/${w#*:}") 2>/dev/null && break; sleep 0.1; done
done

# run ENGINE PLACEMENT KIND ROUND ARGS...: one llama-bench run through fresh
# proxies; appends {engine, placement, kind, round, load, wire: [per worker], bench: [...]}
run() {
  local engine=$1 placement=$2 kind=$3 round=$4
  shift 4
  local eps=() fifos=() ppids=() i
  for i in 0 1; do
    fifos+=("$OUT/fifo.$i")
    rm -f "${fifos[$i]}" "$OUT/port.$i"
    mkfifo "${fifos[$i]}"
    "$PROXY" "${workers[$i]}" "$OUT/port.$i" <"${fifos[$i]}" >"$OUT/wire.$i" &
    ppids+=($!)
    exec {fd}>"${fifos[$i]}"
    eval "fd$i=$fd"
  done
  for i in 0 1; do
    for _ in $(seq 100); do [ -s "$OUT/port.$i" ] && break; sleep 0.05; done
    eps+=("$(cat "$OUT/port.$i")")
  done
  local bin=$OURS
  [ "$engine" = llama.cpp ] && bin=$THEIRS
  # llama.cpp names a worker's buffers RPC<device on that worker>[host:port]
  local args=() a
  for a in "$@"; do args+=("${a//@EP0@/${eps[0]}}"); done
  set -- "${args[@]}"
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$bin" -m "$MODEL" --rpc "${eps[0]},${eps[1]}" -o json "$@" >"$OUT/bench.json" 2>"$OUT/bench.err" ||
    { tail -5 "$OUT/bench.err" >&2; exit 1; }
  eval "exec $fd0>&- $fd1>&-"
  wait "${ppids[@]}"
  python3 - "$engine" "$placement" "$kind" "$round" "$load" "$OUT/wire.0" "$OUT/wire.1" "$OUT/bench.json" >>"$runs" <<'PY'
import json, sys
e, p, k, r, load, w0, w1, b = sys.argv[1:]
wire = [json.load(open(w)) for w in (w0, w1)]
bench = [{"test": f"pp{t['n_prompt']}" if t["n_gen"] == 0 else f"tg{t['n_gen']}", "avg_ts": t["avg_ts"]} for t in json.load(open(b))]
print(json.dumps({"engine": e, "placement": p, "kind": k, "round": int(r), "load": float(load), "wire": wire, "bench": bench}))
PY
}

for round in $(seq "$ROUNDS"); do
  order="ours llama.cpp"
  [ $((round % 2)) = 0 ] && order="llama.cpp ours"
  for placement in layers exps; do
    for engine in $order; do
      if [ "$placement" = layers ]; then
        place=(-dev RPC0/RPC1 -ngl 99)
      elif [ "$engine" = ours ]; then
        place=(-dev RPC0 -ngl 0 -ot exps=RPC0)
      else
        place=(-dev RPC0 -ngl 0 -ot "exps=RPC0[@EP0@]")
      fi
      echo "round $round, $placement, $engine" >&2
      run "$engine" "$placement" timed "$round" "${place[@]}" -p "$PP" -n "$TG" -r "$REPS"
      run "$engine" "$placement" n1 "$round" "${place[@]}" -p 0 -n "$N1" -r 1 --no-warmup
      run "$engine" "$placement" n2 "$round" "${place[@]}" -p 0 -n "$N2" -r 1 --no-warmup
    done
  done
done

python3 - "$runs" "$N1" "$N2" "$PP" "$TG" >"$OUT/table.md" <<'PY'
import json, sys, statistics as st
runs = [json.loads(l) for l in open(sys.argv[1])]
n1, n2, pp, tg = map(int, sys.argv[2:])
def tot(r, key): return sum(w[key] for w in r["wire"])
def per_token(e, p, key):
    v = []
    for rd in sorted({r["round"] for r in runs}):
        a = [r for r in runs if (r["engine"], r["placement"], r["kind"], r["round"]) == (e, p, "n1", rd)]
        b = [r for r in runs if (r["engine"], r["placement"], r["kind"], r["round"]) == (e, p, "n2", rd)]
        if a and b:
            v.append((tot(b[0], key) - tot(a[0], key)) / (n2 - n1))
    return st.median(v) if v else float("nan")
def ts(e, p, test):
    v = [t["avg_ts"] for r in runs if (r["engine"], r["placement"], r["kind"]) == (e, p, "timed") for t in r["bench"] if t["test"] == test]
    return v
print(f"| placement | test | ours t/s (median of rounds) | llama.cpp t/s | ratio ours / llama.cpp | per round (ours / llama.cpp) |")
print("| --- | --- | ---: | ---: | ---: | --- |")
for p in ("layers", "exps"):
    for test in (f"pp{pp}", f"tg{tg}"):
        o, l = ts("ours", p, test), ts("llama.cpp", p, test)
        rounds = ", ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(o, l))
        print(f"| {p} | {test} | {st.median(o):.2f} | {st.median(l):.2f} | {st.median(o) / st.median(l):.2f} | {rounds} |")
print()
print("| placement | engine | bytes sent / token | bytes received / token | messages sent / token | messages received / token | round trips / token |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for p in ("layers", "exps"):
    for e in ("ours", "llama.cpp"):
        f = [per_token(e, p, k) for k in ("bytes_sent", "bytes_received", "messages_sent", "messages_received", "round_trips")]
        print(f"| {p} | {e} | {f[0]:.0f} | {f[1]:.0f} | {f[2]:.1f} | {f[3]:.1f} | {f[4]:.1f} |")
loads = [r["load"] for r in runs]
print()
print(f"load average (1 min) before the runs: {min(loads):.2f} to {max(loads):.2f}")
PY
cat "$OUT/table.md"
