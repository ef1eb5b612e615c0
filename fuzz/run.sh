#!/bin/sh
# The libFuzzer targets of fuzz/ (fuzz/README.md); `make fuzz` calls this.
#
#   sh fuzz/run.sh deps                          install clang and its runtimes when missing (root)
#   sh fuzz/run.sh run BUILD SECONDS [NAME...]   run BUILD/fuzz_NAME for SECONDS each (all when no
#                                                NAME), one after the other on one core
#
# Each target runs on a copy of fuzz/corpus/NAME in a temporary directory (on /dev/shm when it
# exists), so the committed corpus never grows; its temporary files go there too. Crashes, leaks,
# timeouts and out-of-memory inputs are saved as BUILD/crashes/NAME-<kind>-<sha1>, the log of each
# run is BUILD/fuzz_NAME.log. Prints one line per target and exits non-zero when any target failed.
# Environment: FUZZ_FLAGS adds libFuzzer flags (e.g. FUZZ_FLAGS=-jobs=1).
set -u
cd "$(dirname "$0")/.."

if [ "${1:-}" = deps ]; then
  missing=""
  command -v clang >/dev/null 2>&1 || missing="clang"
  # libFuzzer's runtime (libclang_rt.fuzzer), a dependency of clang on Debian 12; checked anyway
  if command -v clang >/dev/null 2>&1 && [ ! -e "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)" ] &&
     ! ls "$(clang -print-resource-dir 2>/dev/null)"/lib/*/libclang_rt.fuzzer*.a >/dev/null 2>&1; then
    missing="$missing libclang-rt-dev"
  fi
  [ -z "$missing" ] && exit 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "fuzz: missing:$missing (install clang with its compiler-rt: apt-get install clang libclang-rt-dev)" >&2
    exit 1
  fi
  echo "fuzz: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq $missing >/tmp/mega-apt.log 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1; apt-get install -y -qq $missing >/tmp/mega-apt.log 2>&1; } ||
    { echo "fuzz: apt-get install$missing failed; see /tmp/mega-apt.log" >&2; exit 1; }
  exit 0
fi

if [ "${1:-}" != run ] || [ $# -lt 3 ]; then
  echo "usage: sh fuzz/run.sh deps | run BUILD SECONDS [NAME...]" >&2
  exit 2
fi
B=$2
S=$3
shift 3
names="$*"
[ -z "$names" ] && names=$(ls fuzz/fuzz_*.c | sed 's|^fuzz/fuzz_\(.*\)\.c$|\1|')

base=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
T=$(mktemp -d "$base/mega_fuzz_XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
mkdir -p "$B/crashes"

failed=""
printf '%-14s %10s %8s %7s %s\n' target executions seconds corpus result
for n in $names; do
  bin="$B/fuzz_$n"
  if [ ! -x "$bin" ]; then
    printf '%-14s %s\n' "$n" "not built ($bin)"
    failed="$failed $n"
    continue
  fi
  mkdir -p "$T/$n/corpus" "$T/$n/files"
  [ -d "fuzz/corpus/$n" ] && cp fuzz/corpus/"$n"/* "$T/$n/corpus/" 2>/dev/null
  seeds=$(ls "$T/$n/corpus" | wc -l)
  log="$B/fuzz_$n.log"
  start=$(date +%s)
  # -close_fd_mask=3: the targets' own output (the CLI's messages) is dropped; libFuzzer and the
  # sanitizers keep reporting. -malloc_limit_mb: one allocation above 512 MB from a small input
  # is a bug (a size read from the input without a bound).
  MEGA_FUZZ_TMP="$T/$n/files" "$bin" -max_total_time="$S" -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=512 \
    -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$B/crashes/$n-" ${FUZZ_FLAGS:-} "$T/$n/corpus" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  units=$(ls "$T/$n/corpus" | wc -l)
  if [ $rc -eq 0 ]; then
    result="ok"
  else
    result="FAILED (exit $rc): $(grep -m1 -E 'ERROR: |runtime error|check failed|==ERROR|SUMMARY' "$log" | cut -c1-120)"
    art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    [ -n "$art" ] && result="$result; input $art"
    failed="$failed $n"
  fi
  printf '%-14s %10s %8s %7s %s\n' "$n" "${execs:-?}" "$secs" "$seeds>$units" "$result"
done
if [ -n "$failed" ]; then
  echo "fuzz: failing:$failed (logs: $B/fuzz_NAME.log)"
  exit 1
fi
echo "fuzz: all targets ran without a finding"
