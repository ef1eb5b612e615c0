#!/bin/sh
# POST /v1/classify of mega serve against curl: sh tests/sh/test_serve_classify.sh BUILD_DIR
#   * a tiny byte-level text classifier and a tiny ListOps classifier trained here (seconds);
#   * each text's label is the one `mega predict` prints for the same line; its probability is
#     the one `mega eval --batch 1` reads off the same line (eval's loss is -ln p of its label);
#   * a list of texts, top_k, "input" for "text", the probabilities sum to 1, most probable first;
#   * --ctx cuts a long text (truncated, tokens); /props lists the classes;
#   * bad fields are 400s naming the field, 401 without the key, 413 over --max-body; a
#     classifier of images is refused (it reads pixels);
#     a language model's server answers /v1/classify with a 400 naming its kind.
# Servers bind 127.0.0.1 on a free port (--port 0) and are killed at exit; every command has a
# hard timeout. Skips (a NOTE line) without curl or python3, or in a build without civetweb.
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir serve_cls
if ! command -v curl >/dev/null 2>&1 || ! command -v python3 >/dev/null 2>&1 || ! command -v timeout >/dev/null 2>&1; then
  echo "NOTE test_serve_classify.sh skipped: curl, python3 or timeout is not installed"
  finish
fi
if "$MEGA" serve --model none 2>&1 | grep -q 'no HTTP server'; then
  echo "NOTE test_serve_classify.sh skipped: this build has no HTTP server (libcivetweb-dev)"
  finish
fi
trap serve_cleanup EXIT

# start NAME MODEL FLAGS...: a server in the background (serve_start in lib.sh)
start() { serve_start "$@"; }
# stop NAME: SIGTERM; the server must exit 0 (under ASan also: no leak, no error at exit)
stop() { kill -TERM "$MPID" 2>/dev/null; wait "$PID"; status $? "server $1 exits 0 on SIGTERM$(grep -m1 -o 'ERROR: [A-Za-z]*Sanitizer.*' "$1.err")"; }
C="curl -s --max-time 20"
# req NAME METHOD PATH [curl args]: with the API key of the servers that have one (sesame)
req() { _f=$1 _m=$2 _path=$3; shift 3; code=$($C -o "$_f.json" -w '%{http_code}' -H 'Authorization: Bearer sesame' -X "$_m" "$U$_path" "$@"); }
# agree MODEL JSON HEADER TEXT...: the answer's labels are those mega predict prints for the texts,
# and each label's p is exp(-loss) of mega eval --batch 1 on that text with that label
agree() {
  _mod=$1 _j=$2 _hdr=$3; shift 3
  _i=0
  for _t in "$@"; do
    _lab=$(js "$_j" "j['results'][$_i]['label']")
    _p=$(js "$_j" "[q['p'] for q in j['results'][$_i]['probabilities'] if q['label'] == j['results'][$_i]['label']][0]")
    # a text file's line is "label<TAB>text"; ListOps' (under its header) "text<TAB>label"
    if [ -n "$_hdr" ]; then printf '%s\n%s\t%s\n' "$_hdr" "$_t" "$_lab"; else printf '%s\t%s\n' "$_lab" "$_t"; fi > one.tsv
    _pred=$(timeout 20 "$MEGA" predict --model "$_mod" --data one.tsv --threads 1 2>&1)
    _loss=$(timeout 20 "$MEGA" eval --model "$_mod" --data one.tsv --batch 1 --threads 1 --quiet 2>&1 | sed -n 's/.*| loss \([0-9.]*\) |.*/\1/p')
    if [ "$_pred" = "$_lab" ] && python3 -c "import math,sys; sys.exit(abs(-math.log($_p) - $_loss) > 1e-4)" 2>/dev/null
    then ok "$_mod, text $_i: label $_lab as mega predict, p $_p = exp(-$_loss) of mega eval"
    else bad "$_mod, text $_i: served $_lab p=$_p, mega predict '$_pred', mega eval loss '$_loss'"; fi
    _i=$((_i + 1))
  done
}

# ---- a byte-level text classifier --------------------------------------------------------------
awk 'BEGIN { s = 5; for (i = 0; i < 200; i++) { s = (s * 16807) % 2147483647; k = s % 3;
  w = k == 0 ? "good fine nice" : k == 1 ? "bad awful poor" : "so so meh";
  printf "%s\t%s %s\n", (k == 0 ? "pos" : k == 1 ? "neg" : "mid"), substr(w, 1 + s % 5, 8), (s % 7 ? "day" : "film") } }' > text.tsv
timeout 60 "$MEGA" train --task classify --data text.tsv --out tc --layers 1 --embed-dim 16 --hidden-dim 32 --z-dim 8 \
  --ffn-dim 32 --chunk-size -1 --seq-len 32 --steps 30 --batch 8 --threads 1 --quiet >tc.out 2>&1
status $? "train a tiny text classifier"

start a tc --ctx 12 --api-key sesame --max-body 4096
code=$($C -o nokey.json -w '%{http_code}' "$U/v1/classify" -d '{"text":"a"}')
check "no API key: 401" sh -c "[ $code = 401 ] && grep -q 'API key' nokey.json"
req p GET /props
check "GET /props of a classifier: kind, vocabulary, classes" test "$(js p.json 'j["kind"], j["vocabulary"], sorted(j["classes"])')" = "mega_cls bytes ['mid', 'neg', 'pos']"
req one POST /v1/classify -d '{"text":"good fine day"}'
check "POST /v1/classify: object, model, one result with every class, usage" test \
  "$code $(js one.json 'j["object"], j["model"], len(j["results"]), j["results"][0]["index"], len(j["results"][0]["probabilities"]), j["results"][0]["tokens"], j["usage"]["prompt_tokens"]')" = "200 classification tc 1 0 3 12 12"
