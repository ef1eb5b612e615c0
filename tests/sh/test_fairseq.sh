#!/bin/sh
# Official fairseq checkpoints (scripts/convert_fairseq.py, docs/interop.md):
#   sh tests/sh/test_fairseq.sh BUILD_DIR
# On the official-format fixture of tests/fixtures/fairseq/ (made by tests/ref/gen_fairseq.py with
# the official Mega modules; its pickle holds an official fairseq meters object, so loading it
# without fairseq is exercised):
#  - the converted model's logits (through the Python package) equal the official logits;
#  - `mega eval` of the converted model on eval.txt prints the bits per byte of the official
#    evaluation (eval.json: fairseq_cli/eval_mega_lm.py's procedure);
#  - word-level LMs with adaptive input and adaptive softmax (word_lm/: tied weights and projections
#    as mega_lm_wiki103; word_lm_untied/: an embedding table and an untied adaptive softmax): the
#    converted model's log-probabilities equal the official get_log_prob, `mega eval` prints the
#    official perplexity, `mega generate` continues a word prompt, and a checkpoint whose tied
#    tensors differ, or whose adaptive input has no cutoff, is refused;
#  - a translation model (mt/: arch mega_wmt_en_de, made from a case of the official MegaModel):
#    its logits equal the official ones (build/test_dump_logits --s2s), `mega translate` translates
#    word input with the two dictionaries (--remove-bpe joins the subword pieces) and the Python
#    package's translate gives the same lines, `mega eval --task
#    translate` refuses it clearly, and a missing or wrong-size target dictionary is refused;
#  - an LRA ListOps classifier (lra_cls/): the converted model's logits equal the official ones, its
#    Python encoding of text lines equals the ids of the official lra-text task, its classes are the
#    label dictionary's; on the official LRA data layout (src-bin/, label-bin/: binarized by the
#    official Binarizer) `mega predict` prints the official predictions and `mega eval` the official
#    accuracy and loss; another dictionary, another label dictionary, two texts for a one-text model,
#    label ids outside the label dictionary and a missing split are refused with one line;
#  - `mega eval` on a fairseq binarized copy of eval.txt (tests/fixtures/fairseq-bin/byte_lm, made by
#    the official Binarizer) prints the text's figures; a dataset beside another dict.txt, a truncated
#    index, an id outside the dictionary, --max-bytes and a byte model are refused with one line;
#  - a byte dict.txt as fairseq's Dictionary.save writes it (madeupword fillers with counts of 0;
#    a '#fairseq:overwrite' repeat) is still found to be a byte dictionary, and with the fillers
#    converts to the fixture's model (the official evaluation's figures);
#  - malformed input (garbage and truncated .pt, a dict.txt with a bad line or a duplicate, a
#    dictionary of the wrong size, another architecture, missing files) is refused with one line,
#    exit 2, and nothing written.
# Needs /usr/bin/python3 with torch and numpy (CI installs them); else a NOTE and no checks.
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")/../.." && pwd)
FX="$HERE/tests/fixtures/fairseq/byte_lm"
CONV="$HERE/scripts/convert_fairseq.py"
need_torch test_fairseq.sh
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM

"$PY" "$CONV" --checkpoint "$FX/model.pt" --dict "$FX/dict.txt" --out "$T/m" >"$T/out" 2>&1; rc=$?
[ $rc -eq 0 ] && [ -s "$T/m/model.safetensors" ] && ok "converted: $(cat "$T/out")" || { bad "conversion failed: $(cat "$T/out")"; finish; }
"$B/mega" info --model "$T/m" >"$T/info" 2>&1
grep -q "fairseq dictionary of 56 byte tokens" "$T/info" && ok "mega info reads the converted model" || bad "mega info: $(cat "$T/info")"

