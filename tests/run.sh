#!/bin/sh
# Runs every test binary in $1 (default build) and prints the combined "N passed, N failed".
# Each binary prints its own summary line last; a binary that crashes counts as one failure.
B=${1:-build}
total_p=0; total_f=0; bad=""
for t in "$B"/test_* "$B"/t64_* tests/sh/test_*.sh; do
  [ -e "$t" ] || continue
  name=$(basename "$t")
  case "$t" in
    *.sh) out=$(sh "$t" "$B" 2>&1); rc=$? ;;
    *) [ -x "$t" ] || continue; out=$("$t" 2>&1); rc=$? ;;
  esac
  line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
  p=$(printf '%s' "$line" | sed -n 's/^\([0-9]*\) passed.*/\1/p'); p=${p:-0}
  f=$(printf '%s' "$line" | sed -n 's/.* \([0-9]*\) failed$/\1/p'); f=${f:-0}
  if [ -z "$line" ] || { [ $rc -ne 0 ] && [ "$f" = 0 ]; }; then f=$((f+1)); fi
  printf '%s\n' "$out" | grep -E '^(FAIL|CASE|NOTE)' | sed "s/^/[$name] /"
  printf '%-24s %s (exit %d)\n' "$name" "${line:-no summary line}" $rc
  total_p=$((total_p+p)); total_f=$((total_f+f))
  [ $f -ne 0 ] && bad="$bad $name"
done
[ -n "$bad" ] && echo "failing:$bad"
echo "$total_p passed, $total_f failed"
[ $total_f -eq 0 ]