agree tc one.json "" "good fine da"
req l POST /v1/classify -d '{"text":["bad awful film","so so","nice"],"top_k":2}'
python3 - l.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
r = j["results"]
assert [x["index"] for x in r] == [0, 1, 2] and [x["tokens"] for x in r] == [12, 5, 4], r
assert [x["truncated"] for x in r] == [True, False, False], r
assert j["usage"]["prompt_tokens"] == 21, j
for x in r:
    ps = [q["p"] for q in x["probabilities"]]
    assert len(ps) == 2 and ps[0] >= ps[1] and 0 < ps[1] and ps[0] <= 1 and x["probabilities"][0]["label"] == x["label"], x
PY
status $? "a list of 3 texts: indices, top_k 2 most probable first, --ctx 12 cuts the first (truncated), usage"
agree tc l.json "" "bad awful fi" "so so" "nice"
req all POST /v1/classify -d '{"input":"so so meh"}'
check "\"input\" for \"text\"; the probabilities of all classes sum to 1" test \
  "$code $(js all.json 'abs(sum(q["p"] for q in j["results"][0]["probabilities"]) - 1) < 1e-9')" = "200 True"
expect "no text" 400 text POST /v1/classify -d '{"top_k":1}'
expect "a text that is a number" 400 text POST /v1/classify -d '{"text":3}'
expect "a list holding a number" 400 "item 1" POST /v1/classify -d '{"text":["a",3]}'
expect "an empty text" 400 "item 0 is empty" POST /v1/classify -d '{"text":""}'
expect "an empty list" 400 text POST /v1/classify -d '{"text":[]}'
expect "65 texts" 400 text POST /v1/classify -d "{\"text\":[$(yes '"a"' | head -n 65 | paste -sd,)]}"
expect "top_k negative" 400 top_k POST /v1/classify -d '{"text":"a","top_k":-1}'
expect "top_k not an integer" 400 top_k POST /v1/classify -d '{"text":"a","top_k":1.5}'
expect "text2 (two texts)" 400 text2 POST /v1/classify -d '{"text":"a","text2":"b"}'
expect "invalid UTF-8" 400 text POST /v1/classify --data-binary "$(printf '{"text":"\377"}')"
expect "not JSON" 400 body POST /v1/classify -d '{"text":'
expect "a body over --max-body" 413 "max-body" POST /v1/classify -d "{\"text\":\"$(head -c 5000 /dev/zero | tr '\0' a)\"}"
expect "GET" 405 "method" GET /v1/classify
expect "a completion asked of a classifier" 400 "language model" POST /v1/completions -d '{"prompt":"a"}'
stop a


# ---- a ListOps classifier: its tokens, not bytes -----------------------------------------------
timeout 30 "$MEGA" listops --out lo --train 120 --valid 10 --test 10 --min-len 10 --max-len 40 --max-depth 2 --seed 3 >/dev/null 2>&1
timeout 60 "$MEGA" train --task classify --data lo/train.tsv --out lc --layers 1 --embed-dim 16 --hidden-dim 32 --z-dim 8 \
  --ffn-dim 32 --chunk-size -1 --seq-len 64 --steps 20 --batch 8 --threads 1 --quiet >lc.out 2>&1
status $? "train a tiny ListOps classifier"
start lo lc
E1='( [MAX 2 9 ( [MIN 4 7 ) 0 ] )' E2='[SM 3 4 ]'
req lq POST /v1/classify -d "{\"text\":[\"$E1\",\"$E2\"]}"
check "ListOps: tokens counted without parentheses" test "$code $(js lq.json '[x["tokens"] for x in j["results"]]')" = "200 [8, 4]"
agree lc lq.json "Source	Target" "$E1" "$E2"
stop lo

# ---- a classifier of images: it reads pixels, not text ------------------------------------------
python3 - <<'PY'
import struct
n, r, c = 16, 4, 4
img = bytes((i * 37 + 11) % 256 for i in range(n * r * c))
open("im.idx", "wb").write(struct.pack(">IIII", 0x803, n, r, c) + img)
open("lb.idx", "wb").write(struct.pack(">II", 0x801, n) + bytes(i % 2 for i in range(n)))
PY
timeout 60 "$MEGA" train --task classify --images im.idx --labels lb.idx --out ic --layers 1 --embed-dim 8 --hidden-dim 16 \
  --z-dim 4 --ffn-dim 16 --chunk-size -1 --steps 2 --batch 4 --threads 1 --quiet >ic.out 2>&1
status $? "train a tiny image classifier"
start im ic
expect "an image classifier refuses text" 400 "pixels" POST /v1/classify -d '{"text":"a"}'
stop im

# ---- a language model's server -----------------------------------------------------------------
awk 'BEGIN { for (i = 0; i < 200; i++) print "the cat sees the dog." }' > corpus.txt
timeout 60 "$MEGA" train --data corpus.txt --out lm --layers 1 --embed-dim 8 --z-dim 4 --hidden-dim 16 --ffn-dim 16 \
  --chunk-size 16 --batch 2 --seq-len 16 --threads 1 --steps 2 --quiet >lm.out 2>&1
status $? "train a tiny language model"
start lm lm
expect "a language model's server refuses /v1/classify" 400 "classifier" POST /v1/classify -d '{"text":"a"}'
stop lm
finish