# lm_logits LABEL FIXTURE_DIR MODEL_DIR: the converted LM's logits (Python binding) against the
# fixture's official ones (expected.safetensors: tokens, logits), tolerance 1e-4 relative
lm_logits() {
  PYTHONPATH="$HERE/python" MEGA_LIB="$B/libmega.so" "$PY" - "$2" "$3" <<'EOF' >"$T/py" 2>&1
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "..", "..", "..", "ref"))
import numpy as np
import st
import mega
ref, _ = st.load(os.path.join(sys.argv[1], "expected.safetensors"))
m = mega.load(sys.argv[2])
got = m.logits(ref["tokens"])
err = float(np.abs(got - ref["logits"]).max() / np.abs(ref["logits"]).max())
print("logits", "ok" if got.shape == ref["logits"].shape and err <= 1e-4 else "BAD", "max relative error %.2e" % err)
EOF
  line=$(grep '^logits' "$T/py")
  case "$line" in "logits ok"*) ok "$1$line (official logits, tolerance 1e-4)" ;; *) bad "$1logits: ${line:-$(tail -3 "$T/py")}" ;; esac
}
lm_logits "" "$FX" "$T/m"

want=$("$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.6f %d" % (j["loss_base2"], j["count"]))' "$FX/eval.json")
got=$("$B/mega" eval --model "$T/m" --data "$FX/eval.txt" --quiet 2>"$T/err" | sed -n 's/.*bits per byte \([0-9.]*\) .*| \([0-9]*\) tokens scored.*/\1 \2/p')
"$PY" -c 'import sys; g, w = sys.argv[1].split(), sys.argv[2].split(); sys.exit(0 if len(g) == 2 and g[1] == w[1] and abs(float(g[0]) - float(w[0])) <= 1e-4 * float(w[0]) else 1)' "$got" "$want" &&
  ok "mega eval = the official evaluation: $got vs $want (bits/byte, tokens)" || bad "mega eval: got '$got' want '$want' $(cat "$T/err")"

# fairseq binarized data (tests/fixtures/fairseq-bin/byte_lm: eval.txt binarized by the official
# Binarizer and MMapIndexedDatasetBuilder with the fixture's dict.txt, tests/ref/gen_fairseq_bin.py):
# `mega eval` on it, named by its prefix, .idx or .bin, prints the text's figures; --lengths too
BX="$HERE/tests/fixtures/fairseq-bin/byte_lm"
scored() { sed -n 's/^\(loss .* tokens scored\) .*/\1/p'; }
text=$("$B/mega" eval --model "$T/m" --data "$FX/eval.txt" --quiet 2>&1 | scored)
for d in "$BX/eval" "$BX/eval.idx" "$BX/eval.bin"; do
  got=$("$B/mega" eval --model "$T/m" --data "$d" --quiet 2>"$T/err" | scored)
  [ -n "$got" ] && [ "$got" = "$text" ] && ok "binarized data (${d#"$HERE/"}) = the text: $got" ||
    bad "binarized data ${d#"$HERE/"}: got '$got' want '$text' $(cat "$T/err")"
done
"$B/mega" eval --model "$T/m" --data "$FX/eval.txt" --lengths 8,16 >"$T/lt" 2>"$T/err"
"$B/mega" eval --model "$T/m" --data "$BX/eval" --lengths 8,16 >"$T/lb" 2>>"$T/err"
[ "$(wc -l <"$T/lt")" -eq 3 ] && cmp -s "$T/lt" "$T/lb" && ok "binarized data: --lengths table = the text's" ||
  bad "binarized --lengths: $(cat "$T/lb" "$T/err")"
# refusals: exit 2 and one line naming the problem
eval_refused() { # NAME PATTERN ARGS...
  name=$1 pat=$2; shift 2
  "$B/mega" eval --quiet "$@" >"$T/out" 2>"$T/err"; rc=$?
  [ $rc -eq 2 ] && grep -q "$pat" "$T/err" && [ "$(wc -l <"$T/err")" -eq 1 ] && ok "binarized data refused: $name ($(cat "$T/err"))" ||
    bad "binarized data, $name: rc $rc, $(head -3 "$T/err")"
}
mkdir -p "$T/other" "$T/trunc"
cp "$BX/eval.idx" "$BX/eval.bin" "$T/other/" && cp "$HERE/tests/fixtures/fairseq-bin/dict.txt" "$T/other/"
eval_refused "beside another dict.txt" "not the model's dictionary" --model "$T/m" --data "$T/other/eval"
head -c 40 "$BX/eval.idx" >"$T/trunc/eval.idx" && cp "$BX/eval.bin" "$T/trunc/"
eval_refused "truncated index" "is truncated" --model "$T/m" --data "$T/trunc/eval.idx"
"$PY" - "$T/oor" <<'PYEOF'
import struct, sys
ids = [4, 5, 60000, 2]  # 60000: not an id of a 56-token dictionary
open(sys.argv[1] + ".bin", "wb").write(struct.pack("<4H", *ids))
open(sys.argv[1] + ".idx", "wb").write(b"MMIDIDX\x00\x00" + struct.pack("<QBQiq", 1, 8, 1, 4, 0))
PYEOF
eval_refused "an id outside the dictionary" "id 60000, outside the dictionary's 56 ids" --model "$T/m" --data "$T/oor.bin"
eval_refused "--max-bytes" "not of a binarized dataset" --model "$T/m" --data "$BX/eval" --max-bytes 10
eval_refused "a byte model" "only a model converted from a fairseq" --model "$HERE/tests/fixtures/runs/lm_v010" --data "$BX/eval"

