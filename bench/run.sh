#!/bin/sh
# make bench: `mega bench` and the PyTorch peer (bench/peer/peer.py) on the same workloads, back
# to back on the same machine with the same thread count, then one table with both, the ratios
# and the performance targets. See docs/performance.md.
#
#   sh bench/run.sh [BUILD_DIR] [--cotenant] [WORKLOAD...]   (default: build, every workload)
#
# --cotenant (or BENCH_COTENANT=1, `make bench COTENANT=1`): each workload is measured twice on
# both sides, quiet and then with a co-tenant: one busy process (a plain shell spin loop at normal
# priority, like a neighbour's job) running for the whole pair. The report adds a table of the
# speedups quiet and with the co-tenant and the robustness targets (docs/performance.md).
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
BUILD=build
case "${1:-}" in -*|"") ;; *) BUILD=$1; shift ;; esac
cotenant=${BENCH_COTENANT:-0}
args=""
for a in "$@"; do
  case "$a" in
    --cotenant) cotenant=1 ;;
    -*) echo "bench: unknown option $a (usage: sh bench/run.sh [BUILD_DIR] [--cotenant] [WORKLOAD...])" >&2; exit 2 ;;
    *) args="$args $a" ;;
  esac
done
set -- $args
MEGA="$BUILD/mega"
PY=/usr/bin/python3
PEER="bench/peer/peer.py"
cd "$(dirname "$0")/.."

. bench/lib.sh
bench_require bench bench

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

bench_machine bench "$cores"
echo "bench: $("$MEGA" version | head -n 1) vs $("$PY" -c 'import torch; print("torch", torch.__version__)')"
echo "bench: $cpu, $cores cores; $threads threads each side; warm-up $warmup, repeat $repeat (median), budget ${budget}s"
echo "bench: $("$MEGA" version | grep '^blas' || echo 'blas: unknown')"

tmp=$(mktemp -d)
spin=""
stop_spin() { if [ -n "$spin" ]; then kill "$spin" 2>/dev/null || true; wait "$spin" 2>/dev/null || true; spin=""; fi; }
trap 'stop_spin; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
: >"$tmp/ours.jsonl"
: >"$tmp/peer.jsonl"
: >"$tmp/ours_ct.jsonl"
: >"$tmp/peer_ct.jsonl"
[ "$cotenant" = 1 ] && echo "bench: co-tenant mode: every workload quiet, then with one busy process (spin loop)"
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
  if [ "$cotenant" = 1 ]; then
    echo "== [$i/$n] $w with a co-tenant" >&2
    sh -c 'while :; do :; done' &
    spin=$!
    "$MEGA" bench --json --no-sgemm --threads "$threads" --repeat "$repeat" --warmup "$warmup" --budget "$budget" "$w" \
      >>"$tmp/ours_ct.jsonl" || true
    "$PY" "$PEER" --json --threads "$threads" --repeat "$repeat" --warmup "$warmup" --budget "$budget" "$w" \
      >>"$tmp/peer_ct.jsonl" || true
    stop_spin
  fi
done
t1=$(date +%s)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

stamp=$(date +%Y-%m-%dT%H%M%S)
mkdir -p "$outdir"
echo
echo "mega bench vs PyTorch peer: $(date '+%Y-%m-%d %H:%M'), $host, $cpu ($cores cores), $threads threads, $((t1 - t0)) s"
echo "(load average before $load_before, after $load_after)"
echo
ct=""
[ "$cotenant" = 1 ] && ct="--cotenant $tmp/ours_ct.jsonl $tmp/peer_ct.jsonl"
"$PY" "$PEER" --report "$tmp/ours.jsonl" "$tmp/peer.jsonl" $ct --save "$outdir/$stamp-$host.json" \
  --meta "date=$(date -Iseconds)" --meta "host=$host" --meta "cpu=$cpu" --meta "cores=$cores" \
  --meta "threads=$threads" --meta "repeat=$repeat" --meta "warmup=$warmup" --meta "budget=$budget" \
  --meta "load_before=$load_before" --meta "load_after=$load_after" --meta "build=$("$MEGA" version)" \
  --meta "seconds=$((t1 - t0))" --meta "cotenant=$cotenant"
