#!/bin/sh
# Models with a fairseq dictionary (docs/interop.md) through the tool and the Python package:
#   sh tests/sh/test_fdict_cli.sh BUILD_DIR
# Makes a model.safetensors from a committed reference LM (tests/fixtures/generated, chunk 8,
# vocabulary 24) with a word-unit fairseq dictionary in its metadata, then checks:
#  - `mega eval` (streamed, state carried across chunks, restarted every --tokens-per-sample)
#    against the same protocol computed independently in Python from full forwards of each block
#    (mega.LM.logits): the ids fairseq-preprocess gives, </s> as the first input, every token
#    scored, blocks of tokens-per-sample with a fresh state;
#  - the metadata's tokens-per-sample is the default, the flag overrides it;
#  - `mega generate` equals mega.LM.generate token for token, never draws <s>/<pad>/fillers;
#  - a dictionary whose size differs from the model's vocabulary, or broken vocabulary metadata, is
#    refused with one line; an invalid UTF-8 text for a word model is refused.
# Needs /usr/bin/python3 with numpy (else a NOTE and no checks).
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
if ! [ -x "$PY" ] || ! "$PY" -c 'import numpy' >/dev/null 2>&1; then
  echo "NOTE test_fdict_cli.sh skipped: python3 with numpy not installed"
  finish
fi
if grep -q __asan_init "$B/libmega.so" 2>/dev/null; then
  echo "NOTE test_fdict_cli.sh: the Python checks are skipped under AddressSanitizer (test_python.sh covers the binding)"
  NOPY=1
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
CASE="$HERE/tests/fixtures/generated/lm_softmax_rotary_layernorm_pre_c8_L24_untied"
# make: DIR TOKENS_JSON_EXTRA TPS — the fixture's weights with a fairseq vocabulary
make_model() {
  "$PY" - "$CASE" "$1" "$2" "$3" <<'EOF'
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(sys.argv[1]), "..", "..", "ref"))
import st
case, out, extra, tps = sys.argv[1:5]
c = json.load(open(os.path.join(case, "case.json")))
W, _ = st.load(os.path.join(case, "weights.safetensors"))
V = c["config"]["vocab_size"]
toks = ["<s>", "<pad>", "</s>", "<unk>"] + ["w%d" % i for i in range(V - 6)] + ["madeupword0000", "madeupword0001"]
toks = toks[:V + int(extra)] if int(extra) <= 0 else toks + ["w%d" % (100 + i) for i in range(int(extra))]
voc = {"kind": "fairseq", "unit": "word", "tokens": toks, "bos": 0, "pad": 1, "eos": 2, "unk": 3}
meta = {"config": json.dumps(c["config"]), "vocab": json.dumps(voc), "task": "lm"}
if tps != "0":
    meta["tokens-per-sample"] = tps
os.makedirs(out, exist_ok=True)
st.save(os.path.join(out, "model.safetensors"), {k: v.astype("float32") for k, v in W.items()}, meta)
EOF
}
make_model "$T/m" 0 11 || { bad "building the test model"; finish; }
"$PY" - "$T/text.txt" <<'EOF'
import random, sys
r = random.Random(5)
lines = []
for i in range(14):
    words = ["w%d" % r.randrange(18) if r.random() < 0.9 else "zz%d" % i for _ in range(r.randrange(0, 9))]
    lines.append((" " if r.random() < 0.3 else "").join(" ".join(words)) + ("  " if i % 5 == 0 else ""))
open(sys.argv[1], "w").write("\n".join(lines) + "\r\nw3\tw4")  # a \r\n line end, no final newline
EOF
"$B/mega" info --model "$T/m" >"$T/info" 2>&1
check "mega info names the dictionary and tokens-per-sample" grep -q "fairseq dictionary of 24 word tokens" "$T/info"
grep -q "tokens-per-sample 11" "$T/info" || bad "mega info shows tokens-per-sample 11"
run_eval() { "$B/mega" eval --model "$T/m" --data "$T/text.txt" --quiet "$@" 2>"$T/err" | sed -n 's/.*bits per token \([0-9.]*\).*| \([0-9]*\) tokens scored.*/\1 \2/p'; }
E_META=$(run_eval)
E_TPS0=$(run_eval --tokens-per-sample 0)
E_TPS7=$(run_eval --tokens-per-sample 7 --seq-len 3)
[ -n "$E_META" ] && [ -n "$E_TPS0" ] && [ -n "$E_TPS7" ] && ok "mega eval runs ($E_META / $E_TPS0 / $E_TPS7)" || bad "mega eval output: $(cat "$T/err")"
if [ -z "${NOPY:-}" ]; then
  PYTHONPATH="$HERE/python" MEGA_LIB="$B/libmega.so" "$PY" - "$T" "$E_META" "$E_TPS0" "$E_TPS7" <<'EOF' >"$T/py" 2>&1