# dict.txt as fairseq's Dictionary.save writes it: the madeupword fillers of pad_to_multiple_(8)
# with their counts of 0 (the fixture's dict.txt leaves them out); the unit is still found to be
# byte, and the model is the fixture's bit for bit, so `mega eval` prints the official figures
{ cat "$FX/dict.txt"; i=0; while [ $i -lt 7 ]; do printf 'madeupword%04d 0\n' $i; i=$((i + 1)); done; } >"$T/fill.txt"
"$PY" "$CONV" --checkpoint "$FX/model.pt" --dict "$T/fill.txt" --out "$T/fill" >"$T/out" 2>&1
grep -q "56 tokens (byte unit)" "$T/out" && cmp -s "$T/fill/model.safetensors" "$T/m/model.safetensors" &&
  ok "dict.txt with fillers: byte unit detected, the same model as the fixture's: $(cat "$T/out")" || bad "dict.txt with fillers: $(cat "$T/out")"
"$PY" "$CONV" --checkpoint "$FX/model.pt" --dict "$T/fill.txt" --out "$T/fillb" --unit byte >"$T/out" 2>&1
cmp -s "$T/fill/model.safetensors" "$T/fillb/model.safetensors" && ok "dict.txt with fillers: auto = --unit byte" || bad "dict.txt with fillers, --unit byte: $(cat "$T/out")"
got=$("$B/mega" eval --model "$T/fill" --data "$FX/eval.txt" --quiet 2>"$T/err" | sed -n 's/.*bits per byte \([0-9.]*\) .*| \([0-9]*\) tokens scored.*/\1 \2/p')
"$PY" -c 'import sys; g, w = sys.argv[1].split(), sys.argv[2].split(); sys.exit(0 if len(g) == 2 and g[1] == w[1] and abs(float(g[0]) - float(w[0])) <= 1e-4 * float(w[0]) else 1)' "$got" "$want" &&
  ok "dict.txt with fillers: mega eval = the official evaluation: $got vs $want (bits/byte, tokens)" || bad "dict.txt with fillers, mega eval: got '$got' want '$want' $(cat "$T/err")"
# the last filler replaced by a byte token repeated with '#fairseq:overwrite' (add_from_file gives
# the repeat a new id, which then spells the byte): still a byte dictionary, the repeat at id 55
{ cat "$FX/dict.txt"; i=0; while [ $i -lt 6 ]; do printf 'madeupword%04d 0\n' $i; i=$((i + 1)); done; echo "32 0 #fairseq:overwrite"; } >"$T/over.txt"
"$PY" "$CONV" --checkpoint "$FX/model.pt" --dict "$T/over.txt" --out "$T/over" >"$T/out" 2>&1
tok=$("$PY" - "$T/over/model.safetensors" <<'EOF' 2>&1
import json, struct, sys
f = open(sys.argv[1], "rb")
n = struct.unpack("<Q", f.read(8))[0]
v = json.loads(json.loads(f.read(n))["__metadata__"]["vocab"])
print(v["unit"], len(v["tokens"]), v["tokens"][4], v["tokens"][55])
EOF
)
grep -q "56 tokens (byte unit)" "$T/out" && [ "$tok" = "byte 56 32 32" ] && ok "dict.txt with '#fairseq:overwrite': byte unit, the repeat at id 55 ($tok)" ||
  bad "dict.txt with '#fairseq:overwrite': $(cat "$T/out") [$tok]"

