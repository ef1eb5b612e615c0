#!/bin/sh
# The best model of a run and early stopping: sh tests/sh/test_best.sh BUILD_DIR
#   * mega train writes best.safetensors at the step of the best validation loss (its metadata:
#     step, best-metric, best-value); `mega eval` and `mega info` use it by default, --which last
#     the newest checkpoint; an explicit .safetensors file is used as given; --force removes it;
#   * --best-metric bpb is accepted for lm, acc refused (a classifier's and translation's metric);
#   * --patience stops a run that cannot improve (--lr 0: every validation equals the first) with
#     a checkpoint and one line saying why; a resumed run stops at the same step, and a run stopped
#     by --patience resumes as complete;
#   * --resume keeps the best and the patience count: a run stopped with --stop-after and resumed
#     ends with the same best.safetensors bytes as a straight run;
#   * Python's mega.load(which="best"|"last") follows the same rule;
#   * translate's defaults: bytes on both sides with one table below 100,000 training pairs or a
#     budget below 5 M batch tokens (450 s under --time-budget) unless --bpe is given, the line
#     naming the choice and why; dropout 0.3 on a small training set unless --dropout is given, the
#     warning for a model much larger than its data, --patience 10.
# Prints "N passed, M failed" last and exits 1 on any failure. -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir best
TO=""
command -v timeout >/dev/null 2>&1 && TO="timeout -k 5 120"
mega() { $TO "$MEGA" "$@"; }
cp "$ROOT/tests/fixtures/runs/lm_v010/data.txt" data.txt || { bad "no data"; finish; }
meta() { # meta FILE KEY: a __metadata__ value of a safetensors file
  python3 -c 'import json,struct,sys
b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]
print(json.loads(b[8:8+n])["__metadata__"].get(sys.argv[2],""))' "$1" "$2"
}

M="--data data.txt --threads 1 --quiet --log-every 1 --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 16 --n-dim 2 \
--ffn-dim 16 --chunk-size 16 --seq-len 32 --batch 2 --eval-tokens 512 --eval-every 5"

