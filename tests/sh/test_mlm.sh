#!/bin/sh
# Masked-LM pretraining and fine-tuning from the command line (docs/pretraining.md):
#   * `mega train --task mlm` on a small text trains, and a resumed run continues it;
#   * `mega eval` of the run prints the masked-byte accuracy, the loss and the bits per masked
#     byte, the same figures twice (the evaluation's masks come from a fixed seed);
#   * `mega info` names it a masked-LM encoder;
#   * `mega train --task classify --init-from RUN` loads the encoder (the report names the tensors
#     initialised fresh: the head's only) and trains;
#   * refused with one error line: another block configuration (naming the field), a path that
#     is not a run, a language model, a masked-LM model given to classification eval's --images;
#     a pretrained max-positions shorter than the classification data's longest sequence, before
#     the first step (not at the first batch that holds such a sequence), and not once --seq-len
#     cuts the sequences to it; a language model's --max-positions shorter than its --seq-len.
# Usage: sh tests/sh/test_mlm.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
M="$B/mega"
in_temp_dir mlm
[ -x "$M" ] || { bad "$M not built"; finish; }

# a text of words from two made-up languages, and a labelled set of the same words
awk 'BEGIN { srand(3); for (i = 0; i < 3000; i++) { w = ""; n = 3 + int(rand() * 5);
       v = (i % 2) ? "aeiou" : "xyzkq"; for (j = 0; j < n; j++) w = w substr(v, 1 + int(rand() * 5), 1) substr("tnrsl", 1 + int(rand() * 5), 1);
       printf "%s ", w; if (i % 12 == 11) printf "\n" } }' > text.txt
awk 'BEGIN { srand(4); for (i = 0; i < 200; i++) { w = ""; n = 3 + int(rand() * 5);
       v = (i % 2) ? "aeiou" : "xyzkq"; for (j = 0; j < n; j++) w = w substr(v, 1 + int(rand() * 5), 1) substr("tnrsl", 1 + int(rand() * 5), 1);
       printf "%s\t%s\n", (i % 2) ? "soft" : "hard", w } }' > words.tsv

model="--layers 1 --embed-dim 16 --hidden-dim 32 --z-dim 8 --ffn-dim 32 --chunk-size -1"
# shellcheck disable=SC2086
"$M" train --task mlm --data text.txt $model --seq-len 64 --batch 8 --steps 30 --warmup 5 --eval-every 15 --threads 1 --out P --stop-after 15 >p1.out 2>&1 &&
  "$M" train --task mlm --data text.txt --out P --resume --threads 1 >p2.out 2>&1
status $? "train --task mlm, --stop-after 15 then --resume to 30, exit 0"
grep -q '"step": *30' P/checkpoint.json 2>/dev/null || grep -q 'step.*30' P/log.jsonl
status $? "the resumed run reached step 30"
grep -q "valid step     30 .*acc" p2.out
status $? "the validation reports a masked-byte accuracy"

"$M" eval --model P --data text.txt --seq-len 64 --max-bytes 8000 >e1.out 2>&1 && "$M" eval --model P --data text.txt --seq-len 64 --max-bytes 8000 >e2.out 2>&1
status $? "mega eval of the masked-LM run exits 0"
grep -Eq '^masked accuracy 0\.[0-9]{4} \([0-9]+/[0-9]+\) \| loss [0-9.]+ \| bits [0-9.]+ per masked byte \| 8000 bytes' e1.out
status $? "mega eval prints the masked accuracy, loss and bits ($(head -c 100 e1.out))"
n=$(sed -n 's/.*(\([0-9]*\)\/\([0-9]*\)).*/\2/p' e1.out)
[ -n "$n" ] && [ "$n" -gt 1000 ] && [ "$n" -lt 1400 ]
status $? "about 15% of the 8000 bytes are scored ($n)"
[ "$(cut -d'|' -f1-3 e1.out)" = "$(cut -d'|' -f1-3 e2.out)" ]
status $? "the same figures twice (the evaluation's masks are seeded)"
"$M" info --model P >info.out 2>&1 && grep -q "masked-LM encoder" info.out && grep -q "mlm true" info.out
status $? "mega info names a masked-LM encoder"

# shellcheck disable=SC2086
"$M" train --task classify --data words.tsv --init-from P $model --seq-len 64 --batch 8 --steps 6 --warmup 2 --threads 1 --out F >f.out 2>&1
status $? "train --task classify --init-from the run exits 0"
grep -q "^init-from P: loaded [0-9]* of [0-9]* tensors" f.out
status $? "the fine-tuning run reports what it loaded ($(grep -m1 '^init-from' f.out | cut -c1-80))"
fresh=$(sed -n 's/^init-from P: .*initialised fresh [0-9]* ([0-9]* values): //p' f.out)
[ "$fresh" = "classifier.0.0.weight classifier.0.0.bias sentence_projection_layer.weight" ]
status $? "initialised fresh: the classification head only ($fresh)"
"$M" info --model F >fi.out 2>&1 && grep -q "vocab-size 258" fi.out
status $? "the classifier keeps the pretrained vocabulary (bytes, pad, mask: 258)"

# no block flag: the classifier takes the pretrained encoder's (P is 1 layer, D 16, no chunking)
"$M" train --task classify --data words.tsv --init-from P --seq-len 64 --batch 8 --steps 2 --warmup 1 --threads 1 --out A >a.out 2>&1 &&
  "$M" info --model A >ai.out 2>&1 && grep -q "embed-dim 16" ai.out && grep -q "layers 1" ai.out && grep -q "^init-from P: loaded" a.out
status $? "--init-from alone adopts the pretrained block configuration ($(grep -m1 -o 'embed-dim [0-9]*' ai.out))"