# refusals: exit 2, one line naming the problem, no output
refuse() { # NAME PATTERN ARGS...
  name=$1 pat=$2; shift 2
  rm -rf "$T/r"
  "$PY" "$CONV" "$@" --out "$T/r" >"$T/out" 2>"$T/err"; rc=$?
  if [ $rc -eq 2 ] && grep -q "$pat" "$T/err" && [ "$(wc -l <"$T/err")" -eq 1 ] && [ ! -e "$T/r/model.safetensors" ]; then
    ok "refused: $name ($(cat "$T/err"))"
  else
    bad "$name: rc $rc, stderr: $(head -3 "$T/err")"
  fi
}
head -c 300 /dev/urandom >"$T/garbage.pt"
head -c 20000 "$FX/model.pt" >"$T/trunc.pt"
refuse "garbage .pt" "not a readable PyTorch checkpoint" --checkpoint "$T/garbage.pt" --dict "$FX/dict.txt"
refuse "truncated .pt" "not a readable PyTorch checkpoint" --checkpoint "$T/trunc.pt" --dict "$FX/dict.txt"
refuse "missing .pt" "no such file" --checkpoint "$T/none.pt" --dict "$FX/dict.txt"
refuse "missing dict" "no such file" --checkpoint "$FX/model.pt" --dict "$T/none.txt"
{ head -n 3 "$FX/dict.txt"; echo "justonetoken"; } >"$T/badline.txt"
refuse "dict line without a count" "expected 'token count'" --checkpoint "$FX/model.pt" --dict "$T/badline.txt"
{ cat "$FX/dict.txt"; head -n 1 "$FX/dict.txt"; } >"$T/dup.txt"
refuse "duplicate token" "duplicate token" --checkpoint "$FX/model.pt" --dict "$T/dup.txt"
head -n 20 "$FX/dict.txt" >"$T/short.txt"
refuse "dictionary smaller than the embedding" "more than the dictionary" --checkpoint "$FX/model.pt" --dict "$T/short.txt"
{ cat "$FX/dict.txt"; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "x$i 1"; done; } >"$T/long.txt"
refuse "dictionary larger than the embedding" "but the model's embedding has 56 rows" --checkpoint "$FX/model.pt" --dict "$T/long.txt"
"$PY" - "$FX/model.pt" "$T/mt.pt" "$T/lra_tf.pt" <<'EOF' 2>/dev/null
import argparse, sys, torch
torch.save({"args": argparse.Namespace(arch="transformer_wmt_en_de", task="translation"), "model": {"x": torch.zeros(2)}}, sys.argv[2])
torch.save({"args": argparse.Namespace(arch="transformer_lra_listop", task="lra-text"), "model": {"x": torch.zeros(2)}}, sys.argv[3])
EOF
refuse "another architecture" "architecture 'transformer_wmt_en_de'" --checkpoint "$T/mt.pt" --dict "$FX/dict.txt"

# ---- word LMs with adaptive input / adaptive softmax ----
for v in word_lm word_lm_untied; do
  WX="$HERE/tests/fixtures/fairseq/$v"
  "$PY" "$CONV" --checkpoint "$WX/model.pt" --dict "$WX/dict.txt" --out "$T/$v" >"$T/out" 2>&1
  [ $? -eq 0 ] && [ -s "$T/$v/model.safetensors" ] && ok "$v converted: $(cat "$T/out")" || { bad "$v conversion: $(cat "$T/out")"; continue; }
  lm_logits "$v " "$WX" "$T/$v"
  want=$("$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.4f %d" % (j["perplexity"], j["count"]))' "$WX/eval.json")
  got=$("$B/mega" eval --model "$T/$v" --data "$WX/eval.txt" --quiet 2>"$T/err" | sed -n 's/.*perplexity \([0-9.]*\) | \([0-9]*\) tokens scored.*/\1 \2/p')
  [ -n "$got" ] && [ "$got" = "$want" ] && ok "$v: mega eval = the official evaluation: perplexity and tokens $got" ||
    bad "$v mega eval: got '$got' want '$want' $(cat "$T/err")"
  out=$("$B/mega" generate --model "$T/$v" --prompt "the words" -n 6 --seed 1 2>"$T/err")
  [ $? -eq 0 ] && [ "$(printf "%s" "$out" | wc -w)" -ge 4 ] && [ "${out#the words}" != "$out" ] && ok "$v: mega generate continues a word prompt: $(printf '%s' "$out" | tr '\n' ' ')" ||
    bad "$v generate: '$out' $(cat "$T/err")"
