#!/bin/sh
# The page of mega serve in a real browser: sh tests/sh/test_serve_web.sh BUILD_DIR
# A tiny model trained here is served on 127.0.0.1 (a free port); headless Chromium, driven by
# puppeteer-core (pinned in tests/web/package.json and package-lock.json, installed with npm into
# tests/web/node_modules when missing), opens the page, types a prompt, presses Generate and must
# see the model's description and the streamed text, which must be the text curl gets for the same
# greedy request. Skips (a NOTE line) without chromium, node/npm, curl, or an HTTP server in the
# build, or when npm cannot install puppeteer-core (no network).
. "$(dirname "$0")/lib.sh"
need_tool
WEB="$ROOT/tests/web"
CHROME=${MEGA_TEST_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
skip() { echo "NOTE test_serve_web.sh skipped: $1"; finish; }
[ -n "$CHROME" ] || skip "chromium is not installed (apt-get install chromium)"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || skip "node and npm are not installed"
command -v curl >/dev/null 2>&1 && command -v timeout >/dev/null 2>&1 || skip "curl or timeout is not installed"
"$MEGA" serve --model none 2>&1 | grep -q 'no HTTP server' && skip "this build has no HTTP server (libcivetweb-dev)"
if [ ! -d "$WEB/node_modules/puppeteer-core" ]; then
  (cd "$WEB" && timeout 300 npm ci --no-audit --no-fund --cache "${TMPDIR:-/tmp}/mega-npm-cache" >/dev/null 2>&1) ||
    skip "npm could not install puppeteer-core (no network?)"
fi
in_temp_dir serve_web
SERVER=""
trap '[ -n "$SERVER" ] && kill -9 $SERVER 2>/dev/null; rm -rf "$T"' EXIT

awk 'BEGIN { s = 7; for (i = 0; i < 600; i++) { s = (s * 16807) % 2147483647;
  printf "the %s sees the %s. ", (s % 3 ? "cat" : "dog"), (s % 5 ? "bird" : "fox"); if (i % 8 == 7) print "" } }' > corpus.txt
timeout 60 "$MEGA" train --data corpus.txt --out tiny --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --ffn-dim 32 \
  --chunk-size 16 --batch 4 --seq-len 32 --threads 1 --steps 300 --lr 1e-2 --quiet >train.out 2>&1
status $? "train a tiny model"
timeout -k 2 120 "$MEGA" serve --model tiny --port 0 --threads 1 >srv.out 2>srv.err &
SERVER=$!
U=""
for i in $(seq 1 100); do
  p=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/$|\1|p' srv.err)
  [ -n "$p" ] && { U="http://127.0.0.1:$p"; break; }
  sleep 0.05
done
[ -n "$U" ] || { bad "the server did not start: $(head -n 2 srv.err | tr '\n' '|')"; finish; }
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
kill -TERM $SERVER
wait $SERVER
status $? "the server exits 0 on SIGTERM"
SERVER=""
finish
