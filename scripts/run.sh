#!/bin/sh
# make run: the main job on the built-in default.
#   1. the corpus: the GNU Collaborative International Dictionary of English (Debian package
#      dict-gcide), decompressed; the last 5% of its bytes are held out for validation;
#   2. trains a small byte-level Mega LM (about 3 minutes on 2 cores) with progress output;
#   3. saves the checkpoint in runs/gcide, scores held-out text with streaming evaluation
#      (state carried across chunks, as the official evaluation), prints a generated sample and
#      writes the training curves to runs/gcide/curves.svg.
# Environment overrides: MEGA_RUN_STEPS (default 450), MEGA_RUN_EVAL_BYTES (held-out bytes
# scored at the end, default 262144; 0 = the whole 2 MB split), MEGA_RUN_DIR (runs/gcide).
set -eu
B=${1:-build}
MEGA="$B/mega"
STEPS=${MEGA_RUN_STEPS:-450}
EVAL_BYTES=${MEGA_RUN_EVAL_BYTES:-262144}
OUT=${MEGA_RUN_DIR:-runs/gcide}
mkdir -p "$(dirname "$OUT")"
sh scripts/gcide_data.sh
T0=$(date +%s)
echo "== training (mega train; curves in $OUT/log.jsonl)"
rm -rf "$OUT"
"$MEGA" train --data data/gcide.train --valid data/gcide.valid --out "$OUT" \
  --layers 4 --embed-dim 128 --z-dim 64 --hidden-dim 256 --n-dim 16 --ffn-dim 256 --chunk-size 128 \
  --attention-activation softmax --rel-pos-bias simple --norm-type layernorm --prenorm \
  --steps "$STEPS" --batch 16 --seq-len 256 --lr 3e-3 --min-lr 2e-4 --warmup 50 --schedule cosine \
  --weight-decay 0.01 --clip 1.0 --seed 1 --eval-every 150 --eval-tokens 32768 --save-every 150
T1=$(date +%s)
if [ "$EVAL_BYTES" -gt 0 ]; then what="the first $EVAL_BYTES bytes of the held-out 5%"; else what="the whole held-out 5%"; fi
echo "== validation: streaming evaluation over $what (mega eval)"
"$MEGA" eval --model "$OUT" --data data/gcide.valid --max-bytes "$EVAL_BYTES" --quiet | tee "$OUT/eval.txt"
echo "== sample (mega generate --temperature 0.8)"
"$MEGA" generate --model "$OUT" --prompt "Moving \\Mov\"ing\\, a. " --tokens 400 --temperature 0.8 --top-p 0.95 --seed 7
"$MEGA" plot "$OUT" >/dev/null
T2=$(date +%s)
bpb=$(sed -n 's/.*bits per byte \([0-9.]*\).*/\1/p' "$OUT/eval.txt")
echo "== done: held-out bits per byte $bpb; training $((T1 - T0)) s, total $((T2 - T0)) s; checkpoint $OUT/model.safetensors, curves $OUT/curves.svg"