done
WX="$HERE/tests/fixtures/fairseq/word_lm"
"$PY" - "$CONV" "$WX/model.pt" "$T/untie.pt" "$T/nocut.pt" <<'EOF' 2>"$T/err"
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("conv", sys.argv[1])
conv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conv)
ck = conv.load_checkpoint(sys.argv[2])  # the converter's fairseq-free loader
sd = dict(ck["model"])
sd["decoder.adaptive_softmax.tail.0.2.weight"] = sd["decoder.adaptive_softmax.tail.0.2.weight"].clone() + 1
torch.save({"args": ck["args"], "model": sd}, sys.argv[3])
a = ck["args"]
a.adaptive_input_cutoff = None
torch.save({"args": a, "model": ck["model"]}, sys.argv[4])
EOF
refuse "tied adaptive tensors that differ" "differs from it" --checkpoint "$T/untie.pt" --dict "$WX/dict.txt"
refuse "adaptive input without cutoffs" "adaptive_input_cutoff is not" --checkpoint "$T/nocut.pt" --dict "$WX/dict.txt"

# ---- a translation model (mt: mega_wmt_en_de, the official MegaModel's weights and logits) ----
MX="$HERE/tests/fixtures/fairseq/mt"
"$PY" "$CONV" --checkpoint "$MX/model.pt" --dict "$MX/dict.en.txt" --tgt-dict "$MX/dict.de.txt" --out "$T/mt" >"$T/out" 2>&1
[ $? -eq 0 ] && [ -s "$T/mt/model.safetensors" ] && ok "translation model converted: $(cat "$T/out")" || bad "mt conversion: $(cat "$T/out")"
line=$("$B/test_dump_logits" --s2s "$T/mt" "$MX/expected.safetensors" 2>&1)
"$PY" -c 'import sys; e = float(sys.argv[1].split()[-1]); sys.exit(0 if e <= 1e-4 else 1)' "$line" 2>/dev/null &&
  ok "translation $line (official MegaModel logits, tolerance 1e-4)" || bad "translation logits: $line"
printf '<en01> <en02> <en03>\n<en05> zz <en07>\n' >"$T/src.txt"
"$B/mega" translate --model "$T/mt" --input "$T/src.txt" --beam 4 >"$T/hyp" 2>"$T/err"; rc=$?
"$B/mega" translate --model "$T/mt" --input "$T/src.txt" --beam 4 --remove-bpe >"$T/hyp2" 2>>"$T/err"
sed -e 's/@@ //g' -e 's/@@$//' "$T/hyp" >"$T/hyp1"
[ $rc -eq 0 ] && [ "$(wc -l <"$T/hyp")" -eq 2 ] && grep -q '^de[0-9]' "$T/hyp" && cmp -s "$T/hyp1" "$T/hyp2" &&
  ok "mega translate with fairseq dictionaries: $(head -1 "$T/hyp" | cut -c1-60) ...; --remove-bpe joins the pieces" ||
  bad "mega translate (mt): rc $rc $(cat "$T/hyp" "$T/hyp2" "$T/err" | head -5)"
# the Python package's translate: the same lines as `mega translate`, with and without --remove-bpe
PYTHONPATH="$HERE/python" MEGA_LIB="$B/libmega.so" "$PY" - "$T/mt" "$T/src.txt" "$T/hyp" "$T/hyp2" <<'EOF' >"$T/py" 2>&1
import sys
import mega
t = mega.load(sys.argv[1])
src = open(sys.argv[2]).read().splitlines()
want = [open(f).read().split("\n")[:-1] for f in sys.argv[3:5]]
got = [t.translate(src, beam=4), t.translate(src, beam=4, remove_bpe=True)]
print("translate", "ok" if got == want else "BAD", got[0][:1], "" if got == want else want)
EOF
line=$(grep '^translate' "$T/py")
case "$line" in "translate ok"*) ok "Python $line = mega translate (fairseq dictionaries, --remove-bpe too)" ;; *) bad "Python translate (mt): ${line:-$(tail -3 "$T/py")}" ;; esac
printf 'a\tb\n' >"$T/pairs.tsv"
"$B/mega" eval --task translate --model "$T/mt" --data "$T/pairs.tsv" >"$T/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "converted from an official checkpoint" "$T/out" && ok "mega eval --task translate on a converted model: a clear refusal" ||
  bad "mega eval (mt): rc $rc $(cat "$T/out")"
