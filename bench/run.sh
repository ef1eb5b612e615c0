#!/bin/sh
# make bench: `mega bench` and the PyTorch peer (bench/peer/peer.py) on the same workloads, back
# to back on the same machine with the same thread count, then one table with both, the ratios
# and the performance targets. See docs/performance.md.
#
#   sh bench/run.sh [BUILD_DIR] [WORKLOAD...]        (default: build, every workload)
#
# Environment:
#   BENCH_THREADS   threads for both sides (default: every online core)
#   BENCH_REPEAT    timed steps per workload (default 3; the median is reported)
#   BENCH_WARMUP    untimed steps first (default 1)
#   BENCH_BUDGET    seconds: a side stops timing a workload once its timed steps add up to this
#                   (default 12; at least one timed step)
#   BENCH_WORKLOADS space-separated workload names (default: all; arguments win)
#   BENCH_OUT       directory for the raw JSON (default bench/results)
#
# The workloads are interleaved (ours, then the peer, workload by workload) so that both sides of
# a ratio are measured minutes apart at most on a shared machine. Each side runs every workload in
# a fresh process, so peak memory is per workload.
set -e
BUILD=${1:-build}
[ $# -gt 0 ] && shift
MEGA="$BUILD/mega"
PY=/usr/bin/python3
PEER="bench/peer/peer.py"
cd "$(dirname "$0")/.."

if [ ! -x "$MEGA" ]; then
  echo "bench: $MEGA not found (run 'make' first, or 'make bench')" >&2
  exit 1
fi
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
  echo "bench: $PY cannot import torch; install python3-torch (scripts/deps.sh bench)" >&2
  exit 1
fi

cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
threads=${BENCH_THREADS:-$cores}
repeat=${BENCH_REPEAT:-3}
warmup=${BENCH_WARMUP:-1}
budget=${BENCH_BUDGET:-12}
outdir=${BENCH_OUT:-bench/results}
if [ $# -gt 0 ]; then workloads="$*"; else workloads=${BENCH_WORKLOADS:-}; fi
if [ -z "$workloads" ]; then
  workloads=$("$MEGA" bench --list | awk '$1 != "sgemm" {print $1}')
fi

cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
host=$(hostname 2>/dev/null || echo unknown)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "bench: $("$MEGA" version) vs $("$PY" -c 'import torch; print("torch", torch.__version__)')"
echo "bench: $cpu, $cores cores; $threads threads each side; warm-up $warmup, repeat $repeat (median), budget ${budget}s"
echo "bench: load average $load_before"
if awk -v l="${load_before%% *}" -v c="$cores" 'BEGIN { exit !(l > 0.5 * c) }'; then
  echo "bench: WARNING: the machine is busy (load ${load_before%% *} on $cores cores): the numbers will be noisy" >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
: >"$tmp/ours.jsonl"
: >"$tmp/peer.jsonl"
t0=$(date +%s)
"$MEGA" bench --json --threads "$threads" sgemm >>"$tmp/ours.jsonl" || true
n=$(echo $workloads | wc -w)
i=0
for w in $workloads; do
  i=$((i + 1))
  echo "== [$i/$n] $w" >&2
  "$MEGA" bench --json --no-sgemm --threads "$threads" --repeat "$repeat" --warmup "$warmup" --budget "$budget" "$w" \
    >>"$tmp/ours.jsonl" || true
  "$PY" "$PEER" --json --threads "$threads" --repeat "$repeat" --warmup "$warmup" --budget "$budget" "$w" \
    >>"$tmp/peer.jsonl" || true
done
t1=$(date +%s)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

stamp=$(date +%Y-%m-%dT%H%M%S)
mkdir -p "$outdir"
echo
echo "mega bench vs PyTorch peer: $(date '+%Y-%m-%d %H:%M'), $host, $cpu ($cores cores), $threads threads, $((t1 - t0)) s"
echo "(load average before $load_before, after $load_after)"
echo
"$PY" "$PEER" --report "$tmp/ours.jsonl" "$tmp/peer.jsonl" --save "$outdir/$stamp-$host.json" \
  --meta "date=$(date -Iseconds)" --meta "host=$host" --meta "cpu=$cpu" --meta "cores=$cores" \
  --meta "threads=$threads" --meta "repeat=$repeat" --meta "warmup=$warmup" --meta "budget=$budget" \
  --meta "load_before=$load_before" --meta "load_after=$load_after" --meta "build=$("$MEGA" version)" \
  --meta "seconds=$((t1 - t0))"
