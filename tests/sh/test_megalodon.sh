#!/bin/sh
# The Megalodon model from the command line: sh tests/sh/test_megalodon.sh BUILD_DIR
#   * mega train --arch megalodon (the megalodon mixer in the language model) trains and saves;
#     --arch is --mixer under another name (the same checkpoint bytes);
#   * a run stopped with --stop-after and resumed ends with the same model bytes as a straight run;
#   * mega eval streams with the state carried across segments (the timestep norm and the CEMA):
#     segments of 5, 8 (the chunk) and 64 bytes give the same loss; mega eval --lengths runs;
#   * mega generate (greedy) is deterministic; mega info names the mixer and the Megalodon fields;
#   * Python's mega.load(...).generate gives mega generate --quiet's bytes (when python3 + numpy);
#   * a token LM (a fairseq binarized dataset with its dict.txt) trains, evaluates and generates;
#   * training with --dropout, --attention-dropout, --hidden-dropout runs; the configuration the mixer
#     refuses (--activation-dropout: the official FFN has none) fails with one line naming it.
# Prints "N passed, M failed" last and exits 1 on any failure. -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir megalodon
TO=""
command -v timeout >/dev/null 2>&1 && TO="timeout -k 5 120"
mega() { $TO "$MEGA" "$@"; }
cp "$ROOT/tests/fixtures/runs/lm_v010/data.txt" data.txt || { bad "no data"; finish; }

M="--data data.txt --threads 1 --quiet --layers 2 --embed-dim 16 --z-dim 8 --hidden-dim 16 --n-dim 2 \
--ffn-dim 24 --chunk-size 8 --seq-len 32 --batch 2 --eval-tokens 256 --eval-every 10 --lr 0.01 --warmup 0 --seed 3"

mega train --arch megalodon $M --swiglu --rescale-nffn --out A --steps 20 >A.out 2>&1
status $? "mega train --arch megalodon exits 0"
check "it wrote a checkpoint" test -f A/model.safetensors
mega train --mixer megalodon $M --swiglu --rescale-nffn --out X --steps 20 >/dev/null 2>&1
check "--arch megalodon = --mixer megalodon (the same model bytes)" cmp -s A/model.safetensors X/model.safetensors
mega train --arch megalodon $M --swiglu --rescale-nffn --out B --steps 20 --stop-after 10 >/dev/null 2>&1 &&
  mega train --resume --out B $M --swiglu --rescale-nffn --arch megalodon --steps 20 >/dev/null 2>&1
status $? "a stopped run resumes"
check "the resumed run ends with the straight run's model bytes" cmp -s A/model.safetensors B/model.safetensors

loss() { sed -n 's/^loss \([0-9.]*\) nats.*/\1/p' "$1"; }
for s in 5 8 64; do
  mega eval --model A --data data.txt --max-bytes 600 --seq-len $s >e$s.txt 2>&1
  status $? "mega eval --seq-len $s"
done
check "eval carries the state: segments of 5, 8, 64 give one loss ($(loss e5.txt) $(loss e8.txt) $(loss e64.txt))" \
  test -n "$(loss e8.txt)" -a "$(loss e5.txt)" = "$(loss e8.txt)" -a "$(loss e64.txt)" = "$(loss e8.txt)"
mega eval --model A --data data.txt --max-bytes 600 --lengths 16,64 >len.txt 2>&1
status $? "mega eval --lengths 16,64"

mega generate --model A --prompt "The " -n 24 --temperature 0 --quiet >g1.txt 2>g1.err
status $? "mega generate"
mega generate --model A --prompt "The " -n 24 --temperature 0 --quiet >g2.txt 2>&1
check "greedy generation is deterministic" cmp -s g1.txt g2.txt
head -c 24 g1.txt >g24.txt
mega info --model A >info.txt 2>&1
check "mega info names the megalodon mixer" grep -q "megalodon mixer" info.txt
check "mega info shows the Megalodon fields" sh -c 'grep -q "swiglu true" info.txt && grep -q "rescale-nffn true" info.txt' 

PY=/usr/bin/python3
if [ -x "$PY" ] && "$PY" -c 'import numpy, ctypes' >/dev/null 2>&1 && [ -e "$B/libmega.so" ] &&
  ! grep -q __asan_init "$B/libmega.so" 2>/dev/null; then
  MEGA_LIB="$B/libmega.so" PYTHONPATH="$ROOT/python" PYTHONDONTWRITEBYTECODE=1 $TO "$PY" -c '
import sys, mega
m = mega.load("A")
sys.stdout.buffer.write(m.generate(b"The ", 24, temperature=0))' >py.txt 2>py.err
  status $? "python: mega.load + generate"
  check "python generates mega generate's bytes" cmp -s py.txt g24.txt
else
  echo "NOTE python checks skipped (no python3 with numpy, or a sanitizer build)"
fi

# ---- a token LM: a fairseq binarized dataset with its dict.txt ----------------------------------
F="$ROOT/tests/fixtures/fairseq-bin"
mkdir d
cp "$F/mmap.bin" d/train.bin && cp "$F/mmap.idx" d/train.idx && cp "$F/dict.txt" d/ &&
  cp "$F/cached.bin" d/valid.bin && cp "$F/cached.idx" d/valid.idx
mega train --arch megalodon --data d/train --out W --threads 1 --quiet --steps 3 --batch 2 --seq-len 16 --layers 1 \
  --embed-dim 16 --z-dim 8 --hidden-dim 16 --n-dim 2 --ffn-dim 16 --chunk-size 8 --eval-every 3 >W.out 2>&1
status $? "token LM: mega train --arch megalodon --data data-bin/train"
check "token LM: the vocabulary is the dict.txt" grep -q "fairseq dictionary: 56 tokens, word unit" W.out
mega eval --model W --data d/valid >We.txt 2>&1
status $? "token LM: mega eval --data data-bin/valid"
mega generate --model W -n 5 --temperature 0 >Wg.txt 2>&1
status $? "token LM: mega generate"

mega train --arch megalodon $M --out D --steps 2 --dropout 0.1 --attention-dropout 0.1 --hidden-dropout 0.1 >D.out 2>&1
status $? "mega train --arch megalodon with --dropout, --attention-dropout, --hidden-dropout"
expect_error "activation-dropout with megalodon" "no activation-dropout" mega train --arch megalodon $M --out D2 --steps 2 \
  --activation-dropout 0.1
finish
