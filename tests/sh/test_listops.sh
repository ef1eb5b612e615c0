#!/bin/sh
# `mega listops` from the command line: the three files, headers, counts, field format, lengths,
# no duplicates, no temporaries, determinism in --seed, and every bad invocation rejected with
# exit code 2 and exactly one "mega: error:" line. Usage: sh tests/sh/test_listops.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
M="$B/mega"
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_listops_XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

if [ ! -x "$M" ]; then
    echo "FAIL $M not built"
    echo "0 passed, 1 failed"
    exit 1
fi

small="--train 200 --valid 20 --test 20 --min-len 20 --max-len 100 --max-depth 4"
# shellcheck disable=SC2086
"$M" listops --out "$T/a" $small >"$T/out" 2>"$T/err"
status $? "mega listops $small exits 0"
for s in train valid test; do
    [ -f "$T/a/$s.tsv" ]
    status $? "$s.tsv written"
    [ "$(head -n 1 "$T/a/$s.tsv")" = "$(printf 'Source\tTarget')" ]
    status $? "$s.tsv starts with the header Source<TAB>Target"
done
[ "$(wc -l <"$T/a/train.tsv")" -eq 201 ] && [ "$(wc -l <"$T/a/valid.tsv")" -eq 21 ] && [ "$(wc -l <"$T/a/test.tsv")" -eq 21 ]
status $? "200/20/20 examples (+ header)"
[ "$(ls "$T/a" | wc -l)" -eq 3 ]
status $? "exactly three files, no temporaries left"
grep -q "200/20/20 examples" "$T/out"
status $? "summary on stdout"
# every line: 2 fields, target a digit, tokens from the ListOps alphabet, 20 < length < 100 (no parentheses)
bad=$(tail -q -n +2 "$T/a/train.tsv" "$T/a/valid.tsv" "$T/a/test.tsv" | awk -F'\t' '
    NF != 2 || $2 !~ /^[0-9]$/ { print "fields: " NR; next }
    { n = split($1, w, " "); len = 0
      for (i = 1; i <= n; i++) {
        if (w[i] == "(" || w[i] == ")") continue
        if (w[i] !~ /^([0-9]|\[MIN|\[MAX|\[MED|\[SM|\])$/) { print "token " w[i]; next }
        len++ }
      if (len <= 20 || len >= 100) print "length " len }' | head -3)
[ -z "$bad" ]
status $? "fields, tokens and lengths ($bad)"
[ -z "$(tail -q -n +2 "$T/a/train.tsv" "$T/a/valid.tsv" "$T/a/test.tsv" | sort | uniq -d)" ]
status $? "no duplicate examples across the splits"
# the first example opens like the published to_string: "( ( ... [OP"
head -n 2 "$T/a/train.tsv" | tail -n 1 | grep -q '^( ( ( .*\[\(MIN\|MAX\|MED\|SM\) .* ] )	[0-9]$'
status $? "published formatting: nested parentheses, operator, ' ] )' before the target"

# determinism
# shellcheck disable=SC2086
"$M" listops --out "$T/b" $small --seed 0 >/dev/null 2>&1 && cmp -s "$T/a/train.tsv" "$T/b/train.tsv" && cmp -s "$T/a/test.tsv" "$T/b/test.tsv"
status $? "same seed (default 0), same files"
# shellcheck disable=SC2086
"$M" listops --out "$T/c" $small --seed 9 >/dev/null 2>&1 && ! cmp -s "$T/a/train.tsv" "$T/c/train.tsv"
status $? "another seed, other data"
# rewriting an existing directory replaces the files
# shellcheck disable=SC2086
"$M" listops --out "$T/c" $small --train 30 >/dev/null 2>&1 && [ "$(wc -l <"$T/c/train.tsv")" -eq 31 ] && [ "$(ls "$T/c" | wc -l)" -eq 3 ]
status $? "regenerating into the same directory replaces the files"

"$M" listops --help >"$T/help" 2>&1 && grep -q -- "--max-depth" "$T/help" && grep -q "96000" "$T/help"
status $? "listops --help lists the flags and the published defaults"
"$M" help | grep -q "listops"
status $? "mega help lists listops"

# errors: exit 2 and exactly one "mega: error:" line
err_case() { # err_case NAME ARGS...
    name=$1
    shift
    "$M" listops "$@" >"$T/eo" 2>"$T/ee"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$T/ee")" -eq 1 ] && grep -q '^mega: error: ' "$T/ee"; then
        status 0 "$name"
    else
        status 1 "$name: exit $rc, stderr: $(cat "$T/ee")"
    fi
}
touch "$T/file"
err_case "missing --out" --train 10
err_case "--out is a file" --out "$T/file" $small
err_case "min-len > max-len" --out "$T/e" --min-len 100 --max-len 50
err_case "min-len = max-len - 1" --out "$T/e" --min-len 49 --max-len 50
err_case "--train 0" --out "$T/e" --train 0
err_case "--valid 0" --out "$T/e" --valid 0
err_case "--test -1" --out "$T/e" --test -1
err_case "--max-args 1" --out "$T/e" --max-args 1
err_case "--max-depth 0" --out "$T/e" --max-depth 0
err_case "--max-depth 1000" --out "$T/e" --max-depth 1000
err_case "--max-len not a number" --out "$T/e" --max-len abc
err_case "--seed negative" --out "$T/e" --seed -3
err_case "unknown flag" --out "$T/e" --depth 3
err_case "stray argument" --out "$T/e" extra
err_case "unreachable min-len" --out "$T/e" --max-depth 2 --max-args 3 --min-len 5 --max-len 100
err_case "no reachable length (lengths 2, 3)" --out "$T/e" --min-len 1 --max-len 4
err_case "too few distinct examples" --out "$T/e" --max-depth 2 --max-args 2 --min-len 0 --max-len 50 --train 1000
[ ! -e "$T/e/train.tsv" ] && [ -z "$(ls "$T/e" 2>/dev/null)" ]
status $? "a failed run leaves no file behind"

finish