refuse "translation without --tgt-dict" "needs --dict.*--tgt-dict" --checkpoint "$MX/model.pt" --dict "$MX/dict.en.txt"
head -n 10 "$MX/dict.de.txt" >"$T/de10.txt"
refuse "translation target dictionary of the wrong size" "embedding has 28 rows" --checkpoint "$MX/model.pt" --dict "$MX/dict.en.txt" --tgt-dict "$T/de10.txt"

# ---- an LRA classifier (lra_cls: mega_lra_listop, official LRAModel + MegaLRAEncoder) ----
LX="$HERE/tests/fixtures/fairseq/lra_cls"
"$PY" "$CONV" --checkpoint "$LX/model.pt" --dict "$LX/dict.txt" --label-dict "$LX/label_dict.txt" --out "$T/c" >"$T/out" 2>&1
[ $? -eq 0 ] && [ -s "$T/c/model.safetensors" ] && ok "LRA classifier converted: $(cat "$T/out")" || bad "LRA conversion: $(cat "$T/out")"
"$B/mega" info --model "$T/c" >"$T/info" 2>&1
grep -q "kind       mega_cls" "$T/info" && grep -q "padding-idx 1" "$T/info" && ok "mega info reads the converted classifier" || bad "mega info (LRA): $(head -3 "$T/info")"
"$B/mega" eval --model "$T/c" --data "$LX/text.txt" >"$T/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "converted from an official LRA checkpoint: --data names the lra-text task's data directory" "$T/out" &&
  ok "mega eval of a converted classifier on a text file: a clear refusal (it reads the official binarized data)" || bad "mega eval (LRA text): rc $rc $(cat "$T/out")"
