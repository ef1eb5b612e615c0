#!/bin/sh
# `mega train` on fairseq binarized datasets (data-bin/X/train with its dict.txt; docs/interop.md):
# sh tests/sh/test_databin.sh BUILD_DIR
#   * task lm: a word dataset (the fixtures of tests/fixtures/fairseq-bin, written by the official
#     builders through tests/ref/gen_fairseq_bin.py) trains a model whose vocabulary is its
#     dict.txt (word unit), validated on the "valid" split beside "train"; `mega info` names the
#     dictionary, `mega eval` reads the binarized split, `mega generate` prints its words, and
#     --resume continues; a byte dictionary (enwik8-style, with madeupword fillers) gives the
#     byte unit; --valid as text is encoded through the dictionary;
#   * refused with one line: no dict.txt beside the data, a dict.txt of another numbering on
#     --resume, ids outside the dict.txt, a binarized dataset for a run whose model reads bytes,
#     a binarized --valid for byte text.
# Prints "N passed, M failed" last and exits 1 on any failure. -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir databin
F="$ROOT/tests/fixtures/fairseq-bin"
M="--threads 1 --quiet --steps 3 --batch 2 --seq-len 16 --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 16 \
--n-dim 2 --ffn-dim 16 --chunk-size 16 --eval-every 1"

mkdir d b nd wd sd
cp "$F/mmap.bin" d/train.bin && cp "$F/mmap.idx" d/train.idx && cp "$F/dict.txt" d/
cp "$F/cached.bin" d/valid.bin && cp "$F/cached.idx" d/valid.idx # the other index format, same ids

# ---- a word dataset ----------------------------------------------------------------------------
"$MEGA" train --data d/train --out W $M >W.out 2>&1
status $? "mega train --data data-bin/train exits 0"
check "its vocabulary is the dict.txt (56 tokens with the 4 specials), word unit" \
  grep -q "fairseq dictionary: 56 tokens, word unit" W.out
check "it validates on the valid split beside train (309 tokens with the first </s>)" \
  grep -q "309 validation tokens (the valid split)" W.out
check "the validation counts tokens" grep -q "tokens in windows" W.out
"$MEGA" info --model W >info.out 2>&1
check "mega info names the dictionary" grep -q "fairseq dictionary of 56 word tokens" info.out
"$MEGA" eval --model W --data d/valid >eval.out 2>&1
status $? "mega eval reads the binarized valid split"
check "and scores its 308 tokens" grep -q "308 tokens scored" eval.out
"$MEGA" generate --model W --tokens 12 --seed 3 >gen.out 2>/dev/null
status $? "mega generate exits 0"
check "and prints words of the dictionary" sh -c 'tr -s " \n" "\n\n" <gen.out | grep -v "^$" | grep -qxF -f "$0"' \
  "$(cut -d" " -f1 "$F/dict.txt" >words.txt; echo words.txt)"
"$MEGA" train --data d/train --out W --resume --steps 5 --quiet >R.out 2>&1
status $? "--resume continues on the binarized data"
check "to step 5" grep -q '"step": 5' W/log.jsonl

# ---- a byte dictionary with madeupword fillers -------------------------------------------------
# (padded to a multiple of 8 as Dictionary.save writes it: 45 tokens + 4 specials + 7 fillers)
cp "$F/byte_lm/eval.bin" b/train.bin && cp "$F/byte_lm/eval.idx" b/train.idx
{ cat "$F/byte_lm/dict.txt"; for i in 0 1 2 3 4 5 6; do echo "madeupword000$i 0"; done; } >b/dict.txt
"$MEGA" train --data b/train --out B $M >B.out 2>&1
status $? "mega train on a byte dictionary exits 0"
check "the byte unit is detected (the fillers ignored)" grep -q "fairseq dictionary: 56 tokens, byte unit" B.out
check "without a valid split, the held-out tail" grep -q "(held-out tail)" B.out

# ---- --valid as text, encoded through the dictionary --------------------------------------------
head -5 "$F/text.txt" >v.txt
"$MEGA" train --data d/train --valid v.txt --out V $M >V.out 2>&1
status $? "a text --valid with binarized --data exits 0"
n=$(head -5 "$F/ids.txt" | wc -w)
check "the text is the ids fairseq-preprocess gives it ($n + the first </s>)" grep -q "$((n + 1)) validation tokens (--valid)" V.out

# ---- datasets written by the official fairseq-preprocess (tests/ref/gen_fairseq_preprocess.py) ---
P="$F/preprocess"
"$MEGA" train --data "$P/words/train" --out PW $M >PW.out 2>&1
status $? "train on the official preprocess output (words)"
nt=$(wc -w <"$P/words/train.ids") nv=$(wc -w <"$P/words/valid.ids")
check "its dict.txt with the fillers is the vocabulary (56 ids), word unit" grep -q "fairseq dictionary: 56 tokens, word unit" PW.out
check "the training and valid splits are the official reader's ids ($nt, $nv, each + the first </s>)" \
  grep -q "$((nt + 1)) training tokens, $((nv + 1)) validation tokens (the valid split)" PW.out
"$MEGA" eval --model PW --data "$P/words/test" >PWe.out 2>&1
check "mega eval reads the official test split ($(wc -w <"$P/words/test.ids") tokens)" \
  grep -q "$(wc -w <"$P/words/test.ids") tokens scored" PWe.out
