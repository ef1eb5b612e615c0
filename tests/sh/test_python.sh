#!/bin/sh
# The Python package (python/mega, docs/python.md) over BUILD_DIR/libmega.so, against the tool:
#   sh tests/sh/test_python.sh BUILD_DIR
# Trains a tiny byte-level LM and a tiny ListOps classifier with BUILD_DIR/mega, runs the tool's
# eval / generate / predict / info on them, then tests/sh/python_checks.py checks in python3 that
# the package agrees: bits per byte from .logits equal to `mega eval`, .generate equal to
# `mega generate` byte for byte (greedy, top-p, top-k), predict equal to `mega predict`, translate
# of two tiny encoder-decoders equal to `mega translate` (beam and greedy, bytes and subwords); that
# training steps from Python lower the loss and .save writes what `mega info` reads; that bad
# input (missing or truncated files, tokens out of range, bad shapes and settings) raises
# mega.MegaError with the library's message; and that load/free cycles do not leak.
# Without /usr/bin/python3 + numpy it prints a NOTE and "0 passed, 0 failed" (no checks). With a
# sanitizer build (make asan) python3 runs with the ASan runtime preloaded.
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")/../.." && pwd)
PY=${MEGA_TEST_PYTHON:-/usr/bin/python3} # (override only to test the skip path)
if ! [ -x "$PY" ] || ! "$PY" -c 'import numpy, ctypes' >/dev/null 2>&1; then
  echo "NOTE test_python.sh skipped: python3 with numpy not installed ($PY -c 'import numpy' failed)"
  finish
fi
for f in "$B/mega" "$B/libmega.so"; do
  [ -e "$f" ] || { bad "no $f (build first)"; finish; }
done
# a sanitizer build (make asan): its libmega.so needs the ASan runtime loaded before anything else,
# so python3 runs with it preloaded; leak reports are off (python3 does not free everything at exit;
# the checks measure leaks themselves, except under ASan, whose quarantine holds freed memory)
SAN_ENV=""
if grep -q __asan_init "$B/libmega.so" 2>/dev/null; then
  ASAN_RT=$(ldd "$B/libmega.so" 2>/dev/null | sed -n 's/.*libasan[^ ]* => \([^ ]*\).*/\1/p' | head -n 1)
  if [ -z "$ASAN_RT" ] || [ ! -e "$ASAN_RT" ]; then
    echo "NOTE test_python.sh skipped: $B/libmega.so is built with AddressSanitizer and no shared ASan runtime was found"
    finish
  fi
  SAN_ENV="LD_PRELOAD=$ASAN_RT ASAN_OPTIONS=detect_leaks=0 MEGA_TEST_SANITIZED=1"
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_python.XXXXXX") || { bad "mktemp -d"; finish; }
trap 'rm -rf "$T"' EXIT
trap 'exit 2' INT TERM HUP
cd "$T" || { bad "cd $T"; finish; }
TO=""
command -v timeout >/dev/null 2>&1 && TO="timeout -k 5 120"
M="$B/mega"

# ---- the models and the tool's answers ----------------------------------------------------------
awk 'BEGIN { s = 7; for (i = 0; i < 6000; i++) { s = (s * 16807) % 2147483647;
  printf "%s%s", substr("the cat sat on a mat and saw one red fox ", 1 + s % 37, 5), (i % 12 == 11 ? "\n" : " ") } }' >corpus.txt
head -c 1500 corpus.txt | tail -c 1000 >held.txt
$TO "$M" train --data corpus.txt --out lm --steps 60 --lr 5e-3 --warmup 5 --layers 2 --embed-dim 32 --z-dim 16 \
  --hidden-dim 64 --ffn-dim 64 --chunk-size 32 --batch 8 --seq-len 64 --threads 1 --quiet >train.out 2>&1
status $? "mega train: a tiny language model"
$TO "$M" eval --model lm --data held.txt --threads 1 --quiet >eval.out 2>&1 &&
  sed -n 's/.*bits per byte \([0-9.]*\).*/\1/p' eval.out >eval_bpb.txt && [ -s eval_bpb.txt ]
