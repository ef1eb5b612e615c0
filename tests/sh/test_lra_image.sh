#!/bin/sh
# The official LRA image layout (the lra-image task of the official fairseq/tasks/long_range_arena.py:
# DIR/input/SPLIT.src, pixels 0..255 per line; DIR/label/SPLIT.label, one integer per line;
# docs/interop.md):
#  - `mega train --task classify --data DIR` trains on its train split and validates on its valid
#    split; `mega eval` / `mega predict` read its test split (DIR) or another (DIR/SPLIT) and
#    predict one class per line;
#  - every hostile file is refused with one line naming it (docs/bad-inputs.md);
#  - with torch: the official-format classifier of tests/fixtures/fairseq/lra_img (made by
#    tests/ref/gen_fairseq_img.py with the official modules, pixel_normalization 0.48 0.24)
#    converted by scripts/convert_fairseq.py gives the official predictions, accuracy and loss.
# Usage: sh tests/sh/test_lra_image.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir lra_image

# a layout of 16-pixel images: class 1 bright, class 0 dark
mkdir -p d/input d/label
awk 'BEGIN { srand(3); n["train"] = 32; n["valid"] = 8; n["test"] = 8
  for (s in n) for (i = 0; i < n[s]; i++) { c = i % 2; l = ""
    for (j = 0; j < 16; j++) l = l (j ? " " : "") int(c ? 160 + rand() * 95 : rand() * 95)
    print l > ("d/input/" s ".src"); print c > ("d/label/" s ".label") } }'
"$MEGA" train --task classify --data d --embedding real --embed-dim 16 --layers 1 --chunk-size 8 --steps 40 --batch 8 \
  --lr 0.01 --out m >train.txt 2>&1
status $? "train on the layout: $(tail -n 1 train.txt)"
check "train validates on the valid split (8 images)" grep -q "valid step.*| 8 examples" train.txt
"$MEGA" train --task classify --data d/train --valid d/test --embedding real --embed-dim 16 --layers 1 --chunk-size 8 \
  --steps 1 --batch 8 --out m2 >train2.txt 2>&1
check "train on DIR/SPLIT, validated on DIR/SPLIT: $(tail -n 1 train2.txt)" grep -q "valid step.*| 8 examples" train2.txt
"$MEGA" eval --model m --data d >eval.txt 2>/dev/null
check "eval reads the test split: $(cat eval.txt)" grep -q "^accuracy .* 8 examples, 2 classes" eval.txt
"$MEGA" eval --model m --data d/valid >evalv.txt 2>/dev/null
check "eval reads DIR/SPLIT: $(cat evalv.txt)" grep -q "^accuracy .* 8 examples" evalv.txt
"$MEGA" predict --model m --data d >pred.txt 2>/dev/null
check "predict: one class per test image" test "$(grep -c '^[01]$' pred.txt)" -eq 8

expect_error "an LRA image-layout model given IDX files" "reads --data, not --images" \
  "$MEGA" eval --model m --images x.idx --labels y.idx
"$MEGA" train --task classify --preset lra-image --data d --steps 1 --batch 4 --layers 1 --embed-dim 16 --hidden-dim 16 \
  --z-dim 8 --ffn-dim 16 --classifier-dim 16 --out pm >/dev/null 2>&1 && "$MEGA" eval --model pm --data d >pe.txt 2>/dev/null
check "--preset lra-image reads the layout given as --data" grep -q "^accuracy .* 8 examples" pe.txt

