#!/bin/sh
# Compare every token mixer under the same budget on the same text (docs/mixers.md):
#   sh bench/mixers.sh [BUILD] [STEPS]
# Each mixer trains a 2-layer byte-level LM (embed 128, FFN 256, seq-len 256, batch 16, same
# seed, lr schedule and data windows) for STEPS steps (default 300) on the GCIDE training split
# prepared by `make run` (data/gcide.train / data/gcide.valid), then reports: held-out bits per
# byte (non-overlapping 256-byte windows over the first 64 KB of the held-out split), training
# tokens/s (mean over the run, from log.jsonl), parameters, and bits per byte at 512 and 1024
# (train short, test long; mixers with absolute positions get --max-len 1024 so the longer
# windows are defined). Results go to runs/mixers/<mixer>/ and one markdown table on stdout.
set -eu
B=${1:-build}
STEPS=${2:-300}
M="$B/mega"
[ -s data/gcide.train ] || { echo "bench/mixers.sh: run 'make run' first (it prepares data/gcide.*)" >&2; exit 1; }
mkdir -p runs/mixers
head -c 65536 data/gcide.valid > runs/mixers.valid
COMMON="--data data/gcide.train --valid runs/mixers.valid --layers 2 --embed-dim 128 --ffn-dim 256 --seq-len 256
 --batch 16 --steps $STEPS --lr 2e-3 --min-lr 1e-4 --warmup 30 --seed 1 --eval-every 0 --eval-tokens 65536
 --save-every 0 --log-every 10 --quiet"
printf '| mixer | options | params | held-out bpb (256) | bpb @512 | bpb @1024 | train tok/s |\n'
printf '|---|---|---|---|---|---|---|\n'
for spec in \
  "mega|--z-dim 64 --hidden-dim 256 --n-dim 16 --chunk-size 128" \
  "mega|--z-dim 64 --hidden-dim 256 --n-dim 0 --chunk-size 128" \
  "mha|--heads 4 --pos rope" \
  "mha|--heads 4 --pos alibi" \
  "local|--heads 4 --window 64 --pos rope" \
  "mhatw|--heads 4 --max-len 1024" \
  "aft-full|--max-len 1024" \
  "aft-local|--window 64 --max-len 1024" \
  "aft-simple|" \
  "aft-tw|--heads 4" \
  "gmlp|--heads 1 --hidden-dim 256 --max-len 1024" \
  "abc-window|--heads 4 --memory-size 32" \
  "abc-linformer|--heads 4 --memory-size 32 --max-len 1024" \
  "abc-mlp|--heads 4 --memory-size 32"; do
  mixer=${spec%%|*}
  opts=${spec#*|}
  tag=$(printf '%s %s' "$mixer" "$opts" | tr -c 'a-zA-Z0-9\n' '_' | sed 's/__*/_/g; s/_$//')
  out="runs/mixers/$tag"
  rm -rf "$out"
  # shellcheck disable=SC2086
  if ! "$M" train $COMMON --mixer "$mixer" $opts --out "$out" > "$out.log" 2>&1; then
    printf '| %s | %s | - | failed: %s | | | |\n' "$mixer" "$opts" "$(grep -m1 'error' "$out.log" | cut -c1-60)"
    continue
  fi
  params=$(sed -n 's/^  model *\([0-9]*\) parameters.*/\1/p' "$out.log" | head -1)
  bpb=$(grep '"valid_bpb"' "$out/log.jsonl" | tail -1 | sed 's/.*"valid_bpb": \([0-9.]*\).*/\1/')
  toks=$(grep '"tok_s"' "$out/log.jsonl" | sed 's/.*"tok_s": \([0-9.]*\).*/\1/' | awk '{s+=$1; n++} END {if (n) printf "%.0f", s/n}')
  ext=$("$M" eval --model "$out" --data runs/mixers.valid --lengths 512,1024 2>&1 | awk '$1 ~ /^[0-9]+$/ {printf "%s ", $2}')
  set -- $ext
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$mixer" "$opts" "$params" "$bpb" "${1:--}" "${2:--}" "$toks"
done
