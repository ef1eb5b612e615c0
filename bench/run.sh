#!/bin/sh
# make bench: `mega bench` and the PyTorch peer (bench/peer/peer.py) on the same workloads, on the
# same machine with the same thread count, then one table with both, the ratios and the
# performance targets. See docs/performance.md.
#
#   sh bench/run.sh [BUILD_DIR] [--cotenant] [--avx2] [WORKLOAD...]   (default: build, every workload)
#
# Workload by workload, bench/pair.py starts both sides (each in its own process, warmed up
# alone) and times them in turns: a round is one timed step of ours and one of the peer's,
# seconds apart, the order alternating between rounds; a speedup is the median over the rounds
# of the per-round ratios, so that a machine whose speed drifts over minutes moves both halves
# of a ratio alike.
#
# --cotenant (or BENCH_COTENANT=1, `make bench COTENANT=1`): every round also times one step of
# each side with a co-tenant: one busy process (a plain shell spin loop at normal priority, like a
# neighbour's job) running during those two steps. The report adds a table of the speedups quiet
# and with the co-tenant and the robustness targets (docs/performance.md).
#
# --avx2 (or BENCH_AVX2=1, `make bench AVX2=1`): an AVX2-only machine simulated on an AVX-512
# one. Our side must be built without AVX-512 (`make bench AVX2=1` builds build-avx2 with
# NATIVE=0 EXTRA_CFLAGS=-march=haswell; the script refuses a binary with zmm instructions), and
# both sides run with OPENBLAS_CORETYPE=Haswell (OpenBLAS's AVX2 kernels), the peer also with
# ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=DNNL_MAX_CPU_ISA=AVX2. The report names the
# kernels each side ran (docs/performance.md, "An AVX2-only machine, simulated").
#
# Environment:
#   BENCH_THREADS   threads for both sides (default: every online core)
#   BENCH_REPEAT    rounds per workload (default 3; the median is reported)
#   BENCH_WARMUP    untimed steps of each side before the rounds (default 1)
#   BENCH_BUDGET    seconds: no new round once the slower side's quiet timed steps add up to this
#                   (default 60; at least one round)
#   BENCH_WORKLOADS space-separated workload names (default: all; arguments win)
#   BENCH_OUT       directory for the raw JSON (default bench/results)
#   BENCH_PEER_BLAS openmp (default: the peer multiplies on OpenBLAS's OpenMP build, one thread
#                   pool with torch's) or system (the machine's libblas.so.3); bench/lib.sh
#
# Each side runs every workload in a fresh process, so peak memory is per workload.
set -e
BUILD=build
case "${1:-}" in -*|"") ;; *) BUILD=$1; shift ;; esac
cotenant=${BENCH_COTENANT:-0}
avx2=${BENCH_AVX2:-0}
args=""
for a in "$@"; do
  case "$a" in
    --cotenant) cotenant=1 ;;
    --avx2) avx2=1 ;;
    -*) echo "bench: unknown option $a (usage: sh bench/run.sh [BUILD_DIR] [--cotenant] [--avx2] [WORKLOAD...])" >&2; exit 2 ;;
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
budget=${BENCH_BUDGET:-60}
outdir=${BENCH_OUT:-bench/results}
if [ $# -gt 0 ]; then workloads="$*"; else workloads=${BENCH_WORKLOADS:-}; fi
if [ -z "$workloads" ]; then
  # the ABC efficiency rows (abc-enc-*) compare mixers within `mega bench`; the peer has no such workloads
  workloads=$("$MEGA" bench --list | awk '$1 != "sgemm" && $1 !~ /^abc-enc-/ {print $1}')
fi

bench_machine bench "$cores"
bench_peer_blas bench
bench_vectors
if [ "$avx2" = 1 ]; then
  bench_avx2 bench
fi
echo "bench: $("$MEGA" version | head -n 1) vs $("$PY" -c 'import torch; print("torch", torch.__version__)')"
echo "bench: $cpu, $cores cores; $threads threads each side; warm-up $warmup, up to $repeat rounds (median), budget ${budget}s"
echo "bench: $("$MEGA" version | grep '^blas' || echo 'blas: unknown')"
echo "bench: the peer's BLAS: $peer_blas"
peer_kernels=$(LD_LIBRARY_PATH=$peer_ld "$PY" "$PEER" --kernels 2>/dev/null || echo unknown)
echo "bench: kernels: ours $("$MEGA" version | sed -n 's/^blas //p'), vectors $vec; the peer's $peer_kernels"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
: >"$tmp/ours.jsonl"
: >"$tmp/peer.jsonl"
: >"$tmp/ours_ct.jsonl"
: >"$tmp/peer_ct.jsonl"
[ "$cotenant" = 1 ] && echo "bench: co-tenant mode: every round also with one busy process (spin loop)"
t0=$(date +%s)
"$MEGA" bench --json --threads "$threads" sgemm >>"$tmp/ours.jsonl" || true
n=$(echo $workloads | wc -w)
i=0
for w in $workloads; do
  i=$((i + 1))
  echo "== [$i/$n] $w" >&2
  "$PY" bench/pair.py --mega "$MEGA" --out "$tmp" --threads "$threads" --warmup "$warmup" --rounds "$repeat" \
    --budget "$budget" --peer-ld "$peer_ld" $([ "$cotenant" = 1 ] && echo --cotenant) "$w" || true
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
  --meta "seconds=$((t1 - t0))" --meta "cotenant=$cotenant" \
  --meta "peer_blas=$peer_blas" --meta "method=paired rounds (bench/pair.py)" \
  --meta "avx2_simulated=$avx2" --meta "ours_vectors=$vec" --meta "peer_kernels=$peer_kernels"