import math, sys
import numpy as np
import mega
T, got = sys.argv[1], {11: sys.argv[2], 0: sys.argv[3], 7: sys.argv[4]}
m = mega.load(T + "/m")
text = open(T + "/text.txt", "rb").read()
ids = m.encode(text)
# fairseq: each line's words then </s> (also the last line); \r\n ends a line
lines = text.replace(b"\r\n", b"\n").split(b"\n")
voc = {("w%d" % i).encode(): i + 4 for i in range(18)}
want = [t for ln in lines for t in [voc.get(w, 3) for w in ln.split()] + [2]]
print("encode", "ok" if list(ids) == want else "BAD %s vs %s" % (list(ids)[:20], want[:20]))
src = np.concatenate([[2], ids[:-1]]).astype(np.int32)  # </s> is the first input
for tps, g in got.items():
    n, tot, p = len(ids), 0.0, 0
    while p < n:
        e = min(n, p + tps) if tps else n
        lg = m.logits(src[p:e]).astype(np.float64)
        lse = np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1)) + lg.max(1)
        tot += float((lse - lg[np.arange(e - p), ids[p:e]]).sum())
        p = e
    bits = tot / n / math.log(2)
    gb, gn = g.split() if g else ("nan", "0")
    ok = abs(float(gb) - bits) <= 2e-5 * max(1, bits) and int(gn) == n
    print("eval tps %d" % tps, "ok" if ok else "BAD", "ours %s (%s tokens) python %.6f (%d tokens)" % (gb, gn, bits, n))
open(T + "/pygen", "wb").write(m.generate(b"w3 w4\n", 40, temperature=1.0, seed=7))
EOF
  grep -q "^encode ok" "$T/py" && ok "Python encode = fairseq-preprocess's ids" || bad "encode: $(grep -v '^eval\|^generate' "$T/py" | head -5)"
  for tps in 11 0 7; do
    line=$(grep "^eval tps $tps " "$T/py")
    case "$line" in *" ok "*) ok "$line" ;; *) bad "eval tps $tps: ${line:-$(tail -3 "$T/py")}" ;; esac
  done
  # --quiet ends the text with one newline of its own
  "$B/mega" generate --model "$T/m" --prompt "w3 w4
" --tokens 40 --temperature 1 --top-p 1 --seed 7 --quiet >"$T/cligen"
  printf '\n' >>"$T/pygen"
  [ -s "$T/cligen" ] && cmp -s "$T/pygen" "$T/cligen" && ok "mega generate = mega.LM.generate ($(wc -w <"$T/cligen") words)" ||
    bad "generate: cli '$(cat "$T/cligen")' python '$(cat "$T/pygen")'"
  grep -q 'madeupword\|<s>\|<pad>' "$T/cligen" && bad "generation drew <s>/<pad>/a filler" || ok "generation never draws <s>/<pad>/fillers"
fi
# refusals: one line, exit 2
make_model "$T/bigger" 3 0
"$B/mega" eval --model "$T/bigger" --data "$T/text.txt" --quiet >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "fairseq dictionary has 27 tokens but the model's vocabulary has 24" "$T/err" && [ "$(wc -l <"$T/err")" -eq 1 ] &&
  ok "a dictionary of the wrong size is refused" || bad "wrong-size dictionary: rc $rc $(cat "$T/err")"
printf 'w1 \377 w2\n' >"$T/bad.txt"
"$B/mega" eval --model "$T/m" --data "$T/bad.txt" --quiet >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "not valid UTF-8" "$T/err" && ok "invalid UTF-8 text refused for a word model" || bad "invalid UTF-8: rc $rc $(cat "$T/err")"
"$B/mega" generate --model "$T/m" --prompt "   " --tokens 3 >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "prompt.*no token" "$T/err" && ok "a prompt without tokens refused" || bad "empty prompt: rc $rc $(cat "$T/err")"
finish
