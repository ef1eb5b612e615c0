#!/bin/sh
# The page of mega serve in a real browser: sh tests/sh/test_serve_web.sh BUILD_DIR
# A tiny model trained here is served on 127.0.0.1 (a free port); headless Chromium, driven by
# puppeteer-core (pinned in tests/web/package.json and package-lock.json, installed with npm into
# tests/web/node_modules when missing), opens the page, types a prompt, presses Generate and must
# see the model's description and the streamed text, which must be the text curl gets for the same
# greedy request; for an encoder-decoder's server, the translation form must show what
# /v1/translate answers, and for a classifier's the same form what /v1/classify answers. Skips (a
# NOTE line) without chromium, node/npm, curl, or an HTTP server in the build, or when npm cannot
# install puppeteer-core (no network).
. "$(dirname "$0")/lib.sh"
need_tool
WEB="$ROOT/tests/web"
CHROME=${MEGA_TEST_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
skip() { echo "NOTE test_serve_web.sh skipped: $1"; finish; }
[ "${MEGA_SKIP_BROWSER:-0}" = 1 ] && skip "MEGA_SKIP_BROWSER=1 (CI runs the browser test in its first leg only)"
[ -n "$CHROME" ] || skip "chromium is not installed (apt-get install chromium)"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || skip "node and npm are not installed"
command -v curl >/dev/null 2>&1 && command -v timeout >/dev/null 2>&1 || skip "curl or timeout is not installed"
"$MEGA" serve --model none 2>&1 | grep -q 'no HTTP server' && skip "this build has no HTTP server (libcivetweb-dev)"
if [ ! -d "$WEB/node_modules/puppeteer-core" ]; then
  (cd "$WEB" && timeout 300 npm ci --no-audit --no-fund --cache "${TMPDIR:-/tmp}/mega-npm-cache" >/dev/null 2>&1) ||
    skip "npm could not install puppeteer-core (no network?)"
fi
in_temp_dir serve_web
trap serve_cleanup EXIT

awk 'BEGIN { s = 7; for (i = 0; i < 600; i++) { s = (s * 16807) % 2147483647;
  printf "the %s sees the %s. ", (s % 3 ? "cat" : "dog"), (s % 5 ? "bird" : "fox"); if (i % 8 == 7) print "" } }' > corpus.txt
timeout 60 "$MEGA" train --data corpus.txt --out tiny --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --ffn-dim 32 \
  --chunk-size 16 --batch 4 --seq-len 32 --threads 1 --steps 300 --lr 1e-2 --quiet >train.out 2>&1
status $? "train a tiny model"
serve_start srv tiny
WANT=$(curl -s --max-time 20 "$U/v1/completions" -d '{"prompt":"the cat ","max_tokens":48,"temperature":0}' |
  sed -n 's/^{"choices":\[{"text":"\([^"\\]*\)".*/\1/p')
check "curl's greedy text ($WANT)" test -n "$WANT"
timeout -k 5 60 node "$WEB/page_test.mjs" "$U/" "$CHROME" "$PWD/page.png" > page.json 2> node.err
status $? "chromium ran the page: $(head -c 300 page.json)$(head -n 3 node.err | tr '\n' '|')"
r=$(node -e '
const j = JSON.parse(require("fs").readFileSync("page.json", "utf8"));
const ok = [j.model.includes("tiny") && j.model.includes("parameters"), j.gen === process.argv[1],
  j.status.startsWith("done (length)"), j.updates >= 1, j.errors.length === 0];
console.log(ok.join(" "));' "$WANT" 2>&1)
check "the page shows the model from /props, streams the same text as curl, ends done (length), no page error ($r)" \
  test "$r" = "true true true true true"
check "a screenshot of the page" test -s page.png
kill -TERM "$MPID" # the server, not timeout (which would follow with a KILL)
wait $PID
status $? "the server exits 0 on SIGTERM"

# an encoder-decoder's server: the page shows the translation form, and its output is what
# /v1/translate answers
tiny_mt mt
serve_start srv2 mt
curl -s --max-time 20 "$U/v1/translate" -d '{"source":["abc","gfedcba"]}' > tr.json
timeout -k 5 60 node "$WEB/page_test.mjs" "$U/" "$CHROME" "" translate > tpage.json 2> tnode.err
status $? "chromium ran the translation form: $(head -c 300 tpage.json)$(head -n 3 tnode.err | tr '\n' '|')"
r=$(node -e '
const fs = require("fs"), j = JSON.parse(fs.readFileSync("tpage.json", "utf8")), t = JSON.parse(fs.readFileSync("tr.json", "utf8"));
console.log([j.model.includes("mega_s2s"), j.hidden, j.out === t.translations.map(x => x.translation).join("\n"),
  j.status === "done", j.errors.length === 0].join(" "));' 2>&1)
check "the page of an encoder-decoder: the translation form, whose output is /v1/translate's ($r)" test "$r" = "true true true true true"
kill -TERM "$MPID" # the server, not timeout (which would follow with a KILL)
wait $PID
status $? "the translation server exits 0 on SIGTERM"

# a classifier's server: the same form classifies the lines, as /v1/classify answers
awk 'BEGIN { for (i = 0; i < 60; i++) printf "%s\t%s\n", (i % 2 ? "odd" : "even"), (i % 2 ? "gfedcba" : "abc") }' > cls.tsv
timeout 60 "$MEGA" train --task classify --data cls.tsv --out tc --layers 1 --embed-dim 8 --hidden-dim 16 --z-dim 4 \
  --ffn-dim 16 --chunk-size -1 --seq-len 16 --steps 4 --batch 4 --threads 1 --quiet >tc.out 2>&1
status $? "train a tiny text classifier"
serve_start srv3 tc
curl -s --max-time 20 "$U/v1/classify" -d '{"text":["abc","gfedcba"]}' > cl.json
timeout -k 5 60 node "$WEB/page_test.mjs" "$U/" "$CHROME" "" translate > cpage.json 2> cnode.err
status $? "chromium ran the classification form: $(head -c 300 cpage.json)$(head -n 3 cnode.err | tr '\n' '|')"
r=$(node -e '
const fs = require("fs"), j = JSON.parse(fs.readFileSync("cpage.json", "utf8")), c = JSON.parse(fs.readFileSync("cl.json", "utf8"));
console.log([j.model.includes("mega_cls"), j.hidden, j.out === c.results.map(x => x.label + "  " + x.probabilities[0].p.toFixed(4)).join("\n"),
  j.status === "done", j.errors.length === 0].join(" "));' 2>&1)
check "the page of a classifier: the form for texts, whose output is /v1/classify's labels ($r)" test "$r" = "true true true true true"
kill -TERM "$MPID"
wait $PID
status $? "the classifier's server exits 0 on SIGTERM"
finish
