#!/bin/sh
# mega quantize (q8_0 weights, docs/quantization.md): sh tests/sh/test_quantize.sh BUILD_DIR
#   * a small trained run quantized: the file at most 0.35x the float one (small widths keep
#     more of their float32 vectors than the released models), mega info names q8_0, the held-out
#     loss within 0.01 nats/byte of the float model (and not identical: the int8 products ran);
#   * mega generate and the Python package load it; --resume of a quantized run refuses in one line;
#   * refused: quantizing a quantized model, an unknown --type, a truncated file.
# Prints "N passed, M failed" last and exits 1 on any failure. -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir quantize
TO=""
command -v timeout >/dev/null 2>&1 && TO="timeout -k 5 120"
mega() { $TO "$MEGA" "$@"; }
cp "$ROOT/tests/fixtures/runs/lm_v010/data.txt" data.txt || { bad "no data"; finish; }

mega train --data data.txt --threads 1 --quiet --layers 2 --embed-dim 64 --z-dim 32 --hidden-dim 80 --n-dim 4 \
  --ffn-dim 48 --chunk-size 16 --seq-len 32 --batch 4 --steps 30 --lr 3e-3 --eval-every 0 --out F >train.out 2>&1
status $? "train a small model"
mega quantize --model F --out Q >q.out 2>&1
status $? "mega quantize --model F --out Q"
check "it reports 12 matrices" grep -q "12 matrices in q8_0" q.out
fs=$(wc -c <F/model.safetensors) qs=$(wc -c <Q/model.safetensors)
check "the file is at most 0.35x the float32 one ($qs / $fs bytes)" test $((qs * 100)) -le $((fs * 35))
mega info --model Q >info.txt 2>&1
check "mega info names q8_0" grep -q "^weights    q8_0: 12 matrices" info.txt
mega info --model F >infof.txt 2>&1
check "mega info of the float model says float32" grep -q "^weights    float32" infof.txt
mega eval --model F --data data.txt --threads 1 --quiet >ef.txt 2>&1
mega eval --model Q --data data.txt --threads 1 --quiet >eq.txt 2>&1
lf=$(sed -n 's/^loss \([0-9.]*\) .*/\1/p' ef.txt) lq=$(sed -n 's/^loss \([0-9.]*\) .*/\1/p' eq.txt)
check "held-out loss: q8_0 $lq vs float32 $lf nats/byte, within 0.01 and not identical" \
  awk -v a="$lf" -v b="$lq" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 0.01 && a != b) }'
mega generate --model Q --prompt "The " --tokens 40 --seed 3 --quiet >gen.txt 2>&1
status $? "mega generate on the quantized model"
check "it generated 40 bytes after the prompt" test "$(wc -c <gen.txt)" -ge 40
mkdir R && cp F/* R/ && for f in R/*model.safetensors; do cp Q/model.safetensors "$f"; done
ERR_RC=any expect_error "--resume of a run whose model is quantized refuses" "quantized" mega train --data data.txt --out R --resume --steps 40
expect_error "quantizing a quantized model refuses" "already quantized" mega quantize --model Q --out QQ
expect_error "an unknown --type refuses" "q4_7" mega quantize --model F --out Q4 --type q4_7
head -c $(($(wc -c <Q/model.safetensors) - 100)) Q/model.safetensors >trunc.safetensors
expect_error "a truncated quantized file refuses" "" mega eval --model trunc.safetensors --data data.txt

PY=/usr/bin/python3
if PYTHONPATH="$ROOT/python" MEGA_LIB="$B/libmega.so" $PY -c 'import mega' >/dev/null 2>&1; then
  PYTHONPATH="$ROOT/python" MEGA_LIB="$B/libmega.so" $PY -c 'import mega
m = mega.load("Q"); print(type(m).__name__, len(m.generate(b"The ", 10, seed=3)))' >py.txt 2>&1
  check "Python: mega.load reads the quantized model and generates" test "$(cat py.txt)" = "LM 10"
else
  echo "NOTE the Python check skipped: the package does not import (numpy)"
fi
finish
