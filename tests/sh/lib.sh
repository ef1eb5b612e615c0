# Shared by the shell tests (sourced): the build directory argument, the counters and the summary
# line that tests/run.sh reads. Usage in a test:  . "$(dirname "$0")/lib.sh"
#   $1  the build directory (default build; made absolute), $2 = -v prints every passing check
#   ok NAME / bad NAME     count a passing / failing check (failures are always printed)
#   status CODE NAME       ok when CODE is 0, else bad
#   check NAME CMD...      ok when the command succeeds
#   finish                 print "N passed, M failed" and exit (1 on any failure)
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
