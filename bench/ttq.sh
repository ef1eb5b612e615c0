#!/bin/sh
# make bench-ttq: time to quality. `mega train --time-budget` and the PyTorch peer
# (bench/peer/ttq.py) train the same byte-level GCIDE language model for the same budget of
# training seconds, one after the other with the same thread count; then both score the same
# held-out bytes the same way, and one table shows both. See docs/performance.md.
#
#   sh bench/ttq.sh [BUILD_DIR]
#
# Environment:
#   BENCH_TTQ_BUDGETS     space-separated budgets in seconds of training (default "300")
#   BENCH_THREADS         threads for both sides (default: every online core)
#   BENCH_TTQ_EVAL_BYTES  held-out bytes scored: the first N of data/gcide.valid (default 262144)
#   BENCH_OUT             directory for the raw JSON lines (default bench/results)
#
# The task: data/gcide.train / data/gcide.valid, prepared as `make run` does (scripts/gcide_data.sh).
# The model and the training (both sides): 4 layers, embed 128, z 64, hidden 256, ffn 256, n 16,
# chunk 128, softmax attention, simple relative bias, pre-norm layernorm; batches of 16 random
# windows of 256 bytes; AdamW (0.9, 0.98, eps 1e-8, weight decay 0.01 on matrices and
# embeddings), gradient norm clipped to 1; 50 warm-up steps to 3e-3, then a cosine to 2e-4 over
# the budget's seconds (validation and checkpoint saves not counted). Held-out bits per byte:
# non-overlapping windows of 256 bytes (`mega eval --lengths 256` on our side, the same windows
# in bench/peer/ttq.py), each window of 256 inputs predicting the 256 bytes that follow its first.
set -e
BUILD=${1:-build}
cd "$(dirname "$0")/.."
MEGA="$BUILD/mega"
PY=/usr/bin/python3
PEER=bench/peer/ttq.py

. bench/lib.sh
bench_require bench-ttq bench-ttq
sh scripts/gcide_data.sh

cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
threads=${BENCH_THREADS:-$cores}
budgets=${BENCH_TTQ_BUDGETS:-300}
eval_bytes=${BENCH_TTQ_EVAL_BYTES:-262144}
outdir=${BENCH_OUT:-bench/results}
for b in $budgets; do
  if ! awk -v b="$b" 'BEGIN { exit !(b + 0 == b && b > 0) }'; then
    echo "bench-ttq: BENCH_TTQ_BUDGETS: '$b' is not a positive number of seconds" >&2
    exit 1
  fi
done

bench_machine bench-ttq "$cores"
bench_peer_blas bench-ttq
echo "bench-ttq: the peer's BLAS: $peer_blas"
echo "bench-ttq: $("$MEGA" version | head -n 1) vs $("$PY" -c 'import torch; print("torch", torch.__version__)')"
echo "bench-ttq: $cpu, $cores cores; $threads threads each side; budgets $budgets s; $eval_bytes held-out bytes"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
: >"$tmp/results.jsonl"
MODEL="--layers 4 --embed-dim 128 --z-dim 64 --hidden-dim 256 --n-dim 16 --ffn-dim 256 --chunk-size 128
  --attention-activation softmax --rel-pos-bias simple --norm-type layernorm --prenorm"
TRAIN="--batch 16 --seq-len 256 --lr 3e-3 --min-lr 2e-4 --warmup 50 --schedule cosine --weight-decay 0.01 --clip 1.0
  --beta1 0.9 --beta2 0.98 --eps 1e-8 --seed 1 --steps 1000000000 --eval-every 0 --eval-tokens 4096 --save-every 0"
t0=$(date +%s)
for b in $budgets; do
  echo "== budget $b s: mega train --time-budget $b" >&2
  out="$tmp/ours-$b"
  # shellcheck disable=SC2086
  "$MEGA" train --data data/gcide.train --valid data/gcide.valid --out "$out" $MODEL $TRAIN --time-budget "$b" \
    --threads "$threads" --quiet >"$tmp/ours-$b.txt"
  grep -E "spent|^done" "$tmp/ours-$b.txt" >&2 || true
  "$MEGA" eval --model "$out" --data data/gcide.valid --max-bytes "$eval_bytes" --lengths 256 --threads "$threads" \
    --quiet >"$tmp/eval-$b.txt"
  bpb=$(awk '$1 == "256" { print $2 }' "$tmp/eval-$b.txt")
  cnt=$(awk '$1 == "256" { print $3 }' "$tmp/eval-$b.txt")
  # the last training record of the log: steps and the run's training seconds
  rec=$(grep '"train_seconds"' "$out/log.jsonl" | tail -n 1)
  steps=$(echo "$rec" | sed -n 's/.*"step": *\([0-9]*\).*/\1/p')
  secs=$(echo "$rec" | sed -n 's/.*"train_seconds": *\([0-9.]*\).*/\1/p')
  tps=$(awk -v s="$steps" -v t="$secs" 'BEGIN { printf "%.1f", (t > 0 ? s * 16 * 256 / t : 0) }')
  echo "{\"impl\": \"mega\", \"budget\": $b, \"threads\": $threads, \"steps\": ${steps:-null}, \"train_seconds\": ${secs:-null}, \"tokens_per_s\": ${tps:-null}, \"bpb\": ${bpb:-null}, \"eval_bytes\": ${cnt:-null}}" |
    tee -a "$tmp/results.jsonl" >&2
  echo "== budget $b s: the PyTorch peer" >&2
  LD_LIBRARY_PATH=$peer_ld OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$PY" "$PEER" --budget "$b" --threads "$threads" \
    --eval-bytes "$eval_bytes" --json | tee -a "$tmp/results.jsonl" >&2
done
t1=$(date +%s)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p "$outdir"
stamp=$(date +%Y-%m-%dT%H%M%S)
cp "$tmp/results.jsonl" "$outdir/ttq-$stamp-$host.jsonl"
echo
echo "mega vs PyTorch peer, time to quality: $(date '+%Y-%m-%d %H:%M'), $host, $cpu ($cores cores), $threads threads, $((t1 - t0)) s"
echo "(load average before $load_before, after $load_after; held-out: the first $eval_bytes bytes of data/gcide.valid, windows of 256)"
echo
"$PY" "$PEER" --report "$tmp/results.jsonl"
