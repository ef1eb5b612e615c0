#!/bin/sh
# Standard output that cannot be written (docs/bad-inputs.md, O01-O08):
#  - help, version, info, eval, generate, predict and translate with stdout on /dev/full (every
#    write fails with ENOSPC) exit 2 with the one line "mega: error: writing standard output: No
#    space left on device", instead of exit 0 with the output lost;
#  - with SIGPIPE ignored, `mega generate -n 3000000 | head -c 10` stops at the first write after
#    head has gone (EPIPE), with that one line and exit 2, instead of generating every token (more
#    than a minute on this model).
# Usage: sh tests/sh/test_output.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
M="$B/mega"
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_output_XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
cd "$T" || exit 1
if ! [ -w /dev/full ]; then
  echo "NOTE test_output.sh skipped: no /dev/full"
  finish
fi

awk 'BEGIN { srand(3); for (i = 0; i < 400; i++) { s = ""; for (k = 0; k < 8; k++) s = s " w" int(rand() * 50); print s } }' >corpus.txt
awk 'BEGIN { srand(5); for (i = 0; i < 40; i++) print (i % 2 ? "a" : "b") "\tw" int(rand() * 9) " w" int(rand() * 9) }' >cls.tsv
awk 'BEGIN { srand(7); for (i = 0; i < 40; i++) { x = "w" int(rand() * 9); print x "\t" x x } }' >par.tsv
TINY="--layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 16 --ffn-dim 16 --n-dim 2 --threads 1 --quiet --warmup 0 --eval-every 0"
# shellcheck disable=SC2086
"$M" train --data corpus.txt --out lm $TINY --chunk-size 16 --batch 2 --seq-len 32 --steps 2 >/dev/null 2>&1
status $? "train a tiny language model"
# shellcheck disable=SC2086
"$M" train --task classify --data cls.tsv --out cls $TINY --batch 4 --seq-len 16 --steps 2 >/dev/null 2>&1
status $? "train a tiny classifier"
# shellcheck disable=SC2086
"$M" train --task translate --bpe 0 --data par.tsv --valid par.tsv --out s2s --encoder-layers 1 --decoder-layers 1 \
  --embed-dim 16 --z-dim 8 --hidden-dim 16 --ffn-dim 16 --n-dim 2 --threads 1 --quiet --warmup 0 --eval-every 0 \
  --max-tokens 128 --steps 2 >/dev/null 2>&1
status $? "train a tiny translation model"
head -n 5 par.tsv | cut -f1 >src.txt

# expect_error sends stdout to out.txt; this sends it on to /dev/full
tofull() { "$@" >/dev/full; }
msg="writing standard output: No space left on device"
ERR_OTHER=none
expect_error "O01 help > /dev/full" "$msg" tofull "$M" help
expect_error "O01 train --help > /dev/full" "$msg" tofull "$M" train --help
expect_error "O02 version > /dev/full" "$msg" tofull "$M" version
expect_error "O03 info > /dev/full" "$msg" tofull "$M" info --model lm
expect_error "O04 eval > /dev/full" "$msg" tofull "$M" eval --model lm --data corpus.txt --quiet --threads 1
expect_error "O04 eval of a classifier > /dev/full" "$msg" tofull "$M" eval --model cls --data cls.tsv --quiet --threads 1
expect_error "O05 generate > /dev/full" "$msg" tofull "$M" generate --model lm -n 50 --quiet --threads 1
expect_error "O06 predict > /dev/full" "$msg" tofull "$M" predict --model cls --data cls.tsv --threads 1
expect_error "O07 translate > /dev/full" "$msg" tofull "$M" translate --model s2s --input src.txt --threads 1
ERR_OTHER=

# O08: a reader that goes away. With SIGPIPE ignored every later write fails with EPIPE; the
# generation must stop there (about 150 s for all 3000000 bytes here; the timeout is 20 s)
rm -f gen.rc gen.err gen.out
t0=$(date +%s)
timeout -k 5 20 sh -c "trap '' PIPE; { '$M' generate --model lm -n 3000000 --quiet --threads 1 2>gen.err; echo \$? >gen.rc; } | head -c 10 >gen.out"
trc=$?
t1=$(date +%s)
if [ $trc -eq 0 ] && [ "$(cat gen.rc 2>/dev/null)" = 2 ] && [ "$(wc -c <gen.out)" -eq 10 ] && [ "$(wc -l <gen.err)" -eq 1 ] &&
  grep -q '^mega: error: writing standard output: Broken pipe$' gen.err; then
  ok "O08 generate -n 3000000 | head -c 10 with SIGPIPE ignored stops ($((t1 - t0)) s): $(cat gen.err)"
else
  bad "O08 generate | head -c 10 with SIGPIPE ignored: timeout exit $trc, mega exit $(cat gen.rc 2>/dev/null), $((t1 - t0)) s, stderr: $(head -n 2 gen.err | tr '\n' '|')"
fi
# the ordinary case is unchanged: SIGPIPE ends the writer, the pipeline reads its 10 bytes
timeout -k 5 20 sh -c "'$M' generate --model lm -n 3000000 --quiet --threads 1 | head -c 10 >gen2.out"
[ $? -eq 0 ] && [ "$(wc -c <gen2.out)" -eq 10 ] && ok "O08 generate | head -c 10 (SIGPIPE as usual)" ||
  bad "O08 generate | head -c 10 (SIGPIPE as usual)"
# and a complete write still exits 0
"$M" generate --model lm -n 20 --quiet --threads 1 --seed 1 >g.out 2>g.err
[ $? -eq 0 ] && [ -s g.out ] && [ ! -s g.err ] && ok "generate to a file exits 0, nothing on stderr" || bad "generate to a file: $(cat g.err)"
finish
