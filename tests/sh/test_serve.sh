#!/bin/sh
# mega serve against curl: sh tests/sh/test_serve.sh BUILD_DIR
#   * a tiny byte-level language model trained here (a fraction of a second);
#   * every endpoint: /health, /v1/models, /props, /metrics, /v1/completions (whole, streamed as
#     server-sent events ending in "data: [DONE]", echo, stop strings), /completion (whole and
#     streamed), /tokenize, /detokenize, the page at /;
#   * the same seed gives the same text alone, streamed, and among 7 other requests on 4 slots;
#     16 requests (their own prompts, seeds, temperatures, lengths) at once on 16 slots each give
#     the text they give alone; so do 4 requests to a Megalodon model on 4 slots (its rows);
#   * a 400-byte prompt joining 3 streams in flight (fed a block per step) gives its text alone;
#   * a q8_0 model (mega quantize) is served and gives mega generate's text;
#   * an encoder-decoder: POST /v1/translate gives the translations `mega translate` prints;
#   * every error status: 400 (malformed bodies, wrong types and ranges, invalid UTF-8; the
#     message names the field), 401 (API key), 404, 405, 413 (--max-body, declared or chunked),
#     503 (queue full); 1300 bad requests in a row, each answered right, the memory where it was
#     (not under ASan); --timeout; a stalled client does not hold the server up; a client that
#     leaves a stream stops its generation; the server survives all of it and exits 0 on SIGTERM.
# Servers bind 127.0.0.1 on a free port (--port 0) and are killed at exit; every command has a
# hard timeout. Skips (a NOTE line) without curl or python3, or in a build without civetweb.
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir serve
if ! command -v curl >/dev/null 2>&1 || ! command -v python3 >/dev/null 2>&1 || ! command -v timeout >/dev/null 2>&1; then
  echo "NOTE test_serve.sh skipped: curl, python3 or timeout is not installed"
  finish
fi
if "$MEGA" serve --model none 2>&1 | grep -q 'no HTTP server'; then
  ok "a build without civetweb says so in one line"
  echo "NOTE test_serve.sh skipped: this build has no HTTP server (libcivetweb-dev)"
  finish
fi
# a server still running at exit (a failed check): the server, then its timeout wrapper
trap serve_cleanup EXIT

# ---- a tiny model ------------------------------------------------------------------------------
awk 'BEGIN { s = 7; for (i = 0; i < 600; i++) { s = (s * 16807) % 2147483647;
  printf "the %s sees the %s. ", (s % 3 ? "cat" : "dog"), (s % 5 ? "bird" : "fox"); if (i % 8 == 7) print "" } }' > corpus.txt
timeout 60 "$MEGA" train --data corpus.txt --out run --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --ffn-dim 32 \
  --chunk-size 16 --batch 4 --seq-len 32 --threads 1 --steps 300 --lr 1e-2 --quiet >train.out 2>&1
status $? "train a tiny model"

# start NAME FLAGS...: a server of the tiny model (serve_start in lib.sh)
start() { _sn=$1; shift; serve_start "$_sn" run "$@"; }
C="curl -s --max-time 20"
# req NAME METHOD PATH [curl args]: the status in $code, the body in NAME.json
req() {
  _f=$1 _m=$2 _path=$3; shift 3
  code=$($C -o "$_f.json" -w '%{http_code}' -X "$_m" "$U$_path" "$@")
}

start a --parallel 4 --max-body 4096 --max-tokens 100000 --ctx 200000
# ---- the endpoints ---------------------------------------------------------------------------
req h GET /health
check "GET /health answers {\"status\":\"ok\"}" test "$code $(cat h.json)" = '200 {"status":"ok"}'
req m GET /v1/models
check "GET /v1/models lists the model" test "$(js m.json 'j["object"], j["data"][0]["id"]')" = "list run"
req p GET /props
check "GET /props: name, kind, parameters, slots" test "$(js p.json 'j["model"], j["kind"], j["parameters"] > 0, j["total_slots"]')" = "run mega_lm True 4"
req page GET /
check "GET / is the page (no external resource)" sh -c "[ $code = 200 ] && grep -q '<title>mega serve</title>' page.json && ! grep -q 'https\?://' page.json"

