#!/bin/sh
# PyTorch reads our checkpoints: sh tests/sh/test_torch_checkpoint.sh BUILD_DIR
# Trains tiny models for a few steps with BUILD_DIR/mega (several configurations: softmax/relu2/
# laplace, simple/rotary, layernorm/rmsnorm/scalenorm/batchnorm, pre/post norm, tied/untied,
# chunked/full attention, truncation, no embedding scale, no affine final norm), dumps our logits
# for a text snippet with BUILD_DIR/test_dump_logits (full forward and streaming), then
# tests/ref/check_checkpoint.py loads each model.safetensors into tests/ref/mega_ref.py's LM with
# load_state_dict(strict=True) and compares its logits (tolerance 1e-4 of max |logit|).
# A negative control (one weight of a checkpoint changed) must make the comparison fail.
# Without /usr/bin/python3 + torch the test prints a NOTE and "0 passed, 0 failed" (no checks).
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")/../.." && pwd)
need_torch test_torch_checkpoint.sh asan-ok # (it runs no library code inside python3)
for f in "$B/mega" "$B/test_dump_logits"; do
  [ -x "$f" ] || { bad "no executable $f (build first)"; finish; }
done
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_torch.XXXXXX") || { bad "mktemp -d"; finish; }
trap 'rm -rf "$T"' EXIT
trap 'exit 2' INT TERM HUP
START=$(date +%s)

# a small deterministic corpus and a snippet whose length (110) is not a multiple of the chunks
awk 'BEGIN { s = 7; for (i = 0; i < 3000; i++) { s = (s * 16807) % 2147483647;
  printf "%s%s", substr("the cat sat on a mat and saw one red fox ", 1 + s % 37, 5), (i % 12 == 11 ? "\n" : " ") } }' > "$T/corpus.txt"
printf 'The king walks slowly into the garden.\nA small child reads a letter beside the river, and the old dog sleeps.\n' > "$T/snippet.txt"

TR="--steps 6 --batch 4 --seq-len 64 --warmup 2 --lr 1e-2 --threads 1 --eval-every 0 --quiet"
SMALL="--layers 2 --embed-dim 32 --z-dim 16 --hidden-dim 48 --n-dim 4 --ffn-dim 48"
pairs=""
npairs=0
train_one() { # NAME FLAGS...
  name=$1
  shift
  if "$B/mega" train --data "$T/corpus.txt" --out "$T/$name" $TR "$@" > "$T/$name.out" 2>&1 &&
    "$B/test_dump_logits" "$T/$name/model.safetensors" "$T/snippet.txt" "$T/$name.logits.safetensors" > "$T/$name.dump" 2>&1; then
    ok "$name: trained and dumped"
    pairs="$pairs $T/$name/model.safetensors $T/$name.logits.safetensors"
    npairs=$((npairs + 1))
  else
    bad "$name: train or dump failed: $(tail -n 2 "$T/$name.out" "$T/$name.dump" | tr '\n' ' ')"
  fi
}
train_one softmax_simple_layernorm_pre $SMALL --chunk-size 16
train_one relu2_rotary_rmsnorm_post_tied $SMALL --chunk-size 8 --attention-activation relu2 --rel-pos-bias rotary \
  --norm-type rmsnorm --postnorm --tie-embeddings --activation gelu --dropout 0.1
train_one laplace_scalenorm_full_trunc $SMALL --chunk-size -1 --max-positions 128 --attention-activation laplace \
  --norm-type scalenorm --no-scale-embedding --no-affine-final-norm --truncation 20 --activation relu
train_one softmax_batchnorm_noffn $SMALL --chunk-size 16 --norm-type batchnorm --ffn-dim 0 --rel-pos-bias rotary

# one python run for every pair: each pair gives two lines (full forward, streaming)
if [ "$npairs" -gt 0 ]; then
  (cd "$HERE" && "$PY" tests/ref/check_checkpoint.py $pairs) > "$T/check.out" 2>&1
  rc=$?
  [ -n "$VERBOSE" ] && cat "$T/check.out"
  nok=$(grep -c '^ok ' "$T/check.out")
  nbad=$(grep -c '^FAIL' "$T/check.out")
  worst=$(sed -n 's/.*rel err \([0-9][-0-9.e+]*\).*/\1/p' "$T/check.out" | awk '$1 + 0 > w { w = $1 + 0 } END { printf "%.2e", w }')
  echo "NOTE test_torch_checkpoint.sh: $npairs checkpoints, torch vs C logits worst rel err $worst (tolerance 1e-4)"
  if [ $rc -eq 0 ] && [ "$nok" -eq $((2 * npairs)) ] && [ "$nbad" -eq 0 ]; then
    ok "torch loads $npairs checkpoints strictly; logits match (full and streaming)"
    pass=$((pass + nok - 1))
  else
    bad "check_checkpoint.py: exit $rc, $nok ok, $nbad failed: $(grep -v '^ok ' "$T/check.out" | head -n 8 | sed 's|'"$T"'/||g' | tr '\n' '|')"
    pass=$((pass + nok))
  fi
fi

# negative control: a changed weight (high byte of the last float: the pad row of the output
# projection) must be detected
M="$T/softmax_simple_layernorm_pre/model.safetensors"
if [ -s "$M" ]; then
  cp "$M" "$T/bad.safetensors"
  sz=$(wc -c < "$T/bad.safetensors")
  printf '\102' | dd of="$T/bad.safetensors" bs=1 seek=$((sz - 1)) conv=notrunc 2> /dev/null
  (cd "$HERE" && "$PY" tests/ref/check_checkpoint.py "$T/bad.safetensors" "$T/softmax_simple_layernorm_pre.logits.safetensors") > "$T/neg.out" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && grep -q '^FAIL' "$T/neg.out"; then ok "negative control: a changed weight is detected"; else bad "negative control passed (exit $rc): $(cat "$T/neg.out")"; fi
  # a checkpoint with a tensor removed must not load strictly
  (cd "$HERE" && "$PY" - "$M" "$T/missing.safetensors" << 'EOF'
import sys
sys.path.insert(0, "tests/ref")
import st
W, meta = st.load(sys.argv[1])
W.pop("decoder.layers.1.nffn.fc1.bias")
st.save(sys.argv[2], W, meta)
EOF
  ) > /dev/null 2>&1
  (cd "$HERE" && "$PY" tests/ref/check_checkpoint.py "$T/missing.safetensors" "$T/softmax_simple_layernorm_pre.logits.safetensors") > "$T/neg2.out" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -q 'Missing key' "$T/neg2.out"; then ok "negative control: strict loading rejects a missing tensor"; else bad "missing tensor not rejected (exit $rc): $(head -n 3 "$T/neg2.out")"; fi
fi
echo "NOTE test_torch_checkpoint.sh: $(($(date +%s) - START)) s"
finish