"$MEGA" train --data "$P/bytes/train" --out PB $M >PB.out 2>&1
status $? "train on the official preprocess output (bytes, enwik8 form)"
check "its dict.txt gives the byte unit (the fillers ignored)" grep -q "fairseq dictionary: 40 tokens, byte unit" PB.out
if [ -x /usr/bin/python3 ]; then
  # the converter's --unit auto on the official dictionaries (the standard library only; no torch)
  u=$(/usr/bin/python3 -c 'import sys; sys.path.insert(0, sys.argv[1])
from convert_fairseq import read_dict, vocabulary
for d in sys.argv[2:]:
    t = read_dict(d); print(vocabulary(t, len(t) + 4, "auto")[1], end=" ")' "$ROOT/scripts" "$P/bytes/dict.txt" \
    "$P/words/dict.txt" "$P/lra/src-bin/dict.txt" 2>&1)
  [ "$u" = "byte word word " ] && ok "convert_fairseq.py --unit auto: byte, word, word on the official dictionaries" ||
    bad "convert_fairseq.py unit detection on the official dictionaries: '$u'"
else
  echo "NOTE the converter's unit check skipped: no /usr/bin/python3"
fi

# ---- classify on the LRA text layout (src-bin/, label-bin/; the official preprocess output) ------
C="--task classify --threads 1 --quiet --steps 3 --batch 2 --seq-len 32 --layers 1 --embed-dim 16 --z-dim 8 \
--hidden-dim 16 --n-dim 2 --ffn-dim 16 --chunk-size -1 --eval-every 1"
"$MEGA" train --data "$P/lra" $C --out LC >LC.out 2>&1
status $? "mega train --task classify --data LRA-DIR exits 0"
check "the vocabulary is src-bin/dict.txt and <CLS> (24 + 1 ids)" grep -q "vocab-size 25, padding-idx 1" LC.out
check "the train split, validated on the valid split beside it (20 and 5 examples)" \
  grep -q "20 training examples .* 5 validation examples" LC.out
"$MEGA" eval --model LC --data "$P/lra/valid" >LCe.out 2>&1
check "mega eval reads the model's valid split" grep -q "5 examples" LCe.out
"$MEGA" predict --model LC --data "$P/lra/valid" >LCp.out 2>/dev/null
check "mega predict prints one label of label-bin/dict.txt per example" \
  sh -c '[ "$(wc -l <LCp.out)" = 5 ] && cut -d" " -f1 "$0" | grep -qxF -f LCp.out' "$P/lra/label-bin/dict.txt"
"$MEGA" train --data "$P/lra" --out LC --resume --steps 4 --quiet >/dev/null 2>&1
status $? "--resume continues on the LRA layout"
mkdir lo && cp -r "$P/lra/src-bin" "$P/lra/label-bin" lo/
{ sed -n 2p "$P/lra/src-bin/dict.txt"; sed -n 1p "$P/lra/src-bin/dict.txt"; sed -n '3,$p' "$P/lra/src-bin/dict.txt"; } >lo/src-bin/dict.txt
expect_error "classify --resume on another src-bin/dict.txt" "another dictionary" "$MEGA" train --data lo --out LC --resume --steps 6 --quiet
expect_error "classify --resume of an LRA-layout run on text" "reads LRA binarized data" "$MEGA" train --data v.txt --out LC --resume --steps 6 --quiet
printf '1\tsome text\n0\tother text\n1\tmore text\n0\tand more\n' >cls.tsv
"$MEGA" train --data cls.tsv $C --out TC >/dev/null 2>&1
expect_error "classify --resume of a text run on the LRA layout" "reads text" "$MEGA" train --data "$P/lra" --out TC --resume --steps 6 --quiet
expect_error "classify: --valid not in the LRA layout" "must be too" "$MEGA" train --data "$P/lra" --valid cls.tsv $C --out LX

# ---- refusals ------------------------------------------------------------------------------------
cp d/train.* nd/
expect_error "no dict.txt beside the data" "no '" "$MEGA" train --data nd/train --out X $M
check "nothing written" test ! -e X/checkpoint.json
cp d/train.* wd/
{ sed -n 2p d/dict.txt; sed -n 1p d/dict.txt; sed -n '3,$p' d/dict.txt; } >wd/dict.txt
expect_error "another dictionary on --resume" "not the model's dictionary" "$MEGA" train --data wd/train --out W --resume --steps 7 --quiet
cp d/train.* sd/
head -5 d/dict.txt >sd/dict.txt
expect_error "ids outside the dict.txt" "outside the dictionary's 9 ids" "$MEGA" train --data sd/train --out Y $M
printf 'some text for a byte model to read, over and over again.\n' >t.txt
for i in 1 2 3; do cat t.txt t.txt >>t2.txt; done
"$MEGA" train --data t2.txt --out T $M >/dev/null 2>&1
expect_error "binarized data for a run whose model reads bytes" "reads bytes" "$MEGA" train --data d/train --out T --resume --steps 5 --quiet
expect_error "a binarized --valid for byte text" "reads bytes" "$MEGA" train --data t2.txt --valid d/valid --out Z $M
finish
