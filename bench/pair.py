#!/usr/bin/env python3
"""Paired timing of one workload: our `mega bench` and the PyTorch peer (bench/peer/peer.py), each
warm in its own process, take turns step by step, so that the two halves of every ratio are
measured seconds apart instead of minutes (make bench; docs/performance.md, "Method").

    python3 bench/pair.py --mega BUILD/mega --out DIR [--threads N] [--warmup W] [--rounds R]
                          [--budget S] [--cotenant] WORKLOAD

Both processes are started one after the other and run their warm-up steps alone. Then, round by
round, one timed step of each side (ours first in odd rounds, the peer first in even ones, so a
drift of the machine favours neither); with --cotenant, the same round then runs one more timed
step of each side while a co-tenant (a plain shell spin loop at normal priority, like a
neighbour's job) is busy. Rounds go on until R rounds, or until the slower side's quiet timed
steps add up to S seconds (at least one round).

The timed steps are handed out through two pipes per side (MEGA_BENCH_TURNS, the protocol of
tools/bench.c step_go and peer.py Turns). Each side still reports its own record (peak memory is
the whole process's); this driver replaces its timing keys with the median of its quiet (or
co-tenant) steps and adds "step_ms" (the timed steps of that condition, in round order), then
appends one JSON line per side and condition to DIR/ours.jsonl, DIR/peer.jsonl and, with
--cotenant, DIR/ours_ct.jsonl and DIR/peer_ct.jsonl. The report (peer.py --report) takes a
speedup as the median of the per-round ratios.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "peer", "peer.py")


class Side:
    """One side's `bench --json` process, driven step by step through its turn pipes."""

    def __init__(self, name, cmd, ld_path=""):
        self.name, self.error = name, None
        go_r, self.go_w = os.pipe()  # driver -> side: "go" / "stop"
        ev_r, ev_w = os.pipe()  # side -> driver: "ready", "done MS"
        env = dict(os.environ, MEGA_BENCH_TURNS=f"{go_r},{ev_w}")
        if ld_path:
            env["LD_LIBRARY_PATH"] = ld_path
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, pass_fds=(go_r, ev_w))
        os.close(go_r)
        os.close(ev_w)
        self.events = os.fdopen(ev_r, "r")
        self.ready, self.last_ms = False, float("nan")

    def wait_ready(self):
        """Wait until the side asks for its next timed step (ready) or has ended (its --repeat
        reached, or it failed: an error only if a step is asked of it later)."""
        line = self.events.readline().split()
        self.ready = len(line) == 2 and line[0] == "ready"
        if self.ready:
            self.last_ms = float(line[1])
        elif line:
            self.error = f"unexpected message {' '.join(line)!r}"

    def step(self, cmd="go"):
        """Run one step, timed ("go") or not ("warm"); its time in ms, or None."""
        if not self.ready:
            self.error = self.error or "ended before its timed steps (it failed: its error is above)"
            return None
        self.ready = False
        try:
            os.write(self.go_w, cmd.encode() + b"\n")
        except OSError as e:
            self.error = f"cannot reach it: {e}"
            return None
        line = self.events.readline().split()
        if len(line) != 2 or line[0] != "done":
            self.error = "ended during a timed step"
            return None
        return float(line[1])

    def finish(self):
        """End the timing (if it still waits for a turn) and collect its JSON record."""
        try:
            os.write(self.go_w, b"stop\n")
        except OSError:
            pass
        os.close(self.go_w)
        out = self.proc.stdout.read().decode(errors="replace")
        self.proc.wait()
        self.events.close()
        rec = None
        for line in out.splitlines():
            if line.startswith("{"):
                try:
                    rec = json.loads(line)
                except ValueError:
                    pass
        return rec