Q='{"prompt":"the cat ","max_tokens":24,"temperature":0.9,"seed":7}'
req c1 POST /v1/completions -d "$Q"
check "POST /v1/completions: choices, usage, finish_reason length" test \
  "$code $(js c1.json 'j["object"], len(j["choices"]), j["usage"]["prompt_tokens"], j["usage"]["completion_tokens"], j["usage"]["total_tokens"], j["choices"][0]["finish_reason"]')" = "200 text_completion 1 8 24 32 length"
T1=$(js c1.json 'j["choices"][0]["text"]')
req c2 POST /v1/completions -d "$Q"
req c3 POST /v1/completions -d '{"prompt":"the cat ","max_tokens":24,"temperature":0.9,"seed":8}'
req e1 POST /v1/completions -d '{"prompt":"the cat ","max_tokens":24,"temperature":0.9,"seed":7,"echo":true}'
SAME=$(python3 -c 'import json,sys; t=[json.load(open(f))["choices"][0]["text"] for f in sys.argv[1:]]; print(t[0] == t[1], t[0] != t[2], t[3] == "the cat " + t[0])' c1.json c2.json c3.json e1.json)
check "the same seed gives the same text, another seed another, echo puts the prompt first" test "$SAME" = "True True True"
# the text of mega generate for the same prompt, sampling and seed (the ASCII of both: the server
# sends bytes that are not UTF-8 as U+FFFD, one per byte; generate ends its text with a newline)
"$MEGA" generate --model run --prompt "the cat " --tokens 24 --temperature 0.9 --top-p 0.95 --seed 7 --threads 1 --quiet >gen.txt 2>/dev/null
GEN=$(python3 -c 'import json
a = lambda t: "".join(ch for ch in t if ord(ch) < 128)
t, g = json.load(open("c1.json"))["choices"][0]["text"], open("gen.txt", "rb").read().decode("utf-8", "replace")[:-1]
print(len(a(t)) > 12 and a(t) == a(g))' 2>&1)
check "the text is mega generate's for the same prompt, sampling and seed ($GEN)" test "$GEN" = True

# streamed: events "data: {...}" separated by blank lines, the last "data: [DONE]"; their texts
# make the same text
$C -N -o s.txt "$U/v1/completions" -d '{"prompt":"the cat ","max_tokens":24,"temperature":0.9,"seed":7,"stream":true}'
SSE=$(python3 - s.txt <<'PY'
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
ev = raw.split("\n\n")
assert ev[-1] == "" and ev[-2] == "data: [DONE]", "not ended by data: [DONE]"
text, fin = "", None
for e in ev[:-2]:
    assert e.startswith("data: ") and "\n" not in e, "bad event %r" % e
    c = json.loads(e[6:])["choices"][0]
    text += c["text"]
    fin = c["finish_reason"] or fin
print(len(ev) - 2, fin, text, sep="|")
PY
)
check "stream: SSE events ending in data: [DONE], same text, finish_reason length ($(echo "$SSE" | cut -d'|' -f1) events)" \
  test "$(echo "$SSE" | cut -d'|' -f2-)" = "length|$T1"

# stop: greedy text (the model has learnt "the cat sees the bird."), cut before the first
# occurrence of a piece of it
req g POST /v1/completions -d '{"prompt":"the cat ","max_tokens":40,"temperature":0}'
G=$(js g.json 'j["choices"][0]["text"]')
STOP=$(printf '%s' "$G" | cut -c 6-8)
python3 -c 'import json,sys; print(json.dumps({"prompt":"the cat ","max_tokens":40,"temperature":0,"stop":["zzzz",sys.argv[1]]}))' "$STOP" > stop.req
req st POST /v1/completions -d @stop.req
WANT=$(python3 -c 'import sys; print(sys.argv[1][:sys.argv[1].index(sys.argv[2])])' "$G" "$STOP")
check "stop: the text ends before '$STOP', finish_reason stop" test "$(js st.json 'j["choices"][0]["finish_reason"]')|$(js st.json 'j["choices"][0]["text"]')" = "stop|$WANT"

# llama.cpp's /completion
req l POST /completion -d '{"prompt":"the cat ","n_predict":24,"temperature":0.9,"seed":7}'
check "POST /completion: content, stop, tokens_predicted, stop_type" test \
  "$code $(js l.json 'j["content"] == sys.argv[2], j["stop"], j["tokens_predicted"], j["tokens_evaluated"], j["stop_type"]' | head -1)" != ""
python3 -c 'import json,sys; j=json.load(open("l.json")); sys.exit(0 if (j["content"], j["stop"], j["tokens_predicted"], j["tokens_evaluated"], j["stop_type"]) == (sys.argv[1], True, 24, 8, "limit") else 1)' "$T1"
status $? "POST /completion gives the same text as /v1/completions for the same seed"
$C -N -o ls.txt "$U/completion" -d '{"prompt":"the cat ","n_predict":24,"temperature":0.9,"seed":7,"stream":true}'
python3 - ls.txt "$T1" <<'PY'
import json, sys
ev = [e for e in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if e]
objs = [json.loads(e[6:]) for e in ev]
assert all(e.startswith("data: ") for e in ev)
assert objs[-1]["stop"] is True and not any(o["stop"] for o in objs[:-1])
assert "".join(o["content"] for o in objs) == sys.argv[2]
PY
status $? "POST /completion streamed: content events, the last with stop true, the same text"

req tk POST /tokenize -d '{"content":"h\u00e9llo"}'
check "POST /tokenize: the bytes of the UTF-8 text" test "$(js tk.json 'j["tokens"]')" = "[104, 195, 169, 108, 108, 111]"
req dt POST /detokenize -d '{"tokens":[104,195,169,108,108,111]}'
check "POST /detokenize: back to the text" test "$(js dt.json 'j["content"] == "h\u00e9llo"')" = "True"

# ---- 8 concurrent requests on 4 slots: each gets its own seed's text ---------------------------
CL=""
for i in 1 2 3 4 5 6 7 8; do
  $C -o "par$i.json" "$U/v1/completions" -d "{\"prompt\":\"the cat \",\"max_tokens\":64,\"temperature\":0.9,\"seed\":$((i % 2 ? 7 : i))}" &
  CL="$CL $!"
done
wait $CL
PAR=$(python3 -c 'import json,sys; j=[json.load(open("par%d.json" % i)) for i in range(1, 9)]
print(sum(x["choices"][0]["text"][:24] == sys.argv[1] for x in j[0::2]), sum(x["usage"]["completion_tokens"] == 64 for x in j))' "$T1")
check "8 concurrent requests on 4 slots: all answered, the 4 with seed 7 give the text of seed 7 alone ($PAR)" test "$PAR" = "4 8"

# ---- chunked prefill: a long prompt joining streams in flight ----------------------------------------
# 400 bytes (25 blocks of the chunk, 16): alone its prompt goes in whole (no other row decodes);
# joining 3 long streams, a block per step between their tokens. The same text both ways, and
# mega generate's; the 3 streams were still running when it was answered.
LP=$(python3 -c 'print(("the dog sees the fox. the cat sees the bird. " * 10)[:400])')
printf '{"prompt":"%s","max_tokens":40,"temperature":0.8,"seed":42}' "$LP" > long.req
req longA POST /v1/completions --data-binary @long.req
CL=""
for i in 1 2 3; do
  $C -N -o "bg$i.txt" "$U/v1/completions" -d "{\"prompt\":\"the \",\"max_tokens\":100000,\"seed\":$i,\"stream\":true}" &
  CL="$CL $!"
done
for i in $(seq 1 200); do [ -s bg1.txt ] && [ -s bg2.txt ] && [ -s bg3.txt ] && break; sleep 0.02; done
req longC POST /v1/completions --data-binary @long.req
ended=$(cat bg1.txt bg2.txt bg3.txt | grep -c 'DONE')
kill $CL 2>/dev/null
wait $CL 2>/dev/null
"$MEGA" generate --model run --prompt "$LP" --tokens 40 --temperature 0.8 --top-p 0.95 --seed 42 --threads 1 --quiet >genl.txt 2>/dev/null
LONG=$(python3 -c 'import json
a = lambda t: "".join(ch for ch in t if ord(ch) < 128)
t = [json.load(open(f))["choices"][0]["text"] for f in ("longA.json", "longC.json")]
g = open("genl.txt", "rb").read().decode("utf-8", "replace")[:-1]
print(len(t[0]) > 0 and t[0] == t[1], len(a(t[0])) > 12 and a(t[0]) == a(g))' 2>&1)
check "a 400-byte prompt joining 3 streams in flight ($ended of them ended by then) gives its text alone and mega generate's ($LONG)" \
  test "$LONG $ended" = "True True 0"

# alone_then_crowd TAG N BASE STEP: send TAG1.req .. TAGN.req to $U one at a time, then all at once;
# prints how many of the N crowd answers have the text of their alone answer and BASE + STEP * i
# completion tokens, and how many distinct texts the alone answers have
alone_then_crowd() {
  for i in $(seq 1 $2); do $C -o "$1alone$i.json" "$U/v1/completions" --data-binary @$1$i.req; done
  CL=""
  for i in $(seq 1 $2); do
    $C -o "$1crowd$i.json" "$U/v1/completions" --data-binary @$1$i.req &
    CL="$CL $!"
  done
  wait $CL
  python3 -c 'import json, sys
tag, N, base, step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t = lambda k, i: json.load(open("%s%s%d.json" % (tag, k, i)))["choices"][0]["text"]
n = lambda i: json.load(open("%scrowd%d.json" % (tag, i)))["usage"]["completion_tokens"]
print(sum(t("alone", i) == t("crowd", i) and n(i) == base + step * i for i in range(1, N + 1)),
      len({t("alone", i) for i in range(1, N + 1)}))' "$@" 2>&1
}

# ---- continuous batching: 16 requests alone, then all 16 at once on 16 slots ----------------------
# each with its own prompt, seed, temperature and length: the rows join and leave at different
# tokens, and every request gets the text it gets alone (its logits do not depend on the rows
# beside it, its sampler is its own)
A_U=$U A_MPID=$MPID A_PID=$PID
start b --parallel 16 --max-tokens 1000 --ctx 2000
for i in $(seq 1 16); do
  printf '{"prompt":"the %s ","max_tokens":%d,"temperature":0.%d,"seed":%d}' \
    "$(echo cat dog bird fox | cut -d' ' -f$((i % 4 + 1)))" $((16 + 7 * i)) $((i % 9 + 1)) $((100 + i)) > q$i.req
done
SAME16=$(alone_then_crowd q 16 16 7)
check "16 requests at once on 16 slots: each gives the text it gives alone, in full (same of 16, distinct texts: $SAME16)" \
  test "${SAME16% *}" = 16 -a "${SAME16#* }" -gt 8
kill -TERM $MPID; wait $PID
U=$A_U MPID=$A_MPID PID=$A_PID

# ---- a Megalodon model: its rows too (the same request alone and among others, same tokens) ------
timeout 60 "$MEGA" train --arch megalodon --data corpus.txt --out mgl --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 16 \
  --n-dim 2 --ffn-dim 16 --chunk-size 8 --norm-num-groups 4 --batch 4 --seq-len 16 --threads 1 --steps 20 --quiet >mgl.out 2>&1
status $? "train a tiny Megalodon model"
serve_start m mgl --parallel 4 --max-tokens 1000 --ctx 2000
for i in 1 2 3 4; do
  printf '{"prompt":"the %s","max_tokens":%d,"temperature":0.%d,"seed":%d}' \
    "$(echo cat dog bird fox | cut -d' ' -f$i)" $((9 + 6 * i)) $((i + 4)) $((200 + i)) > m$i.req
done
SAMEM=$(alone_then_crowd m 4 9 6)
SAMEM=${SAMEM% *}
check "Megalodon, 4 requests at once on 4 slots: each gives the text it gives alone, in full ($SAMEM of 4)" test "$SAMEM" = 4
kill -TERM $MPID; wait $PID
U=$A_U MPID=$A_MPID PID=$A_PID

# ---- bad requests: 400 naming the field, never a crash -------------------------------------------
P=/v1/completions
expect "prompt of the wrong type" 400 prompt POST $P -d '{"prompt":5}'
expect "no prompt" 400 prompt POST $P -d '{"max_tokens":3}'
expect "empty prompt" 400 prompt POST $P -d '{"prompt":""}'
expect "negative max_tokens" 400 max_tokens POST $P -d '{"prompt":"a","max_tokens":-1}'
expect "absurd max_tokens" 400 max_tokens POST $P -d '{"prompt":"a","max_tokens":1e300}'
expect "fractional max_tokens" 400 max_tokens POST $P -d '{"prompt":"a","max_tokens":2.5}'
expect "max_tokens as a string" 400 max_tokens POST $P -d '{"prompt":"a","max_tokens":"9"}'
expect "temperature out of range" 400 temperature POST $P -d '{"prompt":"a","temperature":-1}'
expect "top_p 0" 400 top_p POST $P -d '{"prompt":"a","top_p":0}'
expect "top_k fractional" 400 top_k POST $P -d '{"prompt":"a","top_k":0.5}'
expect "seed out of range" 400 seed POST $P -d '{"prompt":"a","seed":-5}'
expect "n 2" 400 "n:" POST $P -d '{"prompt":"a","n":2}'
expect "stream not a boolean" 400 stream POST $P -d '{"prompt":"a","stream":"yes"}'
expect "stop of the wrong type" 400 stop POST $P -d '{"prompt":"a","stop":[1]}'
expect "five stop strings" 400 stop POST $P -d '{"prompt":"a","stop":["a","b","c","d","e"]}'
expect "a list of two prompts" 400 prompt POST $P -d '{"prompt":["a","b"]}'
expect "not JSON" 400 body POST $P -d 'nonsense'
expect "an array, not an object" 400 body POST $P -d '[1,2]'
expect "text after the JSON" 400 body POST $P -d '{"prompt":"a"} {}'
expect "empty body" 400 body POST $P -d ''
expect "nesting 1000 levels deep" 400 body POST $P -d "$(python3 -c 'print("["*1000 + "]"*1000)')"
printf '{"prompt":"a\377b"}' > bad_utf8.req
expect "prompt of invalid UTF-8" 400 "UTF-8" POST $P --data-binary @bad_utf8.req
printf '{"prompt":"a\000b"}' > nul.req
expect "a raw NUL byte in the prompt" 400 "control character" POST $P --data-binary @nul.req
expect "a \\u0000 escape in the prompt" 400 "u0000" POST $P -d '{"prompt":"a\u0000b"}'
expect "a lone surrogate escape" 400 body POST $P -d '{"prompt":"\ud800"}'
expect "llama n_predict out of range" 400 n_predict POST /completion -d '{"prompt":"a","n_predict":-2}'
expect "tokenize without content" 400 content POST /tokenize -d '{"text":"a"}'
expect "detokenize of an id outside the vocabulary" 400 tokens POST /detokenize -d '{"tokens":[1,99999]}'
expect "detokenize of a negative id" 400 tokens POST /detokenize -d '{"tokens":[-1]}'
expect "detokenize of a string" 400 tokens POST /detokenize -d '{"tokens":"abc"}'
expect "unknown path" 404 endpoint GET /v2/nothing
req m405 PUT /health
check "PUT /health: 405 with Allow: GET" sh -c "[ $code = 405 ] && $C -o /dev/null -D - -X PUT $U/health | grep -qi '^Allow: GET'"
expect "GET on a POST endpoint" 405 method GET /v1/completions
head -c 5000 /dev/zero | tr '\0' 'a' > big.req
expect "a body over --max-body (declared length)" 413 "max-body" POST $P --data-binary @big.req
expect "a chunked body over --max-body" 413 "max-body" POST $P -H 'Transfer-Encoding: chunked' --data-binary @big.req

# many bad requests (every malformed kind above, in turn, each on a new connection): each gets
# its status, and the server's memory ends where it was after the first round (within 10%)
cat > hostile.py <<'PY'
import http.client, sys
port, rounds = int(sys.argv[1]), int(sys.argv[2])
cases = [("POST", "/v1/completions", b'{"prompt":5}', 400), ("POST", "/v1/completions", b'{"prompt":"a","max_tokens":1e300}', 400),
         ("POST", "/v1/completions", b'{"prompt":"a\xffb"}', 400), ("POST", "/v1/completions", b"[" * 800, 400),
         ("POST", "/v1/completions", b'{"prompt":"a","stop":["a","b","c","d","e"]}', 400), ("POST", "/v1/completions", b"x" * 5000, 413),
         ("POST", "/detokenize", b'{"tokens":[1,2,-9]}', 400), ("POST", "/tokenize", b'{"content":null}', 400),
         ("GET", "/nothing", None, 404), ("DELETE", "/v1/models", None, 405), ("POST", "/v1/completions", b"", 400),
         ("POST", "/completion", b'{"prompt":"a","n_predict":"many"}', 400), ("POST", "/v1/completions", b'{"prompt":"ab","max_tokens":2}', 200)]
wrong = 0
for i in range(rounds * len(cases)):
    m, path, body, want = cases[i % len(cases)]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(m, path, body)
    r = c.getresponse()
    r.read()
    wrong += r.status != want
    c.close()
print(wrong)
PY
python3 hostile.py "${U##*:}" 20 > hostile1.txt
rss0=$(sed -n 's/^VmRSS:[^0-9]*\([0-9]*\).*/\1/p' /proc/$MPID/status)
python3 hostile.py "${U##*:}" 80 > hostile2.txt
rss1=$(sed -n 's/^VmRSS:[^0-9]*\([0-9]*\).*/\1/p' /proc/$MPID/status)
check "1300 hostile requests, each answered with its status ($(cat hostile1.txt) and $(cat hostile2.txt) wrong)" \
  test "$(cat hostile1.txt) $(cat hostile2.txt)" = "0 0"
# (not under AddressSanitizer, whose quarantine keeps freed memory by design; its leak check at
# the server's exit covers what this would catch)
if grep -q __asan_init "$MEGA" 2>/dev/null; then
  echo "NOTE the memory check after the hostile requests is skipped under AddressSanitizer ($rss1 kB against $rss0 kB)"
else
  check "memory after 1040 more of them: $rss1 kB against $rss0 kB (within 10%)" test -n "$rss0" -a "$((rss1 * 10))" -le "$((rss0 * 11))"
fi

# a client that sends half a request and stalls holds one connection, not the server
python3 -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
time.sleep(3)
' "${U##*:}" &
STALL=$!
sleep 0.3
req h2 GET /health
check "a stalled client does not hold up /health" test "$code" = 200
# a client that leaves a stream: its generation stops (far fewer tokens than asked for)
before=$($C "$U/metrics" | sed -n 's/^mega_tokens_predicted_total //p')
$C -N --max-time 0.3 -o /dev/null "$U/v1/completions" -d '{"prompt":"the ","max_tokens":100000,"stream":true,"seed":3}'
sleep 0.5
after=$($C "$U/metrics" | sed -n 's/^mega_tokens_predicted_total //p')
busy=$($C "$U/metrics" | sed -n 's/^mega_requests_processing //p')
echo "left after 0.3 s: $((after - before)) tokens generated" > left.txt
check "a client that leaves a stream stops its generation ($((after - before)) of 100000 tokens; $busy slots busy after)" \
  test "$((after - before))" -lt 50000 -a "$busy" = 0
$C -o met.txt "$U/metrics"
check "GET /metrics: Prometheus text with the counters and histograms" sh -c \
  "grep -q '^mega_requests_total [0-9]' met.txt && grep -q '^mega_requests_queued 0' met.txt && grep -q '^mega_time_to_first_token_seconds_bucket{le=\"+Inf\"} [1-9]' met.txt && grep -q '^mega_inter_token_seconds_count [1-9]' met.txt && grep -q '^# TYPE mega_request_duration_seconds histogram' met.txt"
kill "$STALL" 2>/dev/null
wait "$STALL" 2>/dev/null
kill -0 $PID 2>/dev/null
status $? "the server survived every request above"
# a stream in flight when the signal comes: it ends at its next token
$C -N -o inflight.txt --max-time 10 "$U/v1/completions" -d '{"prompt":"the ","max_tokens":100000,"stream":true,"seed":4}' &
FLY=$!
for i in $(seq 1 100); do [ -s inflight.txt ] && break; sleep 0.05; done # its first events (5 s at most)
kill -TERM $MPID
t0=$(date +%s%N)
wait $PID
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
wait $FLY
# the issue's bound: a second (the server wakes civetweb's listener, serve.c stop_http)
check "SIGTERM with a stream in flight: exit 0 within 1 s (exit $rc, $ms ms), the stream ended ($(wc -c <inflight.txt) bytes: $(tail -c 40 inflight.txt | tr '\n' ' '))" \
  sh -c "[ $rc = 0 ] && [ $ms -le 1000 ] && tail -n 3 inflight.txt | grep -q 'data: \[DONE\]'"

# ---- the API key ------------------------------------------------------------------------------
printf 'sesame-123\n' > key.txt
start k --api-key-file key.txt --ctx 100
expect "no key" 401 "API key" GET /v1/models
expect "a wrong key" 401 "API key" GET /v1/models -H 'Authorization: Bearer sesame-12'
req ok GET /v1/models -H 'Authorization: Bearer sesame-123'
check "the right key: 200" test "$code" = 200
req hk GET /health
check "/health needs no key" test "$code" = 200
check "the key is never printed" sh -c "! grep -q sesame k.err"
expect "prompt and max_tokens beyond --ctx" 400 "ctx" POST /v1/completions -H 'Authorization: Bearer sesame-123' -d '{"prompt":"abc","max_tokens":98}'
kill -TERM $MPID; wait $PID

# ---- a full queue: 503 ---------------------------------------------------------------------------
start q --parallel 1 --max-queue 0 --max-tokens 1000000 --ctx 2000000 --timeout 1
CL=""
for i in 1 2 3 4 5 6; do
  $C -o "q$i.json" -w '%{http_code}\n' "$U/v1/completions" -d '{"prompt":"the ","max_tokens":5000}' > "q$i.code" &
  CL="$CL $!"
done
wait $CL
n503=$(cat q*.code | grep -c 503)
n200=$(cat q*.code | grep -c 200)
check "6 requests at once on 1 slot without a queue: $n200 answered, $n503 got 503" test "$n503" -ge 1 -a "$n200" -ge 1 -a $((n503 + n200)) = 6
check "the 503 says the queue is full" grep -q 'queue is full' $(grep -l 503 q*.code | head -1 | sed 's/code$/json/')
# --timeout 1: a request for 1,000,000 tokens (several seconds even for this tiny model; 100,000 took under a second on a quiet machine) ends after about a second with
# what it has
t0=$(date +%s)
req to POST /v1/completions -d '{"prompt":"the ","max_tokens":1000000}'
TO=$(js to.json 'j["usage"]["completion_tokens"] < 1000000, j["choices"][0]["finish_reason"]')
check "--timeout 1: the request ends early with its tokens, finish_reason length ($TO, $(($(date +%s) - t0)) s)" \
  test "$code $TO" = "200 True length" -a $(($(date +%s) - t0)) -le 4
kill -TERM $MPID; wait $PID

# ---- an encoder-decoder: POST /v1/translate gives what mega translate prints ---------------------
tiny_mt mt
printf 'abc\ngfedcba\n' | timeout 30 "$MEGA" translate --model mt --beam 3 --lenpen 0.8 --threads 1 > cli.txt 2>cli.err
status $? "mega translate"
serve_start t mt
req tr POST /v1/translate -d '{"source":["abc","gfedcba"],"beam":3,"lenpen":0.8}'
python3 - tr.json cli.txt <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
cli = open(sys.argv[2], encoding="utf-8").read().split("\n")[:2]
# mega translate prints one line per source: line breaks and tabs become spaces
got = [t["translation"].replace("\n", " ").replace("\r", " ").replace("\t", " ") for t in j["translations"]]
assert (j["beam"], j["lenpen"], len(got)) == (3, 0.8, 2), j
assert got == cli, (got, cli)
assert all(isinstance(t["score"], float) and t["tokens"] >= 0 for t in j["translations"])
PY
status $? "POST /v1/translate: the translations mega translate prints for the same beam and lenpen, with scores"
req trp GET /props
check "GET /props of an encoder-decoder" test "$(js trp.json 'j["kind"], j["default_generation_settings"]["beam"]')" = "mega_s2s 4"
expect "no source" 400 source POST /v1/translate -d '{"beam":2}'
expect "an empty list of sources" 400 source POST /v1/translate -d '{"source":[]}'
expect "an empty source" 400 "source[0]" POST /v1/translate -d '{"source":[""]}'
expect "a source that is not a string" 400 source POST /v1/translate -d '{"source":["a",3]}'
expect "beam 0" 400 beam POST /v1/translate -d '{"source":"a","beam":0}'
expect "lenpen negative" 400 lenpen POST /v1/translate -d '{"source":"a","lenpen":-1}'
expect "a completion asked of an encoder-decoder" 400 "language model" POST /v1/completions -d '{"prompt":"a"}'
kill -TERM "$(ps -o pid= --ppid $PID | tr -d ' ')"; wait $PID
status $? "the translation server exits 0 on SIGTERM"

# ---- a q8_0 model (mega quantize): served, with mega generate's text ------------------------------
timeout 30 "$MEGA" quantize --model run --out runq >quant.out 2>&1
status $? "mega quantize the tiny model (q8_0)"
serve_start qz runq --parallel 2
req qc POST /v1/completions -d "$Q"
"$MEGA" generate --model runq --prompt "the cat " --tokens 24 --temperature 0.9 --top-p 0.95 --seed 7 --threads 1 --quiet >genq.txt 2>/dev/null
QGEN=$(python3 -c 'import json
a = lambda t: "".join(ch for ch in t if ord(ch) < 128)
t, g = json.load(open("qc.json"))["choices"][0]["text"], open("genq.txt", "rb").read().decode("utf-8", "replace")[:-1]
print(len(a(t)) > 12 and a(t) == a(g))' 2>&1)
check "a q8_0 model is served: the text mega generate gives it for the same seed ($QGEN)" test "$code $QGEN" = "200 True"
kill -TERM $MPID; wait $PID

# ---- flags ----------------------------------------------------------------------------------------
timeout 10 "$MEGA" serve --help > help.txt 2>&1
check "mega serve --help lists the flags" sh -c "grep -q -- '--parallel' help.txt && grep -q -- '--api-key-file' help.txt && grep -q -- '--max-body' help.txt"
ERR_TIMEOUT=10 expect_error "no --model" "--model" "$MEGA" serve
ERR_TIMEOUT=10 expect_error "both key flags" "give one" "$MEGA" serve --model run --api-key a --api-key-file key.txt
ERR_TIMEOUT=10 expect_error "a missing key file" "api-key-file" "$MEGA" serve --model run --api-key-file nothing.txt
finish