status $? "mega eval prints bits per byte"
"$M" info --model lm | sed -n 's/^parameters *//p' >info_params.txt
# a prompt longer than the attention chunk (32): the tool feeds it one chunk per call
printf 'The cat sat on a mat and saw one red fox; the fox sat on the cat and saw' >prompt.txt
P=$(cat prompt.txt)
gen() { # TAG FLAGS...
  tag=$1; shift
  $TO "$M" generate --model lm --prompt "$P" --tokens 80 --quiet --threads 1 "$@" >"gen_$tag.txt" 2>gen.err
  status $? "mega generate $tag"
}
gen greedy --temperature 0
gen t0.9_p0.9_s5 --temperature 0.9 --top-p 0.9 --seed 5
gen t1.2_k5_s11 --temperature 1.2 --top-k 5 --top-p 1 --seed 11
head -c 3000 lm/model.safetensors >truncated.safetensors
# the run python_checks.py reproduces step by step (dropout on, cosine schedule with warm-up)
$TO "$M" train --data corpus.txt --out repro --steps 12 --lr 5e-3 --warmup 3 --dropout 0.1 --seed 9 --valid-fraction 0 \
  --eval-every 0 --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --ffn-dim 32 --chunk-size 16 --batch 4 --seq-len 32 \
  --threads 1 --quiet >repro.out 2>&1
status $? "mega train: the run to reproduce from Python"

"$M" listops --out lo --train 240 --valid 30 --test 40 --min-len 10 --max-len 60 --max-depth 3 --seed 3 >/dev/null 2>&1
$TO "$M" train --task classify --data lo/train.tsv --valid lo/valid.tsv --steps 40 --batch 8 --threads 1 --quiet \
  --layers 1 --embed-dim 16 --hidden-dim 32 --z-dim 8 --ffn-dim 32 --chunk-size -1 --seq-len 64 --out cls >cls.out 2>&1
status $? "mega train --task classify: a tiny ListOps classifier"
"$M" predict --model cls --data lo/test.tsv --threads 1 >pred.txt 2>pred.err
status $? "mega predict"

# tiny encoder-decoders (bytes; subword units on the source only, whose search limit counts bytes)
# and `mega translate`'s output for Python's translate to equal
awk 'BEGIN { s = 11; for (i = 0; i < 160; i++) { s = (s * 16807) % 2147483647; w = substr("the cat sat on a mat", 1 + s % 15, 6);
  printf "%s\t%s\n", w, toupper(w) } }' >par.tsv
printf 'the cat\non a mat\nsat\nmat on the cat sat\nthe\n' >src.txt
S2SF="--task translate --encoder-layers 1 --decoder-layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 16 --ffn-dim 16 --n-dim 2 --threads 1 --quiet --warmup 0 --eval-every 0 --max-tokens 256 --steps 200 --lr 1e-2"
# shellcheck disable=SC2086
$TO "$M" train --data par.tsv --out s2s --bpe 0 $S2SF >s2s.out 2>&1
status $? "mega train --task translate: a tiny byte encoder-decoder"
# shellcheck disable=SC2086
$TO "$M" train --data par.tsv --out s2s_bpe --bpe 12 --bpe-sides source $S2SF >s2s_bpe.out 2>&1
status $? "mega train --task translate: a tiny encoder-decoder with source subword units"
"$M" translate --model s2s --input src.txt --beam 3 --batch 2 --threads 1 >tr_s2s.txt 2>tr.err
status $? "mega translate (bytes, beam 3, batch 2)"
"$M" translate --model s2s_bpe --input src.txt --beam 1 --max-len-a 0.5 --max-len-b 3 --threads 1 >tr_s2s_bpe.txt 2>tr.err
status $? "mega translate (source subword units, greedy, short limit)"

# ---- the package's checks -------------------------------------------------------------------------
env $SAN_ENV MEGA_LIB="$B/libmega.so" PYTHONPATH="$HERE/python" PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1 $TO "$PY" "$HERE/tests/sh/python_checks.py" "$T" \
  >py.out 2>&1
rc=$?
while IFS= read -r line; do
  case "$line" in
    "PASS "*) ok "${line#PASS }" ;;
    "FAIL "*) bad "${line#FAIL }" ;;
    "NOTE "*) echo "$line" ;;
  esac
done <py.out
if [ $rc -ne 0 ]; then
  bad "python3 python_checks.py exited $rc: $(grep -v '^PASS ' py.out | tail -n 5)"
fi
grep -Eq '^(PASS|FAIL) ' py.out || bad "python3 printed no checks"

# what Python saved, the tool reads
if "$M" info --model trained.safetensors >info2.out 2>&1 && grep -q "^parameters $(cat info_params.txt)\$" info2.out; then
  ok "mega info reads the model saved from Python"
else bad "mega info on the model saved from Python: $(head -n 2 info2.out)"; fi
if "$M" predict --model cls_trained.safetensors --data lo/test.tsv --threads 1 >pred2.txt 2>&1 && [ "$(wc -l <pred2.txt)" -eq 40 ]; then
  ok "mega predict reads the classifier saved from Python"
else bad "mega predict on the classifier saved from Python: $(head -n 2 pred2.txt)"; fi
finish