# shellcheck disable=SC2086
expect_error "another embedding width" "--embed-dim 24 differs from the pretrained encoder's 16" \
  "$M" train --task classify --data words.tsv --init-from P --layers 1 --embed-dim 24 --hidden-dim 32 --z-dim 8 --ffn-dim 32 --chunk-size -1 --steps 2 --out G
expect_error "another number of layers" "--layers 2 differs" \
  "$M" train --task classify --data words.tsv --init-from P --layers 2 --embed-dim 16 --hidden-dim 32 --z-dim 8 --ffn-dim 32 --chunk-size -1 --steps 2 --out G
expect_error "another mixer" "--mixer mha differs" \
  "$M" train --task classify --data words.tsv --init-from P --mixer mha --layers 1 --embed-dim 16 --hidden-dim 32 --ffn-dim 32 --steps 2 --out G
expect_error "--init-from a path that is not a run" "--init-from: nowhere" \
  "$M" train --task classify --data words.tsv --init-from nowhere --steps 2 --out G
printf 'not a model' > junk.safetensors
expect_error "--init-from a file that is not a model" "junk.safetensors" \
  "$M" train --task classify --data words.tsv --init-from junk.safetensors --steps 2 --out G
"$M" train --task lm --data text.txt --layers 1 --embed-dim 16 --hidden-dim 32 --z-dim 8 --ffn-dim 32 --seq-len 32 --batch 2 --steps 1 --threads 1 --quiet --out L >/dev/null 2>&1
expect_error "--init-from a language model" "not an encoder" \
  "$M" train --task classify --data words.tsv --init-from L --steps 2 --out G
# a language model's windows need --seq-len positions under full attention: raised to them by
# default, refused before the first step when --max-positions says fewer
# shellcheck disable=SC2086
"$M" train --task lm --data text.txt $model --seq-len 1100 --batch 1 --steps 1 --threads 1 --quiet --out L2 >l2.out 2>&1
status $? "train --task lm under full attention with --seq-len 1100 (beyond the default 1024 positions) trains"
# shellcheck disable=SC2086
expect_error "train --task lm: --max-positions shorter than --seq-len" \
  "--task lm: max-positions 1000 (--max-positions) is shorter than the windows of --seq-len 1100" \
  "$M" train --task lm --data text.txt $model --max-positions 1000 --seq-len 1100 --batch 1 --steps 1 --threads 1 --out L3
expect_error "--task mlm on a --data that does not exist" "missing.txt" \
  "$M" train --task mlm --data missing.txt --steps 2 --out H

# a pretrained simple bias of 32 positions (full attention), and labelled lines of up to 60 bytes:
# refused before training, naming the field, the pretrained value and the longest length
# shellcheck disable=SC2086
"$M" train --task mlm --data text.txt $model --max-positions 32 --seq-len 32 --batch 2 --steps 1 --threads 1 --quiet --out P32 >/dev/null 2>&1
awk 'BEGIN { srand(5); for (i = 0; i < 40; i++) { n = (i % 8 == 0) ? 60 : 10; w = "";
       for (j = 0; j < n; j++) w = w substr((i % 2) ? "aeiou" : "xyzkq", 1 + int(rand() * 5), 1);
       printf "%s\t%s\n", (i % 2) ? "soft" : "hard", w } }' > long.tsv
expect_error "--init-from: the pretrained max-positions against the data's longest sequence" \
  "--init-from 'P32': max-positions 32 (the pretrained encoder's) is shorter than the data's longest sequence, 60 tokens: pretrain with --max-positions 60 or more, or cut the longer sequences with --seq-len 32" \
  "$M" train --task classify --data long.tsv --init-from P32 --seq-len 64 --batch 8 --steps 20 --warmup 1 --threads 1 --out G32
check "refused before training: no step ran, no run directory" sh -c '! grep -q "^step" out.txt && test ! -e G32'
"$M" train --task classify --data long.tsv --init-from P32 --seq-len 32 --batch 8 --steps 2 --threads 1 --quiet --out C32 >c32.out 2>&1
status $? "the same with --seq-len 32 (the sequences cut to the pretrained positions) trains"

# the translation model's encoder from the same run: encoder.encoder.* read as encoder.*
awk 'BEGIN { s = 11; for (i = 0; i < 200; i++) { x = ""; y = ""; s = (s * 16807) % 2147483647; L = 2 + s % 4;
    for (k = 0; k < L; k++) { s = (s * 16807) % 2147483647; j = 1 + s % 7; x = x substr("abcdefg", j, 1); y = y substr("bcdefgh", j, 1) }
    print x "\t" y } }' > pairs.tsv
s2s="--task translate --data pairs.tsv --encoder-layers 1 --decoder-layers 1 --embed-dim 16 --hidden-dim 32 --z-dim 8 --ffn-dim 32 --chunk-size -1 --truncation 1024 --bpe 0 --max-tokens 256 --steps 3 --threads 1"
# shellcheck disable=SC2086
"$M" train $s2s --postnorm --init-from P --out S >s.out 2>&1
status $? "train --task translate --init-from the run exits 0"
line=$(grep -m1 '^init-from P: ' s.out)
fresh=$(printf '%s' "$line" | sed 's/.*values)://' | tr ' ' '\n' | grep -v '^$')
n=$(printf '%s\n' "$line" | sed -n 's/^init-from P: loaded \([0-9]*\) of.*/\1/p')
[ -n "$n" ] && [ "$n" -gt 10 ] && ! printf '%s\n' "$fresh" | grep -qv '^decoder\.'
status $? "the translation model loads the encoder ($n tensors, the embedding among them) and draws only the decoder fresh"
# shellcheck disable=SC2086
expect_error "translate: another norm placement" "--prenorm true differs from the pretrained encoder's false" "$M" train $s2s --init-from P --out S2
finish
