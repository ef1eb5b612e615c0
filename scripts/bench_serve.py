#!/usr/bin/env python3
"""Load test of `mega serve` on 127.0.0.1 (docs/serving.md): bounded in requests and in time.

  python3 scripts/bench_serve.py --mega build/mega --model RUN [--parallel 1,4] [--clients 1,4,16]
                                 [--requests 4] [--max-tokens 64] [--deadline 120]

First `mega generate` on the same model gives the single-stream rate. Then for each --parallel
value and each number of clients it starts a server on a free port of 127.0.0.1, lets the client
threads each send --requests streamed completions (one after another, seeds differ), and prints: the
aggregate generated tokens per second (completion tokens of all requests / wall time) and per second
of the server's CPU time (its user + system time over the run, from /proc: on a shared machine the
wall rate follows the share of the cores the server gets, this one does not), the time to
the first token (p50, p99) and the time between two arrivals of streamed text (p50, p99, max;
events read together count as one arrival; with a byte model an event carries one or a few
tokens), then stops the server with SIGTERM. Only the standard
library; nothing leaves 127.0.0.1. Each run stops at --deadline seconds. With 1 and 16 clients
measured, it says whether the targets hold: 16 clients give >= 4x one client's tokens/s, their
p99 gap is <= 3x one client's, one client gets >= 95% of mega generate's rate.

--join-prompt N: in each run, once the clients stream, one more request with a prompt of N bytes
joins (chunked prefill, docs/serving.md): the table's "gap max" column is then the longest time
between two events of the other clients, whose steps the long prompt's feeding may delay.
"""
import argparse, http.client, json, os, re, resource, signal, subprocess, sys, threading, time


def cpu_seconds(pid):
    """user + system CPU seconds of a process and its threads so far (Linux /proc; nan elsewhere)"""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def one_request(port, seed, max_tokens, deadline, prompt="The "):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=max(1, deadline - time.time()))
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.8, "seed": seed, "stream": True})
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
        now, text = time.time(), False
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            o = json.loads(ev[6:])
            text = text or bool(o["choices"][0]["text"])
            if "usage" in o:
                tokens = o["usage"]["completion_tokens"]
        if text:  # events read together arrived together: one arrival
            if first is None:
                first = now - t0
            elif last is not None:
                gaps.append(now - last)
            last = now
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

        def joiner():  # a long prompt joins while the others stream (not counted in the rates)
            time.sleep(0.3)
            words = ("the cat %d sees the bird %d. " % (i % 7, i % 11) for i in range(10 ** 6))
            text = ""
            while len(text) < args.join_prompt:
                text += next(words)
            one_request(port, 7, 8, deadline, text[:args.join_prompt])

        t0, c0 = time.time(), cpu_seconds(srv.pid)
        th = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        for t in th:
            t.start()
        if args.join_prompt:
            threading.Thread(target=joiner, daemon=True).start()
        for t in th:
            t.join(max(0.1, deadline - time.time()))
        wall, cpu = time.time() - t0, cpu_seconds(srv.pid) - c0
        ok = [r for r in res if r]
        ttft = [r[0] for r in ok if r[0] is not None]
        gaps = [g for r in ok for g in r[1]]
        tokens = sum(r[2] for r in ok)
        return dict(parallel=parallel, requests=len(ok), failed=len(res) - len(ok), tokens=tokens, wall=wall,
                    tok_s=tokens / wall, tok_cpu=tokens / cpu if cpu > 0 else float("nan"), ttft50=pct(ttft, 50), ttft99=pct(ttft, 99), gap50=pct(gaps, 50), gap99=pct(gaps, 99),
                    gapmax=max(gaps) if gaps else float("nan"))
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(10)
        except subprocess.TimeoutExpired:
            srv.kill()


def generate_rate(args):
    """single-stream tokens/s of `mega generate` on the same model and threads (its own report), and
    its tokens per CPU second (the whole run's, loading included)"""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([args.mega, "generate", "--model", args.model, "--prompt", "The ", "--tokens", str(4 * args.max_tokens),
                        "--threads", str(args.threads), "--seed", "1"], capture_output=True, text=True, errors="replace",
                       timeout=args.deadline)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    m = re.search(r"\(([0-9.]+) tok/s\)", r.stderr)
    return (float(m.group(1)) if m else float("nan")), (4 * args.max_tokens / cpu if cpu > 0 else float("nan"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mega", default="build/mega")
    ap.add_argument("--model", required=True)
    ap.add_argument("--parallel", default="1,4", help="comma-separated --parallel values")
    ap.add_argument("--clients", default="8", help="comma-separated numbers of concurrent clients")
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="the server's --threads")
    ap.add_argument("--deadline", type=float, default=120, help="seconds per run at most")
    ap.add_argument("--join-prompt", type=int, default=0, help="bytes of a prompt that joins each run once it streams")
    args = ap.parse_args()
    gen, gen_cpu = generate_rate(args)
    print("model %s, %d streamed requests of %d tokens per client; mega generate alone: %.0f tok/s, %.0f per CPU second" % (
        args.model, args.requests, args.max_tokens, gen, gen_cpu))
    print("%-9s %8s %9s %7s %9s %9s %10s %10s %10s %10s %10s" % ("parallel", "clients", "requests", "tok/s", "tok/CPU-s", "wall s",
                                                                  "TTFT p50", "TTFT p99", "gap p50", "gap p99", "gap max"))
    res = {}
    for p in [int(x) for x in args.parallel.split(",")]:
        for nc in [int(x) for x in args.clients.split(",")]:
            args_c = argparse.Namespace(**vars(args))
            args_c.clients = nc
            r = run(args_c, p)
            res[(p, nc)] = r
            print("%-9d %8d %6d/%-2d %7.0f %9.0f %9.2f %8.1fms %8.1fms %8.2fms %8.2fms %8.1fms" % (
                p, nc, r["requests"], r["requests"] + r["failed"], r["tok_s"], r["tok_cpu"], r["wall"], 1e3 * r["ttft50"],
                1e3 * r["ttft99"], 1e3 * r["gap50"], 1e3 * r["gap99"], 1e3 * r["gapmax"]))
            sys.stdout.flush()
    # the targets of docs/serving.md, where the runs measured them
    for p in sorted({k[0] for k in res}):
        one, crowd = res.get((p, 1)), res.get((p, 16))
        if one and crowd:
            print("parallel %d: 16 clients give %.1fx one client's tokens/s (target >= 4: %s; per CPU second %.1fx); p99 gap "
                  "%.1fx one client's (target <= 3: %s)" % (
                      p, crowd["tok_s"] / one["tok_s"], "met" if crowd["tok_s"] >= 4 * one["tok_s"] else "not met",
                      crowd["tok_cpu"] / one["tok_cpu"], crowd["gap99"] / one["gap99"],
                      "met" if crowd["gap99"] <= 3 * one["gap99"] else "not met"))
        if one:
            print("parallel %d: one client at %.0f%% of mega generate's rate (target >= 95%%: %s; per CPU second %.0f%%)" % (
                p, 100 * one["tok_s"] / gen, "met" if one["tok_s"] >= 0.95 * gen else "not met", 100 * one["tok_cpu"] / gen_cpu))


if __name__ == "__main__":
    main()