# hostile copies of the test split, each refused with one line
bad_split() { # NAME SRC-LINES LABEL-LINES: the split NAME of d
  printf %b "$2" >"d/input/$1.src"
  printf %b "$3" >"d/label/$1.label"
}
P='1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16'
bad_split word "$P\n1 2 x3 4 5 6 7 8 9 10 11 12 13 14 15 16\n" '0\n1\n'
expect_error "a pixel that is not an integer" "line 2: pixel 3 is 'x3', not an integer 0..255" "$MEGA" eval --model m --data d/word
bad_split big "$P\n1 2 3 256 5 6 7 8 9 10 11 12 13 14 15 16\n" '0\n1\n'
expect_error "a pixel above 255" "pixel 4 is '256'" "$MEGA" eval --model m --data d/big
bad_split neg "-1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n" '0\n'
expect_error "a negative pixel" "pixel 1 is '-1'" "$MEGA" eval --model m --data d/neg
bad_split long "$P\n$P 17\n" '0\n1\n'
expect_error "images of two sizes" "line 2: 17 pixels but line 1 has 16" "$MEGA" eval --model m --data d/long
bad_split empty "$P\n\n" '0\n1\n'
expect_error "an empty line" "line 2: no pixels" "$MEGA" predict --model m --data d/empty
bad_split fewer "$P\n$P\n" '0\n'
expect_error "fewer labels than images" "fewer lines than" "$MEGA" eval --model m --data d/fewer
bad_split more "$P\n" '0\n1\n'
expect_error "more labels than images" "more lines than the 1 images" "$MEGA" eval --model m --data d/more
bad_split lab "$P\n" 'cat\n'
expect_error "a label that is not an integer" "label 'cat' is not an integer" "$MEGA" eval --model m --data d/lab
bad_split unk "$P\n" '7\n'
expect_error "a label that is not a class of the model" "7" "$MEGA" eval --model m --data d/unk
bad_split none "" ""
expect_error "no images" "no images" "$MEGA" eval --model m --data d/none
awk 'BEGIN { for (i = 0; i <= 1048576; i++) printf "0 "; print "" }' >d/input/huge.src
echo 0 >d/label/huge.label
expect_error "a line of more than 2^20 pixels" "more than 1048576 pixels" "$MEGA" eval --model m --data d/huge
expect_error "a split that is not there" "nosuch.src" "$MEGA" eval --model m --data d/nosuch
expect_error "neither the layout nor DIR/SPLIT" "not a directory with input/ and label/" "$MEGA" eval --model m --data nodir/test
rm d/label/word.label
expect_error "a split without its label file" "word.label" "$MEGA" eval --model m --data d/word
mkdir -p w/input w/label
awk 'BEGIN { for (i = 0; i < 24; i++) printf "%d ", i; print "" }' >w/input/test.src
echo 1 >w/label/test.label
"$MEGA" train --task classify --data d --embedding real --embed-dim 16 --layers 1 --chunk-size 8 --steps 1 --batch 8 \
  --seq-len 16 --out m16 >/dev/null 2>&1
expect_error "images longer than the model's length" "images of 24 pixels, but the model takes at most 16" \
  "$MEGA" eval --model m16 --data w

# an official lra-image checkpoint (torch needed to unpickle it)
need_torch test_lra_image.sh
X="$ROOT/tests/fixtures/fairseq/lra_img"
"$PY" "$ROOT/scripts/convert_fairseq.py" --checkpoint "$X/model.pt" --out c >conv.txt 2>&1
status $? "convert the official lra-image checkpoint: $(cat conv.txt)"
"$PY" - "$X/expected.json" c/model.safetensors >want.txt <<'EOF'
import json, struct, sys
e = json.load(open(sys.argv[1]))
f = open(sys.argv[2], "rb")
meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]
v = json.loads(meta["vocab"])
# the checkpoint's pixel_normalization, stored as an image classifier of the tool stores it
assert v["kind"] == "pixels" and v["real"] and (v["mean"], v["std"]) == (0.48, 0.24), v
assert meta["data-format"] == "lra-image", meta
print("accuracy %.4f" % e["accuracy"], "loss %.4f" % e["loss"])
print("\n".join(map(str, e["predictions"])))
EOF
status $? "the converted model stores mean 0.48, std 0.24 and the lra-image format"
"$MEGA" eval --model c --data "$X/data" >ceval.txt 2>/dev/null
check "eval: the official accuracy and loss ($(head -n 1 want.txt)): $(cat ceval.txt)" \
  grep -q "^$(head -n 1 want.txt | sed 's/ loss/ ([0-9\/]*) | loss/')" ceval.txt
"$MEGA" predict --model c --data "$X/data/test" >cpred.txt 2>/dev/null
check "predict: the official predictions ($(tail -n +2 want.txt | tr '\n' ' '))" \
  sh -c 'tail -n +2 want.txt | cmp -s - cpred.txt'
finish
