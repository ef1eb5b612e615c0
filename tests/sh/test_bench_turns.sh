#!/bin/sh
# Paired timing (make bench, bench/pair.py; docs/performance.md "Method"):
#   sh tests/sh/test_bench_turns.sh BUILD_DIR
#   * `mega bench` under MEGA_BENCH_TURNS runs its warm-up alone, then one step per turn: "ready MS"
#     before each, "warm" runs an untimed step, "go" a timed one, each answered by "done MS", and
#     "stop" ends the timing; its JSON record counts only the timed steps (2 of 3 here);
#   * "stop" before any timed step: status "n/a" ("no timed step"), exit 0, no crash;
#   * a driver that dies mid-run: the child ends cleanly (no SIGPIPE death);
#   * the report (bench/peer/peer.py --report) takes a speedup as the median of the per-round
#     ratios and the co-tenant change per round, from records with "step_ms" (no torch needed).
# Needs /usr/bin/python3 (a NOTE and no checks without it).
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
if ! [ -x "$PY" ]; then
  echo "NOTE test_bench_turns.sh skipped: no $PY"
  finish
fi
[ -x "$B/mega" ] || { bad "no $B/mega (build first)"; finish; }
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_turns.XXXXXX") || { bad "mktemp -d"; finish; }
trap 'rm -rf "$T"' EXIT

out=$("$PY" - "$B/mega" "$ROOT" "$T" <<'EOF' 2>&1
import json, os, subprocess, sys
mega, root, tmp = sys.argv[1:4]
sys.path.insert(0, os.path.join(root, "bench"))
import pair  # the driver's own Side class

log = open(os.path.join(tmp, "checks"), "w", buffering=1)  # stdout and stderr carry the children's progress

def check(name, cond, detail=""):
    log.write(("ok " if cond else "FAIL ") + name + ("" if cond else f": {detail}") + "\n")

cmd = [mega, "bench", "--no-sgemm", "--json", "--threads", "1", "--warmup", "1", "--repeat", "5", "lm-decode-b1"]
# 1. the whole protocol: warm-up alone, then warm, go, go, stop
s = pair.Side("ours", cmd)
s.wait_ready()
check("ready after the warm-up, with its time", s.ready and s.last_ms > 0, s.last_ms)
w = s.step("warm"); s.wait_ready()
g1 = s.step("go"); s.wait_ready()
g2 = s.step("go"); s.wait_ready()
check("each step answered with its time", None not in (w, g1, g2) and min(w, g1, g2) > 0, (w, g1, g2))
rec = s.finish()
check("exit 0 after stop", s.proc.returncode == 0, s.proc.returncode)
check("record ok", rec is not None and rec.get("status") == "ok", rec)
rec = rec or {}
check("only the timed steps counted", rec.get("steps_timed") == 2, rec.get("steps_timed"))
med = (g1 + g2) / 2 / 512  # the median of two, per generated token
check("ms/step from the timed steps", abs(rec.get("ms_per_step", 0) - med) < 1e-3 * med + 1e-6, (rec.get("ms_per_step"), med))

# 2. stop before any timed step
s = pair.Side("ours", cmd)
s.wait_ready()
rec = s.finish() or {}
check("stop first: exit 0", s.proc.returncode == 0, s.proc.returncode)
check("stop first: n/a, no timed step", rec.get("status") == "n/a" and "no timed step" in rec.get("note", ""), rec)

# 3. the driver goes away: the child sees end of file / a broken pipe and ends without a signal
go_r, go_w = os.pipe(); ev_r, ev_w = os.pipe()
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                     env=dict(os.environ, MEGA_BENCH_TURNS=f"{go_r},{ev_w}"), pass_fds=(go_r, ev_w))
os.close(go_r); os.close(ev_w)
ev = os.fdopen(ev_r)
ev.readline()           # ready, after the warm-up
os.close(go_w); ev.close()  # the driver is gone
p.communicate(timeout=300)
check("driver gone: the child exits by itself, not by a signal", p.returncode is not None and p.returncode >= 0, p.returncode)

# 4. the report: paired records (rounds of step_ms)
def rec_(impl, steps, tok=1000.0):
    return {"impl": impl, "workload": "scaling-1k", "status": "ok", "tokens_per_s": tok, "ms_per_step": 1.0,
            "peak_rss_mib": 100.0, "step_ms": steps}
files = {"ours": rec_("mega", [100, 100, 100]), "peer": rec_("pytorch", [400, 1000, 500]),
         "ours_ct": rec_("mega", [200, 150, 200]), "peer_ct": rec_("pytorch", [800, 1500, 500])}
for k, r in files.items():
    with open(os.path.join(tmp, k + ".jsonl"), "w") as f:
        f.write(json.dumps(r) + "\n")
j = lambda k: os.path.join(tmp, k + ".jsonl")
out = subprocess.run([sys.executable, os.path.join(root, "bench", "peer", "peer.py"), "--report", j("ours"), j("peer"),
                      "--cotenant", j("ours_ct"), j("peer_ct")], capture_output=True, text=True)
check("report runs", out.returncode == 0, out.stderr[-500:])
row = [l for l in out.stdout.splitlines() if l.startswith("| scaling-1k")]
# per-round speedups 4, 10, 5: median 5 (the ratio of the medians would be 5 too; the co-tenant
# change per round: (800/200)/4 = 1, (1500/150)/10 = 1, (500/200)/5 = 0.5 -> median 1 -> +0%,
# where the ratio of medians would give (800/200)/(500/100) = 0.8 -> -20%)
check("speedup: median of the rounds", len(row) >= 1 and "5.00x" in row[0], row)
check("co-tenant change: median of the rounds", len(row) >= 2 and "+0%" in row[1], row)
EOF
)
[ -f "$T/checks" ] || { echo "$out" | tail -n 20; bad "the checks did not run"; finish; }
while IFS= read -r l; do
  case "$l" in ok\ *) echo "PASS ${l#ok }" ;; *) echo "$l" ;; esac
done <"$T/checks" >"$T/log"
[ -n "$VERBOSE" ] && cat "$T/log"
grep -v '^PASS' "$T/log" | sed -n '1,40p'
n_ok=$(grep -c '^PASS' "$T/log")
n_bad=$(grep -c '^FAIL' "$T/log")
pass=$((pass + n_ok))
fail=$((fail + n_bad))
if [ "$n_ok" -ne 12 ]; then
  echo "$out" | tail -n 20
  bad "expected 12 passing checks, got $n_ok"
fi
finish
