# Shared by the shell tests (sourced): the build directory argument, the counters and the summary
# line that tests/run.sh reads. Usage in a test:  . "$(dirname "$0")/lib.sh"
#   $1  the build directory (default build; made absolute), $2 = -v prints every passing check
#   ok NAME / bad NAME     count a passing / failing check (failures are always printed)
#   status CODE NAME       ok when CODE is 0, else bad
#   check NAME CMD...      ok when the command succeeds
#   finish                 print "N passed, M failed" and exit (1 on any failure)
#   expect_error NAME PATTERN CMD...   the command fails cleanly (see below)
B=${1:-build}
VERBOSE=${2:-}
case "$B" in /*) ;; *) B="$(pwd)/$B" ;; esac
pass=0
fail=0
ok() { pass=$((pass + 1)); [ -n "$VERBOSE" ] && echo "PASS $*"; return 0; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; return 0; }
status() { # status CODE NAME
  c=$1; shift
  if [ "$c" -eq 0 ]; then ok "$@"; else bad "$@"; fi
}
check() { # check DESCRIPTION COMMAND...: pass when the command succeeds
  d=$1; shift
  if "$@"; then ok "$d"; else bad "$d"; fi
}
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ] && exit 0
  exit 1
}
# need_tool: MEGA (the build's tool) and ROOT (the checkout); the script stops here when the tool
# is not built
need_tool() {
  MEGA="$B/mega"
  ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
  if [ ! -x "$MEGA" ]; then
    bad "no executable $MEGA (build first)"
    finish
  fi
}
# in_temp_dir NAME [PARENT]: T, a new directory (in PARENT, default $TMPDIR or /tmp) removed at exit,
# and the script continues inside it
in_temp_dir() {
  T=$(mktemp -d "${2:-${TMPDIR:-/tmp}}/mega_$1.XXXXXX") || { bad "mktemp -d"; finish; }
  trap 'rm -rf "$T"' EXIT
  trap 'exit 2' INT TERM HUP
  cd "$T" || { bad "cd $T"; finish; }
}
# need_torch SCRIPT [asan-ok]: PY=/usr/bin/python3 (MEGA_TEST_PYTHON overrides it, only to test the
# skip path); the script stops here (a NOTE line, no checks)
# when it lacks torch and numpy, or (unless asan-ok) when $B is a sanitizer build, whose runtime
# torch's process cannot load after the fact
need_torch() {
  PY=${MEGA_TEST_PYTHON:-/usr/bin/python3}
  if ! [ -x "$PY" ] || ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "NOTE $1 skipped: /usr/bin/python3 with torch and numpy not installed"
    finish
  fi
  if [ "${2:-}" != asan-ok ] && grep -q __asan_init "$B/libmega.so" 2>/dev/null; then
    echo "NOTE $1 skipped under AddressSanitizer (torch and the ASan runtime do not mix)"
    finish
  fi
}
# expect_error NAME PATTERN CMD...: the command fails cleanly: exactly one "mega: error: " line
# on stderr, containing PATTERN (grep -F; "" for any), and no crash (exit 124 and above: a
# timeout, a signal). stdout goes to out.txt, stderr to err.txt, the exit code to $rc. What a
# script wants beyond that is set in variables before the calls:
#   ERR_RC       the exit code: 2 (default), or "any" for any of 1..123
#   ERR_OTHER    other stderr lines allowed: "any" (default), "notes" (only "mega: warning: " and
#                "mega: note: " lines), "none" (the error line is all of stderr)
#   ERR_TIMEOUT  seconds before the command is killed (default: none; needs CMD to be a program,
#                not a shell function)
# A LeakSanitizer report on stderr is named in the failure.
expect_error() {
  _ee_d=$1 _ee_pat=$2
  shift 2
  if [ -n "${ERR_TIMEOUT:-}" ]; then
    timeout -k 5 "$ERR_TIMEOUT" "$@" >out.txt 2>err.txt
  else
    "$@" >out.txt 2>err.txt
  fi
  rc=$?
  _ee_ok=1
  case "${ERR_RC:-2}" in
    any) [ $rc -ge 1 ] && [ $rc -lt 124 ] || _ee_ok=0 ;;
    *) [ $rc -eq "${ERR_RC:-2}" ] || _ee_ok=0 ;;
  esac
  [ "$(grep -c '^mega: error: ' err.txt)" -eq 1 ] || _ee_ok=0
  case "${ERR_OTHER:-any}" in
    notes) ! grep -qv '^mega: \(error\|warning\|note\): ' err.txt || _ee_ok=0 ;;
    none) [ "$(wc -l < err.txt)" -eq 1 ] || _ee_ok=0 ;;
  esac
  [ -z "$_ee_pat" ] || grep -qF -- "$_ee_pat" err.txt || _ee_ok=0
  if [ $_ee_ok -eq 1 ]; then
    ok "$_ee_d: $(grep -m1 '^mega: error: ' err.txt)"
  elif grep -q 'LeakSanitizer' err.txt; then
    bad "$_ee_d: exit $rc; LeakSanitizer reports a leak on this error path: $(head -n 1 err.txt)"
  elif [ $rc -ge 124 ]; then
    bad "$_ee_d: crash or hang (exit $rc): $(head -n 3 err.txt | tr '\n' '|')"
  else
    bad "$_ee_d (exit $rc, want ${ERR_RC:-2} and one error line${_ee_pat:+ with '$_ee_pat'}; stderr: $(head -n 4 err.txt | tr '\n' '|'))"
  fi
}

# ---- mega serve in tests (test_serve*.sh) ----------------------------------------------------
# serve_start NAME MODEL FLAGS...: `mega serve --model MODEL` on a free port of 127.0.0.1 in the
# background (under timeout), its output in NAME.out and NAME.err; sets U (the base URL), PID (the
# timeout wrapper) and MPID (the server itself: signals go to it, as timeout follows a TERM with a
# KILL), and adds PID to SERVERS, which serve_cleanup kills. A server that does not start within
# 5 s is a failure that ends the test.
SERVERS=""
serve_start() {
  _n=$1 _m=$2; shift 2
  timeout -k 2 120 "$MEGA" serve --model "$_m" --port 0 --threads 1 "$@" >"$_n.out" 2>"$_n.err" &
  PID=$!
  SERVERS="$SERVERS $PID"
  U=""
  for _i in $(seq 1 100); do
    _p=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/$|\1|p' "$_n.err" 2>/dev/null)
    [ -n "$_p" ] && { U="http://127.0.0.1:$_p"; MPID=$(ps -o pid= --ppid $PID | tr -d ' '); return 0; }
    kill -0 $PID 2>/dev/null || break
    sleep 0.05
  done
  bad "server $_n did not start: $(head -n 3 "$_n.err" | tr '\n' '|')"
  finish
}
# the EXIT trap of a test that starts servers: kill those still running, remove the temporary dir
serve_cleanup() { for _s in $SERVERS; do kill -9 $(ps -o pid= --ppid "$_s") "$_s" 2>/dev/null; done; rm -rf "$T"; }
# tiny_mt DIR: a tiny byte encoder-decoder (letters shifted by one) trained in a second, for servers
tiny_mt() {
  awk 'BEGIN { s = 11; for (i = 0; i < 400; i++) { x = ""; y = ""; s = (s * 16807) % 2147483647; L = 2 + s % 4;
    for (k = 0; k < L; k++) { s = (s * 16807) % 2147483647; j = 1 + s % 7; x = x substr("abcdefg", j, 1); y = y substr("bcdefgh", j, 1) }
    print x "\t" y } }' > pairs.tsv
  timeout 60 "$MEGA" train --task translate --data pairs.tsv --out "$1" --encoder-layers 1 --decoder-layers 1 --embed-dim 16 \
    --z-dim 8 --hidden-dim 32 --ffn-dim 32 --n-dim 2 --steps 30 --threads 1 --quiet --bpe 0 --max-tokens 256 >"$1.train.out" 2>&1
  status $? "train a tiny encoder-decoder"
}
# js FILE EXPR: a Python expression over the JSON in FILE (as j)
js() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }
# expect NAME CODE FIELD METHOD PATH [curl args] (through the test's own req): an error answer with status CODE whose JSON
# message names FIELD, with {"error": {"message", "type", "code"}}
expect() {
  _d=$1 _c=$2 _fld=$3; shift 3
  req err "$@"
  # (sed, not python, for the many cases) cJSON writes {"error":{"message":"..","type":"..","code":N}}
  _msg=$(grep '^{"error":{"message":".*","type":"[a-z_]*","code":'"$_c"'}}$' err.json | sed 's/^{"error":{"message":"\(.*\)","type".*/\1/')
  if [ "$code" = "$_c" ] && [ -n "$_msg" ] && printf '%s' "$_msg" | grep -qF -- "$_fld"; then ok "$_d: $code $_msg"
  else bad "$_d: status $code (want $_c), body $(head -c 300 err.json)"; fi
}
