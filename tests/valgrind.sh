#!/bin/sh
# Memory checking of the mega tool under valgrind: sh tests/valgrind.sh BUILD_DIR [-v]
# (make check-valgrind builds BUILD_DIR = build-vg without -march=native first: valgrind does not
# emulate AVX-512, so a native build on an AVX-512 machine dies on its first vector instruction.)
#
# Each command below runs under
#   valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99
# and passes when valgrind reports no error (invalid read/write, use of uninitialised memory in a
# branch or a system call, invalid free, and memory definitely or indirectly lost at exit) and the
# command exits as expected. Memory that is "still reachable" or "possibly lost" at exit is not an
# error: libgomp and OpenBLAS keep their thread pools and buffers for the life of the process.
# The commands: the language model (train, stop and resume, eval, generate, info, plot), the
# classifier (listops data, train, eval --confusion, predict), the encoder-decoder (train, eval
# with beam search, translate), and error paths (missing file, truncated checkpoint, a run in use),
# whose cleanup is where leaks hide. Tiny models, 2 threads; about 3 minutes on 2 cores.
# Prints "N passed, M failed" last and exits 1 on any failure.
. "$(dirname "$0")/sh/lib.sh"
M="$B/mega"
if ! command -v valgrind >/dev/null 2>&1; then
  echo "NOTE valgrind is not installed (apt-get install valgrind): nothing checked"
  finish
fi
if [ ! -x "$M" ]; then
  bad "no executable $M (build first)"
  finish
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_vg.XXXXXX") || { bad "mktemp -d"; finish; }
trap 'rm -rf "$T"' EXIT
trap 'exit 2' INT TERM HUP
cd "$T" || { bad "cd $T"; finish; }
START=$(date +%s)
n=0

# vg EXPECTED_EXIT NAME ARGS...: run "mega ARGS" under valgrind
vg() {
  want=$1; name=$2; shift 2
  n=$((n + 1))
  valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
    --error-exitcode=99 --log-file="vg.$n.log" "$M" "$@" >"out.$n" 2>&1
  rc=$?
  if [ "$rc" -eq 99 ] || [ -s "vg.$n.log" ]; then
    bad "$name: valgrind reports errors (exit $rc):"
    head -n 40 "vg.$n.log"
  elif [ "$rc" -ne "$want" ]; then
    bad "$name: exit $rc, expected $want: $(tail -n 3 "out.$n")"
  else
    ok "$name"
  fi
}

# ---- a small corpus (deterministic) ------------------------------------------------------
awk 'BEGIN { s = 7; for (i = 0; i < 600; i++) { line = "";
  for (k = 0; k < 10; k++) { s = (s * 16807) % 2147483647; line = line (k ? " " : "") substr("the cat sat on a mat and ran far away", 1 + s % 30, 4) }
  print line } }' > corpus.txt
tail -c 4000 corpus.txt > held.txt

LM="--layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --ffn-dim 32 --chunk-size 16 --batch 2 --seq-len 32 --threads 2 --quiet"
vg 0 "train (lm)" train --data corpus.txt --out lm $LM --steps 4 --warmup 1 --eval-every 2 --save-every 2
vg 0 "train --stop-after" train --data corpus.txt --out lm2 $LM --steps 4 --warmup 1 --stop-after 2
vg 0 "train --resume" train --data corpus.txt --out lm2 --resume --threads 2 --quiet
vg 0 "eval (lm)" eval --model lm --data held.txt --quiet
vg 0 "generate" generate --model lm --prompt "the " --tokens 20 --temperature 0.8 --seed 3
vg 0 "generate --temperature 0" generate --model lm --tokens 20 --temperature 0 --quiet
vg 0 "info" info --model lm
vg 0 "plot" plot lm --out lm.svg

# ---- the classifier ----------------------------------------------------------------------
vg 0 "listops" listops --out lo --train 40 --valid 8 --test 8 --min-len 10 --max-len 40 --max-depth 3 --seed 3
CLS="--task classify --data lo/train.tsv --valid lo/valid.tsv --layers 1 --embed-dim 16 --hidden-dim 32 --z-dim 8 --ffn-dim 32 --chunk-size -1 --seq-len 48 --batch 4 --threads 2 --quiet"
vg 0 "train (classify)" train $CLS --steps 3 --eval-every 3 --out cls
vg 0 "eval --confusion" eval --model cls --data lo/test.tsv --confusion --quiet
vg 0 "predict" predict --model cls --data lo/test.tsv

# ---- the encoder-decoder -----------------------------------------------------------------
awk 'BEGIN { srand(7); a = "abcdefgh";
  for (i = 0; i < 200; i++) { L = 2 + int(rand() * 5); x = "";
    for (k = 0; k < L; k++) x = x substr(a, 1 + int(rand() * 8), 1)
    print x "\t" toupper(x) > (i < 180 ? "train.tsv" : "valid.tsv") } }'
S2S="--task translate --data train.tsv --valid valid.tsv --encoder-layers 1 --decoder-layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --ffn-dim 32 --n-dim 2 --max-tokens 64 --threads 2 --quiet"
vg 0 "train (translate)" train $S2S --steps 3 --eval-every 3 --out tr
vg 0 "eval (translate, beam 2)" eval --model tr --data valid.tsv --beam 2 --quiet
cut -f1 valid.tsv | head -n 5 > src.txt
vg 0 "translate (beam 3)" translate --model tr --input src.txt --beam 3
vg 0 "train --mixer mha (translate)" train $S2S --mixer mha --steps 2 --out trm

# ---- error paths -------------------------------------------------------------------------
vg 2 "eval: missing model" eval --model nope --data held.txt
head -c 3000 lm/model.safetensors > trunc.safetensors
vg 2 "eval: truncated checkpoint" eval --model trunc.safetensors --data held.txt
vg 2 "train: existing run without --resume" train --data corpus.txt --out lm $LM --steps 4
vg 2 "train: data shorter than --seq-len" train --data src.txt --out short $LM --steps 4
printf 'a\tb\nno tab here\nc\td\n' > skip.tsv
vg 0 "train (translate): a line without a tab is skipped" train $S2S --data skip.tsv --valid skip.tsv --steps 2 --out skip
printf 'no tab here\nnor here\n' > bad.tsv
vg 2 "train (translate): no pair at all" train $S2S --data bad.tsv --valid bad.tsv --steps 2 --out bad

echo "NOTE valgrind.sh: $n commands in $(( $(date +%s) - START )) s"
finish
