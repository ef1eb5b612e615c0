#!/bin/sh
# The classifier from the command line, end to end on a small generated ListOps set:
#   * `mega train --task classify` with the default head (--classifier-dim 0 = 2 x embed-dim)
#     trains and stores the resolved width;
#   * --stop-after then --resume ends with a model byte-identical to an uninterrupted run;
#   * `mega eval --confusion` prints the accuracy and a C x C matrix whose counts sum to the
#     number of examples; `mega predict` prints one known label per example and agrees with it;
#   * bad invocations (a language model given to predict, missing data, --resume on other data)
#     exit 2 with exactly one "mega: error:" line.
# Usage: sh tests/sh/test_classify.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
M="$B/mega"
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_classify_XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
cd "$T" || exit 1

if [ ! -x "$M" ]; then
    echo "FAIL $M not built"
    echo "0 passed, 1 failed"
    exit 1
fi

"$M" listops --out lo --train 240 --valid 30 --test 40 --min-len 10 --max-len 60 --max-depth 3 --seed 3 >/dev/null 2>&1
status $? "mega listops writes the data"

model="--layers 1 --embed-dim 16 --hidden-dim 32 --z-dim 8 --ffn-dim 32 --chunk-size -1 --seq-len 64"
run="--task classify --data lo/train.tsv --valid lo/valid.tsv --steps 12 --batch 8 --eval-every 6 --save-every 6 --threads 1 --quiet"
# shellcheck disable=SC2086
"$M" train $run $model --out A >A.out 2>&1
status $? "train --task classify with the default head exits 0"
[ -s A/model.safetensors ] && [ -s A/train_state.safetensors ] && [ -s A/log.jsonl ]
status $? "the checkpoint directory holds model, train_state and log"
"$M" info --model A >info.out 2>&1
grep -q "classifier-dim 32" info.out
status $? "the default head width is stored resolved: classifier-dim 32 = 2 x embed-dim 16"

# interrupted at step 6, resumed to 12: the same model as the uninterrupted run
# shellcheck disable=SC2086
"$M" train $run $model --out B --stop-after 6 >B1.out 2>&1 && "$M" train $run --out B --resume >B2.out 2>&1
status $? "--stop-after 6, then --resume, exit 0"
if cmp -s A/model.safetensors B/model.safetensors; then ok "resumed model is byte-identical to the uninterrupted run"
else bad "resumed model differs from the uninterrupted run"; fi

"$M" eval --model A --data lo/test.tsv --confusion --quiet >eval.out 2>&1
status $? "eval --confusion exits 0"
grep -Eq "^accuracy [0-9.]+ \([0-9]+/40\)" eval.out
status $? "eval prints the accuracy over the 40 test examples"
# the matrix: a header, then one row per class whose counts sum to the examples
sum=$(sed -n '/^confusion matrix/,$p' eval.out | tail -n +3 | awk '{ for (i = 2; i <= NF; i++) s += $i } END { print s + 0 }')
[ "$sum" -eq 40 ]
status $? "the confusion matrix counts sum to 40 (got $sum)"

"$M" predict --model A --data lo/test.tsv >pred.out 2>pred.err
status $? "predict exits 0"
[ "$(wc -l <pred.out)" -eq 40 ] && ! grep -qv '^[0-9]$' pred.out
status $? "predict prints one label (a ListOps digit) per example"
# the accuracy eval reports is the fraction of predictions equal to the targets
right=$(tail -n +2 lo/test.tsv | cut -f2 | paste -d' ' - pred.out | awk '$1 == $2 { n++ } END { print n + 0 }')
grep -q "($right/40)" eval.out
status $? "predict agrees with eval ($right/40 right)"

# errors
printf 'some text to model, some text to model, some text to model.\n' >text.txt
"$M" train --data text.txt --out L --steps 1 --batch 1 --seq-len 8 --layers 1 --embed-dim 8 --hidden-dim 16 --z-dim 4 \
    --ffn-dim 16 --chunk-size 4 --valid-fraction 0 --quiet >L.out 2>&1
status $? "a tiny language model trains"
expect_error "predict rejects a language model" "" "$M" predict --model L --data lo/test.tsv
expect_error "eval --task classify rejects a language model" "" "$M" eval --task classify --model L --data lo/test.tsv
expect_error "eval names missing data" "" "$M" eval --model A --data lo/missing.tsv
expect_error "predict names a missing model" "" "$M" predict --model nowhere --data lo/test.tsv
expect_error "--resume on other data is refused" "" "$M" train --task classify --data lo/test.tsv --out A --resume --steps 20
finish
