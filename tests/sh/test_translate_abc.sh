#!/bin/sh
# Bounded-memory (ABC) attention in the encoder-decoder from the command line, on a tiny generated
# task (letters shifted by one), in a few seconds:
#   * `mega train --task translate --cross-attention abc-mlp --cross-memory 32 --mixer abc-mlp
#     --memory-size 8` trains (the decoder's causal self-attention and its cross-attention both
#     ABC), `mega info` names the choice, `mega eval` and `mega translate --beam 4` (beam search
#     reorders the ABC decoder state) run on it, one line per input line;
#   * the other bounded kinds (abc-window, abc-linformer) train with another decoder mixer;
#   * a bad --cross-memory (0, absurd) or --cross-attention exits 2 with exactly one error line.
# Usage: sh tests/sh/test_translate_abc.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir translate_abc

awk 'BEGIN { s = 11; for (i = 0; i < 400; i++) { x = ""; y = ""; s = (s * 16807) % 2147483647; L = 2 + s % 4;
  for (k = 0; k < L; k++) { s = (s * 16807) % 2147483647; j = 1 + s % 7; x = x substr("abcdefg", j, 1); y = y substr("bcdefgh", j, 1) }
  print x "\t" y } }' > pairs.tsv
small="--encoder-layers 1 --decoder-layers 1 --embed-dim 16 --ffn-dim 32 --threads 1 --quiet --bpe 0 --max-tokens 256"

# shellcheck disable=SC2086
timeout 120 "$MEGA" train --task translate --data pairs.tsv --out A --cross-attention abc-mlp --cross-memory 32 \
  --mixer abc-mlp --memory-size 8 --steps 40 --lr 1e-2 --warmup 10 $small >A.out 2>&1
status $? "train --task translate with abc-mlp cross-attention (32 slots) and an abc-mlp decoder (8 slots)"
"$MEGA" info --model A >info.out 2>&1 && grep -q "abc-mlp mixer, abc-mlp (32 slots) cross-attention" info.out
status $? "mega info names the bounded cross-attention"
first=$(grep -m1 '^step' A.out | sed 's/.*| loss \([0-9.]*\).*/\1/')
last=$(grep '^step' A.out | tail -n 1 | sed 's/.*| loss \([0-9.]*\).*/\1/')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b + 0 > 0 && b < a - 0.5) }'
status $? "the training loss falls ($first -> $last)"

head -n 20 pairs.tsv > test.tsv
cut -f1 test.tsv > src.txt
"$MEGA" eval --model A --data test.tsv --beam 4 --quiet >eval.out 2>&1 && grep -q '^model' eval.out
status $? "eval --beam 4 runs on it"
"$MEGA" translate --model A --beam 4 <src.txt >hyp4.txt 2>hyp4.err
status $? "translate --beam 4 exits 0"
check "translate --beam 4 writes one line per input line" test "$(wc -l <hyp4.txt)" -eq 20
"$MEGA" translate --model A --beam 1 <src.txt >hyp1.txt 2>/dev/null
status $? "translate --beam 1 exits 0"

for k in abc-window abc-linformer; do
  # shellcheck disable=SC2086
  timeout 120 "$MEGA" train --task translate --data pairs.tsv --out "B$k" --cross-attention "$k" --cross-memory 4 \
    --mixer mha --steps 5 $small >"B$k.out" 2>&1 &&
    "$MEGA" translate --model "B$k" --beam 2 <src.txt >"h$k.txt" 2>/dev/null && test "$(wc -l <"h$k.txt")" -eq 20
  status $? "$k cross-attention (4 slots) with an mha decoder trains and translates"
done

# shellcheck disable=SC2086
expect_error "--cross-memory 0 is one error line" "cross-memory" "$MEGA" train --task translate --data pairs.tsv --out C \
  --cross-attention abc-mlp --cross-memory 0 --steps 1 $small
# shellcheck disable=SC2086
expect_error "--cross-memory 1000000000 is one error line" "cross-memory" "$MEGA" train --task translate --data pairs.tsv \
  --out C --cross-attention abc-mlp --cross-memory 1000000000 --steps 1 $small
# shellcheck disable=SC2086
expect_error "an unknown --cross-attention is one error line" "cross-attention" "$MEGA" train --task translate \
  --data pairs.tsv --out C --cross-attention abc-rd --steps 1 $small
finish