def condition_record(rec, steps, error):
    """The side's record with its timing keys from one condition's timed steps."""
    rec = dict(rec or {"status": "error", "note": "no record"})
    if error and not steps and rec.get("status") == "ok":
        rec.update({"status": "error", "note": (rec.get("note") or "") + f" (paired timing: {error})"})
    if rec.get("status") != "ok" or not steps:
        for k in ("ms_per_step", "ms_min", "ms_max", "tokens_per_s", "gflops", "sgemm_fraction"):
            rec[k] = None
        rec["step_ms"] = steps
        return rec
    decode = rec.get("tokens_per_step") == rec.get("batch")  # a timed unit is a 512-token run
    per_run = rec.get("seq_len", 1) if decode else 1
    tokens = rec["batch"] * rec["seq_len"]  # per timed unit either way
    med = statistics.median(steps)
    rec.update({"ms_per_step": med / per_run, "ms_min": min(steps) / per_run, "ms_max": max(steps) / per_run,
                "tokens_per_s": tokens / (med * 1e-3), "steps_timed": len(steps), "step_ms": steps, "paired": True})
    if rec.get("gflop_per_step") is not None:
        rec["gflops"] = rec["gflop_per_step"] / (rec["ms_per_step"] * 1e-3)
        if rec.get("sgemm_gflops"):
            rec["sgemm_fraction"] = rec["gflops"] / rec["sgemm_gflops"]
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("--mega", required=True, help="our binary")
    ap.add_argument("--out", required=True, help="directory of the .jsonl files (appended to)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps of each side, before the rounds (>= 1)")
    ap.add_argument("--rounds", type=int, default=3, help="at most this many rounds")
    ap.add_argument("--budget", type=float, default=60,
                    help="seconds: no new round once the slower side's quiet timed steps add up to this")
    ap.add_argument("--cotenant", action="store_true", help="each round also with a busy co-tenant")
    ap.add_argument("--peer-ld", default="", help="LD_LIBRARY_PATH for the peer only (its BLAS: bench/lib.sh)")
    ap.add_argument("--warm-below", type=float, default=2.5,
                    help="seconds: a side whose warm-up step took less gets an untimed step before each timed one")
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.rounds > 250 or a.threads < 1 or a.budget < 0:
        ap.error("--rounds must be 1..250, --threads >= 1, --budget >= 0")
    if not os.access(a.mega, os.X_OK):
        ap.error(f"{a.mega}: not an executable (run make first)")
    per_round = 4 if a.cotenant else 2  # timed steps, and as many untimed ones at most
    if a.warmup < 1:
        ap.error("--warmup must be >= 1 (its time decides the untimed steps)")
    common = ["--json", "--threads", str(a.threads), "--warmup", str(a.warmup),
              "--repeat", str(min(1000, a.rounds * per_round)), "--budget", "1e6", a.workload]
    cmds = {"ours": [a.mega, "bench", "--no-sgemm"] + common,
            "peer": ["/usr/bin/python3", PEER] + common}
    sides, steps, warm = {}, {}, {}
    spin = None
    t0 = time.time()
    try:
        # start them one after the other, so that each warms up alone
        for name in ("ours", "peer"):
            sides[name] = Side(name, cmds[name], a.peer_ld if name == "peer" else "")
            sides[name].wait_ready()
            steps[name], steps[name + "_ct"] = [], []
            # a short step pays for the caches the other side took over (about 10-30 ms measured
            # for a 120-ms step): it gets an untimed step of its own first. A long one does not
            # need it (the same cost is under 1%) and would double the run.
            warm[name] = sides[name].last_ms < a.warm_below * 1e3
        done = 0
        for r in range(a.rounds):
            order = ("ours", "peer") if r % 2 == 0 else ("peer", "ours")
            conds = ("",) + (("_ct",) if a.cotenant else ())
            for cond in conds:
                if cond:
                    spin = subprocess.Popen(["sh", "-c", "while :; do :; done"])
                for name in order:
                    s = sides[name]
                    if warm[name] and not s.error and s.step("warm") is not None:
                        s.wait_ready()
                    ms = None if s.error else s.step()
                    if ms is not None:
                        steps[name + cond].append(ms)
                        s.wait_ready()
                if spin:
                    spin.kill()
                    spin.wait()
                    spin = None
            done += 1
            if any(s.error for s in sides.values()):
                break
            if max(sum(steps["ours"]), sum(steps["peer"])) >= a.budget * 1e3:
                break
        sys.stderr.write(f"pair: {a.workload}: {done} round(s) in {time.time() - t0:.0f} s\n")
    finally:
        if spin:
            spin.kill()
            spin.wait()
        recs = {name: s.finish() for name, s in sides.items()}
    os.makedirs(a.out, exist_ok=True)
    failed = False
    for name in ("ours", "peer"):
        err = sides[name].error if name in sides else "not started"
        if err and not steps.get(name):
            sys.stderr.write(f"pair: {a.workload} ({name}): {err}\n")
        conds = ("", "_ct") if a.cotenant else ("",)
        for cond in conds:
            rec = condition_record(recs.get(name), steps.get(name + cond, []), err)
            rec.setdefault("workload", a.workload)
            failed |= rec.get("status") == "error"
            with open(os.path.join(a.out, name + cond + ".jsonl"), "a") as f:
                f.write(json.dumps(rec) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
