#!/usr/bin/env python3
"""Load measurement of llama-server on loopback (standard library only).

Starts target/release/llama-server on a free 127.0.0.1 port (or uses
--base URL), runs N_SINGLE requests one at a time (single-stream tokens/s),
then REQUESTS requests from CLIENTS concurrent clients, and prints p50/p99
latency, aggregate generated tokens/s and the single-stream tokens/s.
Bounded: a fixed number of requests, each with a timeout; stops by itself.

  python3 server/scripts/load.py [--requests 200] [--clients 16] [--max-tokens 32] [-- SERVER FLAGS]
"""
import argparse, json, os, subprocess, sys, threading, time, urllib.request

def post(base, body, timeout):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        v = json.loads(r.read())
    return time.perf_counter() - t0, v["usage"]["completion_tokens"]

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--single", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("server_flags", nargs="*")
    a = ap.parse_args()
    proc = None
    base = a.base
    if base is None:
        exe = os.path.join(os.path.dirname(__file__), "../../target/release/llama-server")
        flags = a.server_flags or ["-np", "16", "-c", "8192"]
        proc = subprocess.Popen([exe, "--host", "127.0.0.1", "--port", "0"] + flags,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        for line in proc.stderr:
            if line.startswith("server listening on "):
                base = line.split()[-1]
                break
            if time.time() > deadline:
                sys.exit("server did not start")
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    try:
        body = lambda i: {"prompt": f"Request {i}: once upon a time", "max_tokens": a.max_tokens,
                          "temperature": 0.8, "seed": i}
        # single stream
        t0 = time.perf_counter(); toks = 0
        for i in range(a.single):
            _, n = post(base, body(10_000 + i), a.timeout); toks += n
        single_tps = toks / (time.perf_counter() - t0)
        # concurrent
        lat, errors, total = [], [], [0]
        lock = threading.Lock(); nxt = [0]
        def client():
            while True:
                with lock:
                    if nxt[0] >= a.requests: return
                    i = nxt[0]; nxt[0] += 1
                try:
                    dt, n = post(base, body(i), a.timeout)
                    with lock: lat.append(dt); total[0] += n
                except Exception as e:  # counted, reported
                    with lock: errors.append(repr(e))
        t0 = time.perf_counter()
        ths = [threading.Thread(target=client) for _ in range(a.clients)]
        for t in ths: t.start()
        for t in ths: t.join()
        wall = time.perf_counter() - t0
        print(f"requests: {len(lat)} completed, {len(errors)} failed of {a.requests} ({a.clients} concurrent clients, max_tokens {a.max_tokens})")
        for e in errors[:5]: print("  error:", e)
        print(f"latency: p50 {pct(lat, 50)*1000:.0f} ms, p99 {pct(lat, 99)*1000:.0f} ms")
        print(f"aggregate: {total[0]} tokens in {wall:.2f} s = {total[0]/wall:.1f} tokens/s")
        print(f"single stream: {single_tps:.1f} tokens/s ({a.single} requests one at a time)")
        print(f"speedup: {total[0]/wall/single_tps:.2f}x")
        if errors or len(lat) != a.requests: sys.exit(1)
    finally:
        if proc: proc.terminate(); proc.wait(timeout=10)

if __name__ == "__main__":
    main()