# ---- a run that learns: the best is the lowest validation loss of the log -----------------------
mega train $M --out A --steps 40 --lr 0.03 --warmup 0 --save-every 10 >A.out 2>&1
status $? "a training run exits 0"
check "best.safetensors is written" test -f A/best.safetensors
want=$(python3 -c 'import json,sys
v=[json.loads(l) for l in open("A/log.jsonl") if "valid_loss" in l]
b=min(v,key=lambda r:(r["valid_loss"],r["step"])); print(b["step"])')
got=$(meta A/best.safetensors step)
check "its step is that of the lowest validation loss ($got = $want)" test "$got" = "$want"
check "its metadata names the metric" test "$(meta A/best.safetensors best-metric)" = loss
mega eval --model A --data data.txt --max-bytes 1500 >e_best.txt 2>&1 &&
  mega eval --model A/best.safetensors --data data.txt --max-bytes 1500 >e_file.txt 2>&1 &&
  mega eval --model A --which last --data data.txt --max-bytes 1500 >e_last.txt 2>&1 &&
  mega eval --model A/model.safetensors --data data.txt --max-bytes 1500 >e_model.txt 2>&1
status $? "mega eval --which best/last runs"
fig() { grep '^loss' "$1" | sed 's/ | [0-9.]* s (.*//'; }
check "eval of the run directory is eval of best.safetensors" test "$(fig e_best.txt)" = "$(fig e_file.txt)"
check "--which last is eval of the newest model" test "$(fig e_last.txt)" = "$(fig e_model.txt)"
mega info --model A >info.txt 2>&1
check "mega info names best.safetensors with its step" grep -q "best      step $want, validation loss" info.txt
check "mega info says which file it shows" grep -q "file      A/best.safetensors (--which best)" info.txt
mega info --model A --which last >info2.txt 2>&1
check "mega info --which last shows the newest" grep -q "file      A/step-00000040.model.safetensors (--which last)" info2.txt
mega train $M --out A --steps 10 --force >/dev/null 2>&1
check "--force replaces the best with the new run's" test "$(meta A/best.safetensors step)" = 10
mega train $M --out B --steps 5 --best-metric bpb >/dev/null 2>&1
check "--best-metric bpb (lm)" test "$(meta B/best.safetensors best-metric)" = bpb
expect_error "--best-metric acc for a language model" "--best-metric acc" mega train $M --out C --steps 5 --best-metric acc

# ---- --patience: a run that cannot improve stops ---------------------------------------------------
P="$M --steps 200 --lr 0 --min-lr 0 --warmup 0 --patience 3"
mega train $P --out P1 >P1.out 2>&1
status $? "a run stopped by --patience exits 0"
check "it stops at the 4th validation (step 20) saying why" grep -q "stopped early at step 20: validation loss has not improved for 3 validations" P1.out
check "with a checkpoint at that step" grep -q '"step": *20' P1/checkpoint.json
check "its best is the first validation" test "$(meta P1/best.safetensors step)" = 5
mega train $P --out P2 --stop-after 12 >/dev/null 2>&1 && mega train $M --out P2 --resume >P2.out 2>&1
status $? "a --patience run stopped by --stop-after resumes"
check "the resumed run keeps the count and stops at the same step" grep -q "stopped early at step 20" P2.out
check "and the same best file" cmp -s P1/best.safetensors P2/best.safetensors
mega train $M --out P2 --resume >P3.out 2>&1
check "a run stopped by --patience resumes as complete" grep -q "stopped early at step 20: 3 validations without improvement" P3.out

# ---- --resume keeps the best: stopped and resumed = straight -----------------------------------------
R="$M --steps 30 --lr 0.03 --warmup 0 --schedule constant --save-every 10"
mega train $R --out S >/dev/null 2>&1 && mega train $R --out R --stop-after 15 >/dev/null 2>&1 &&
  mega train $M --out R --resume >/dev/null 2>&1
status $? "a straight and a stopped-and-resumed run"
check "the same best.safetensors bytes" cmp -s S/best.safetensors R/best.safetensors
check "the same final model" cmp -s S/model.safetensors R/model.safetensors

# ---- translate's regularising defaults ------------------------------------------------------------
awk 'BEGIN { for (i = 0; i < 60; i++) printf "s%d ab\tt%d ba\n", i, i }' >pairs.tsv
TR="--task translate --data pairs.tsv --bpe 0 --steps 1 --threads 1 --quiet --encoder-layers 1 --decoder-layers 1 \
--embed-dim 16 --z-dim 8 --hidden-dim 16 --ffn-dim 16 --n-dim 2"
mega train $TR --out X1 >X1.out 2>X1.err
status $? "a tiny translate run"
# (the config is JSON inside the header's JSON: its quotes are escaped)
check "a small training set gets dropout 0.3" grep -qF '\"dropout\":0.3' X1/model.safetensors
check "and a warning that the model is large for its data" grep -q "^mega: warning: .*expect overfitting" X1.err
check "and --patience 10" grep -qF '\"patience\":10' X1/train_state.safetensors
awk 'BEGIN { for (i = 0; i < 21100; i++) printf "s%d ab\tt%d ba\n", i, i }' >big.tsv
mega train $TR --data big.tsv --out X3 >/dev/null 2>&1
check "20000 training pairs and more get dropout 0.1" grep -qF '\"dropout\":0.1' X3/model.safetensors
mega train $TR --dropout 0.05 --out X2 >/dev/null 2>&1
check "an explicit --dropout is kept" grep -qF '\"dropout\":0.05' X2/model.safetensors
# the vocabularies from the data size: without --bpe, fewer than 100,000 training pairs stay in
# bytes on both sides with one table; an explicit --bpe learns its merges whatever the size
TV=$(echo "$TR" | sed 's/ --bpe 0//; s/ --quiet//')
mega train $TV --out X4 >X4.out 2>&1
check "a small training set without --bpe: bytes on both sides, one table" grep -q "^  vocab     bytes on both sides, one shared table: 57 training pairs" X4.out
check "... and its model shares its embeddings (258-token vocabularies)" grep -qF '\"share-all-embeddings\":true' X4/model.safetensors
mega train $TV --bpe 20 --out X5 >X5.out 2>&1
check "an explicit --bpe learns its merges on a small set" grep -q "byte-pair merges (--bpe 20) learned" X5.out
# ... and from the budget: 100,000 pairs learn the source merges only with at least 5 M batch tokens
# (--steps x --max-tokens) and, under --time-budget, 450 s; the line says which and why
awk 'BEGIN { for (i = 0; i < 100000; i++) printf "%c%c%d\tx\n", 97 + i % 7, 97 + i % 5, i % 97 }' >many.tsv
TB="$(echo "$TV" | sed 's/--data [^ ]*/--data many.tsv/') --valid-fraction 0"
mega train $TB --out X6 >X6.out 2>&1
check "100,000 pairs and 1,024 batch tokens: bytes, the budget named" \
  grep -q "^  vocab     bytes on both sides, one shared table: 100000 training pairs, but a budget of --steps 1 x --max-tokens 1024 = 0.00102 M batch tokens, short of the 5 M" X6.out
mega train $TB --max-tokens 5000000 --out X7 >X7.out 2>&1
check "100,000 pairs and 5 M batch tokens: the source merges, and why" \
  grep -q "^  subwords  [0-9]* byte-pair merges (--bpe 4000) learned .*; the default for 100000 training pairs and a budget of --steps 1 x --max-tokens 5000000 = 5 M batch tokens" X7.out
mega train $TB --max-tokens 5000000 --time-budget 300 --out X8 >X8.out 2>&1
check "... but bytes under --time-budget 300" grep -q "^  vocab     bytes on both sides, one shared table: 100000 training pairs, but a budget of .* and --time-budget 300 s, short of" X8.out
mega train $TB --bpe 30 --out X9 >X9.out 2>&1
check "an explicit --bpe wins over the budget" grep -q "^  subwords  30 byte-pair merges (--bpe 30) learned" X9.out

# ---- Python ------------------------------------------------------------------------------------------
PY=/usr/bin/python3
if PYTHONPATH="$ROOT/python" MEGA_LIB="$B/libmega.so" $PY -c 'import mega' >/dev/null 2>&1; then
  PYTHONPATH="$ROOT/python" MEGA_LIB="$B/libmega.so" $PY -c 'import mega,sys
print(mega._model_file("A").decode(), mega._model_file("A", "last").decode())
b = mega.load("A"); l = mega.load("A", which="last"); print(type(b).__name__, type(l).__name__)' >py.txt 2>&1
  check "Python: which=best names best.safetensors, last the newest; load takes which" test "$(cat py.txt)" = "A/best.safetensors A/step-00000010.model.safetensors
LM LM"
else
  echo "NOTE the Python checks skipped: the package does not import (numpy)"
fi
finish
