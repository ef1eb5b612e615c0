#!/usr/bin/env python3
"""Load test of `mega serve` on 127.0.0.1 (docs/serving.md): bounded in requests and in time.

  python3 scripts/bench_serve.py --mega build/mega --model RUN [--parallel 1,4] [--clients 8]
                                 [--requests 4] [--max-tokens 64] [--deadline 120]

For each --parallel value it starts a server on a free port of 127.0.0.1, lets --clients threads
each send --requests streamed completions (one after another, seeds differ), and prints: the
aggregate generated tokens per second (completion tokens of all requests / wall time), the time to
the first token (p50, p99) and the time between two streamed events (p50, p99; with a byte model
an event carries one or a few tokens), then stops the server with SIGTERM. Only the standard
library; nothing leaves 127.0.0.1. The whole run stops at --deadline seconds.
"""
import argparse, http.client, json, os, re, signal, subprocess, sys, threading, time


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def one_request(port, seed, max_tokens, deadline):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=max(1, deadline - time.time()))
    body = json.dumps({"prompt": "The ", "max_tokens": max_tokens, "temperature": 0.8, "seed": seed, "stream": True})
    t0 = time.time()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        return None
    first, last, gaps, tokens, buf = None, None, [], 0, b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            o = json.loads(ev[6:])
            now = time.time()
            if o["choices"][0]["text"]:
                if first is None:
                    first = now - t0
                elif last is not None:
                    gaps.append(now - last)
                last = now
            if "usage" in o:
                tokens = o["usage"]["completion_tokens"]
    c.close()
    return first, gaps, tokens


def run(args, parallel):
    srv = subprocess.Popen([args.mega, "serve", "--model", args.model, "--port", "0", "--parallel", str(parallel),
                            "--threads", str(args.threads), "--max-queue", "64"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    try:
        line = srv.stderr.readline()
        m = re.search(r"127\.0\.0\.1:(\d+)/", line)
        if not m:
            raise SystemExit("the server did not start: " + line)
        port = int(m.group(1))
        deadline = time.time() + args.deadline
        res, lock = [], threading.Lock()

        def client(k):
            for i in range(args.requests):
                if time.time() > deadline:
                    return
                r = one_request(port, 1000 * k + i, args.max_tokens, deadline)
                with lock:
                    res.append(r)

        t0 = time.time()
        th = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        for t in th:
            t.start()
        for t in th:
            t.join(max(0.1, deadline - time.time()))
        wall = time.time() - t0
        ok = [r for r in res if r]
        ttft = [r[0] for r in ok if r[0] is not None]
        gaps = [g for r in ok for g in r[1]]
        tokens = sum(r[2] for r in ok)
        return dict(parallel=parallel, requests=len(ok), failed=len(res) - len(ok), tokens=tokens, wall=wall,
                    tok_s=tokens / wall, ttft50=pct(ttft, 50), ttft99=pct(ttft, 99), gap50=pct(gaps, 50), gap99=pct(gaps, 99))
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(10)
        except subprocess.TimeoutExpired:
            srv.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mega", default="build/mega")
    ap.add_argument("--model", required=True)
    ap.add_argument("--parallel", default="1,4")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="the server's --threads")
    ap.add_argument("--deadline", type=float, default=120, help="seconds per --parallel value at most")
    args = ap.parse_args()
    print("%d clients x %d streamed requests of %d tokens, model %s" % (args.clients, args.requests, args.max_tokens, args.model))
    print("%-9s %9s %7s %9s %10s %10s %10s %10s" % ("parallel", "requests", "tok/s", "wall s", "TTFT p50", "TTFT p99",
                                                    "gap p50", "gap p99"))
    for p in [int(x) for x in args.parallel.split(",")]:
        r = run(args, p)
        print("%-9d %6d/%-2d %7.0f %9.2f %8.1fms %8.1fms %8.2fms %8.2fms" % (
            r["parallel"], r["requests"], r["requests"] + r["failed"], r["tok_s"], r["wall"], 1e3 * r["ttft50"],
            1e3 * r["ttft99"], 1e3 * r["gap50"], 1e3 * r["gap99"]))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