# the official LRA data layout (tests/fixtures/fairseq-bin/lra: text.txt and its labels binarized by
# the official Binarizer into src-bin/ and label-bin/, tests/ref/gen_fairseq_bin.py): `mega predict`
# prints the official model's predictions, `mega eval` its accuracy and loss, named DIR or DIR/test,
# with the classes named by the checkpoint (--label-dict) or, without, by label-bin/dict.txt
LB="$HERE/tests/fixtures/fairseq-bin/lra"
"$PY" "$CONV" --checkpoint "$LX/model.pt" --dict "$LX/dict.txt" --out "$T/c0" >"$T/out" 2>&1 || bad "LRA conversion without --label-dict: $(cat "$T/out")"
"$PY" -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["predictions"]))' "$LB/expected.json" >"$T/want_pred"
want=$("$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print("%.4f (%d/%d) %.6f" % (j["accuracy"], j["correct"], j["count"], j["loss"]))' "$LB/expected.json")
for m in c c0; do
  for d in "$LB" "$LB/test"; do
    "$B/mega" predict --model "$T/$m" --data "$d" >"$T/pred" 2>"$T/err"
    cmp -s "$T/pred" "$T/want_pred" && ok "LRA data (${d#"$HERE/"}, model $m): mega predict = the official predictions: $(tr '\n' ' ' <"$T/pred")" ||
      bad "LRA mega predict ($m, $d): $(tr '\n' ' ' <"$T/pred") want $(tr '\n' ' ' <"$T/want_pred") $(cat "$T/err")"
  done
  got=$("$B/mega" eval --model "$T/$m" --data "$LB" --quiet 2>"$T/err" | sed -n 's/^accuracy \([0-9.]* ([0-9]*\/[0-9]*)\) | loss \([0-9.]*\) .*/\1 \2/p')
  "$PY" -c 'import sys; g, w = sys.argv[1].split(), sys.argv[2].split(); sys.exit(0 if len(g) == 3 and g[:2] == w[:2] and abs(float(g[2]) - float(w[2])) <= 1e-4 * float(w[2]) else 1)' "$got" "$want" &&
    ok "LRA data (model $m): mega eval = the official accuracy and loss: $got vs $want" || bad "LRA mega eval ($m): got '$got' want '$want' $(cat "$T/err")"
done
# refusals: exit 2, one line naming the problem
lra_refused() { # NAME PATTERN DIR
  "$B/mega" eval --model "$T/c" --data "$3" --quiet >"$T/out" 2>"$T/err"; rc=$?
  [ $rc -eq 2 ] && grep -q "$2" "$T/err" && [ "$(wc -l <"$T/err")" -eq 1 ] && ok "LRA data refused: $1 ($(cat "$T/err"))" ||
    bad "LRA data, $1: rc $rc, $(head -3 "$T/err")"
}
for k in dict labels pair count split; do mkdir -p "$T/lra_$k" && cp -r "$LB/src-bin" "$LB/label-bin" "$T/lra_$k/"; done
sed -i -e 's/^\[MAX /[MAXX /' "$T/lra_dict/src-bin/dict.txt"
lra_refused "another src-bin/dict.txt" "id 5 is '\[MAXX' but the model's id 5 is '\[MAX' (another dictionary)" "$T/lra_dict"
{ sed -n 2p "$LX/label_dict.txt"; sed -n 1p "$LX/label_dict.txt"; sed -n '3,$p' "$LX/label_dict.txt"; } >"$T/lra_labels/label-bin/dict.txt"
lra_refused "another label dictionary" "label 0 is '0' but the model's class 0 is '3'" "$T/lra_labels"
cp -r "$LB/src-bin" "$T/lra_pair/src1-bin"
lra_refused "two texts for a one-text model" "two texts per example (src1-bin)" "$T/lra_pair"
cp "$LB/src-bin/test.idx" "$T/lra_count/label-bin/test.idx" && cp "$LB/src-bin/test.bin" "$T/lra_count/label-bin/test.bin"
lra_refused "ids outside the label dictionary" "id 18, outside the dictionary's 14 ids" "$T/lra_count"
lra_refused "a missing split" "no .*src-bin/valid.idx" "$T/lra_split/valid"
PYTHONPATH="$HERE/python" MEGA_LIB="$B/libmega.so" "$PY" - "$LX" "$T/c" <<'EOF' >"$T/py" 2>&1
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "..", "..", "..", "ref"))
import numpy as np
import st
import mega
ref, _ = st.load(os.path.join(sys.argv[1], "expected.safetensors"))
m = mega.load(sys.argv[2])
got = m.logits(ref["tokens"], lengths=ref["lengths"])
err = float(np.abs(got - ref["logits"]).max() / np.abs(ref["logits"]).max())
print("logits", "ok" if got.shape == ref["logits"].shape and err <= 1e-4 else "BAD", "max relative error %.2e" % err)
lines = open(os.path.join(sys.argv[1], "text.txt")).read().splitlines()
same = all(m.encode(l) == list(ref["tokens"][i, :ref["lengths"][i]]) for i, l in enumerate(lines))
print("encode", "ok" if same else "BAD", [m.encode(l) for l in lines[:1]])
names = [l.split()[0] for l in open(os.path.join(sys.argv[1], "label_dict.txt"))]
tl = m.logits(lines)
print("texts", "ok" if m.classes == names and np.abs(tl - ref["logits"]).max() <= 1e-4 * np.abs(ref["logits"]).max() else "BAD", m.classes)
EOF
for k in logits encode texts; do
  line=$(grep "^$k" "$T/py")
  case "$line" in "$k ok"*) ok "LRA $line" ;; *) bad "LRA $k: ${line:-$(tail -3 "$T/py")}" ;; esac
done
refuse "LRA with a Transformer encoder" "layer_type 'transformer' is not supported" --checkpoint "$T/lra_tf.pt"
refuse "LRA text model without --dict" "needs --dict" --checkpoint "$LX/model.pt"
refuse "LRA dictionary of the wrong size" "embedding has 22 rows" --checkpoint "$LX/model.pt" --dict "$FX/dict.txt"
head -n 4 "$LX/label_dict.txt" >"$T/labels4.txt"
refuse "LRA label dictionary of the wrong size" "4 labels but the model has 10 classes" --checkpoint "$LX/model.pt" --dict "$LX/dict.txt" --label-dict "$T/labels4.txt"
finish
