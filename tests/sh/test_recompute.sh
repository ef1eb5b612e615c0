#!/bin/sh
# Activation recomputation (`mega train --recompute blocks`): the backward runs each block's
# forward again from its saved input with the same dropout keys, so a run gives the model file of
# --recompute none byte for byte. Checked, a few steps each with dropout on:
#   * a tiny language model (3 blocks, every dropout of the Mega layer);
#   * a tiny classifier with batchnorm (the recomputed forward must not update the running
#     statistics a second time: they are in the model file) and padded batches;
#   * a tiny encoder-decoder (the encoder's blocks and the decoder's layers, cross-attention
#     included, recompute);
#   * a run stopped with blocks and resumed with none ends as the uninterrupted run (the setting
#     is not part of the run);
#   * the printed memory estimate is lower with blocks, and follows the micro-batch of
#     --grad-accum.
# Usage: sh tests/sh/test_recompute.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir recompute

# a text and a ListOps set (short expressions of varying lengths: padded batches)
awk 'BEGIN { s = 7; for (i = 0; i < 3000; i++) { s = (s * 16807) % 2147483647; printf "%s", substr("abcdefgh ", 1 + s % 9, 1) } print "" }' > text.txt
"$MEGA" listops --out lo --train 48 --valid 8 --test 4 --min-len 10 --max-len 40 --max-depth 3 --seed 5 --quiet >/dev/null 2>&1
status $? "mega listops writes the data"

tiny="--embed-dim 16 --hidden-dim 32 --z-dim 8 --ffn-dim 32 --n-dim 4 --threads 1 --quiet --eval-every 0 --warmup 2"
drop="--dropout 0.2 --attention-dropout 0.1 --hidden-dropout 0.1 --activation-dropout 0.1"
# same NAME ARGS...: train with --recompute none and blocks; the model files must be identical
same() {
  _n=$1; shift
  for _r in none blocks; do
    # shellcheck disable=SC2086
    "$MEGA" train "$@" $tiny --recompute $_r --out "$_n.$_r" >"$_n.$_r.out" 2>&1 ||
      { bad "$_n: train --recompute $_r failed: $(grep 'error' "$_n.$_r.out" | head -n 1)"; return; }
  done
  if cmp -s "$_n.none/model.safetensors" "$_n.blocks/model.safetensors"; then ok "$_n: same model file with none and blocks"
  else bad "$_n: the model files of --recompute none and blocks differ"; fi
}
# shellcheck disable=SC2086
same lm --data text.txt --steps 4 --batch 4 --seq-len 48 --layers 3 --chunk-size 16 $drop
# shellcheck disable=SC2086
same cls --task classify --data lo/train.tsv --valid lo/valid.tsv --steps 4 --batch 8 --layers 2 --chunk-size -1 \
  --norm-type batchnorm $drop
awk 'BEGIN { s = 11; for (i = 0; i < 200; i++) { x = ""; y = ""; s = (s * 16807) % 2147483647; L = 2 + s % 4;
  for (k = 0; k < L; k++) { s = (s * 16807) % 2147483647; j = 1 + s % 7; x = x substr("abcdefg", j, 1); y = y substr("bcdefgh", j, 1) }
  print x "\t" y } }' > pairs.tsv
# shellcheck disable=SC2086
same mt --task translate --data pairs.tsv --encoder-layers 2 --decoder-layers 2 --steps 3 --bpe 0 --max-tokens 128 $drop

# the run is not tied to the setting: stopped with blocks, resumed with none
# shellcheck disable=SC2086
"$MEGA" train --data text.txt --steps 4 --batch 4 --seq-len 48 --layers 3 --chunk-size 16 $drop $tiny --recompute blocks \
  --stop-after 2 --out R >R.out 2>&1 &&
  "$MEGA" train --data text.txt --steps 4 --out R --resume --threads 1 --quiet --recompute none >>R.out 2>&1
status $? "a run stopped with --recompute blocks resumes with none"
if cmp -s R/model.safetensors lm.none/model.safetensors; then ok "the resumed run ends with the uninterrupted run's model"
else bad "the run stopped with blocks and resumed with none differs from the uninterrupted run"; fi

# the estimate: buffers of one block's activations instead of three
kib() { sed -n 's/.*buffers \([0-9.]*\) \(KiB\|MiB\).*/\1 \2/p' "$1" | awk '{ print $2 == "MiB" ? $1 * 1024 : $1 }'; }
bn=$(kib lm.none.out) bb=$(kib lm.blocks.out)
if [ -n "$bn" ] && [ -n "$bb" ] && awk -v n="$bn" -v b="$bb" 'BEGIN { exit !(b < n) }'; then
  ok "the memory estimate's buffers are smaller with blocks ($bb KiB < $bn KiB)"
else bad "the memory estimate's buffers with blocks ($bb) are not below none's ($bn)"; fi
grep -q "^  recompute blocks" lm.blocks.out && ! grep -q "recompute" lm.none.out
status $? "the run's description names --recompute blocks (and none prints as before)"
# the estimate follows the micro-batch: --batch 8 --grad-accum 2 forwards 4 sequences at a time
# (validation too), so its buffers are those of --batch 4, below those of --batch 8
est() { # shellcheck disable=SC2086
  "$MEGA" train --data text.txt --seq-len 48 --layers 3 --chunk-size 16 $tiny --recompute blocks --max-memory 1 --out E "$@" 2>&1 |
    sed -n 's/.*buffers \([0-9.]* [KMG]iB\) (\([a-z-]* [0-9]* x [0-9]*\)).*/\1 \2/p'; }
ga=$(est --batch 8 --grad-accum 2) b4=$(est --batch 4) b8=$(est --batch 8)
if [ "${ga% micro-batch 4 x 48}" != "$ga" ] && [ "${ga% micro-batch 4 x 48}" = "${b4% batch 4 x 48}" ] &&
  [ "${b8% batch 8 x 48}" != "${b4% batch 4 x 48}" ]; then ok "the estimate of --batch 8 --grad-accum 2 is that of the micro-batch ($ga)"
else bad "the estimate with --grad-accum 2 ('$ga') is not that of --batch 4 ('$b4'; --batch 8: '$b8')"; fi
expect_error "--recompute with an unknown level is refused" "recompute" "$MEGA" train --data text.txt --out X --recompute all
finish
