#!/bin/sh
# `mega freedict` on a tiny synthetic dictd dictionary (gzip -n + an index with dictd base64
# offsets, written by python3) with one entry per case of the cleaning rule: the exact pairs,
# the counts per reason, the split (no source phrase in two files, determinism in --seed), plain
# .dict input, and the errors (missing files, corrupt or truncated .dz, bad index lines, bad
# flags) as one "mega: error:" line. With dict-freedict-deu-eng installed, also the real thing.
# Usage: sh tests/sh/test_freedict.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
M="$B/mega"
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_freedict_XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM

if [ ! -x "$M" ]; then
    echo "FAIL $M not built"
    echo "0 passed, 1 failed"
    exit 1
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "FAIL python3 is needed to write the test dictionary"
    echo "0 passed, 1 failed"
    exit 1
fi

# ---- the dictionary: entries in order; the index adds a second headword for "Haus", the
# database's own 00-database-* entries and one line pointing past the end of the text
python3 - "$T" <<'EOF'
import sys
d = sys.argv[1]
entries = [
    ("00-database-short", "\n00-database-short\nTest dictionary\n"),
    ("00-database-info", "\n00-database-info\nA test.\n"),
    ("haus", "Haus /haʊs/ <n, neut>\nhouse <n>, home <n>\n   Synonym: {Heim}\n\n see: {Häuser}\n"),
    ("aal", "Aal /ˈɑːl/ <masc, n, sg>\n         Note: a fish\n [cook.] eel <n>\n      \"Aal blau\"  - eel au bleu\n"),
    ("plan", "plan /plɑ̃/ <n, masc>\n1. map\n2. design, plan\n"),
    ("dollar-zeichen", "Dollar-Zeichen /dɔlˈɑːɾ/ ($) <neut, n, sg>\ndollar sign <n>$\n"),
    ("niosh", "NIOSH-Eintrag /ˈniːɔʃ/\nSafety InstituteNIOSH,  /ˈniːɔʃ/\n"),
    ("kennzeichen", "Kennzeichen /ˈkɛntsaɪçən/ <neut>\nregistration number <n> [Br.] VRN,  /vrn/ , licence number <n>\n"),
    ("ich denke also bin ich", "Ich denke, also bin ich. /ɪç ˈdɛŋkə/\nI think, therefore I am.\n"),
    ("grüß dich", "Grüß dich! /ɡɾˈyːs dˈɪç/ <int>\n [Bayr.]  [Ös.] Hello! <int>, Hi! <int> [Br.] , Howzit!\n"),
    ("komm runter mann", "Komm runter, Mann! /kɔm/\nChill (out), man!\n"),
    ("握り飯", " [news1]  握り飯 /niɡiɾimeɕi/,  [news1] にぎりめし /niɡiɾimeɕi/\n(noun (common) (futsuumeishi))\n{おにぎり}rice ball\n"),
    ("hehl", "Hehl /hˈeːl/ <masc, n, sg>\n\n      \"kein Hehl machen\"  - make no secret\n see: {verhehlen}\n"),
    ("sic", "[sic] /zˈiːk/\n[sic]\n"),
    ("kaputt", "kaputt /ka\xff/\nbroken\n"),
    ("haus", "Haus /haʊs/\nhouse\n"),
    ("guatemala", "Guatemala /ɡwateˈmala/ <n>\nGuatemala\n"),
    ("lang", "Das ist ein sehr langer Satz, viel zu lang für die kurze Liste dieses Tests. /das/\nThis is a long one.\n"),
    ("einschalter", "Einschalter /ˈaɪnʃˌaltɜ/ <masc, n, sg>\n\"on\"-switch <n>\n"),
    ("bank", "Bank /baŋk/ <fem, n, sg>\nbench <n>\n"),
    ("bank", "Bank /baŋk/ <fem, n, sg>\n [fin.] bank <n>, credit institution <n>\n"),
    ("tab", "Tab /tɛp/\nwith\ttab\n"),
    ("gehen", "gehen /ɡeːən/ <v>\n   Synonyms: {laufen}\n1. <v> [ugs.]\n2. go <v>; walk <v>\n"),
]
A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
def b64(v):
    s = ""
    while True:
        s = A[v % 64] + s
        v //= 64
        if v == 0:
            return s
text = b""
index = []
for hw, e in entries:
    b = e.encode()
    if "\xff" in e:  # an invalid UTF-8 byte inside the entry
        i = e.index("\xff")
        b = e[:i].encode() + b"\xff" + e[i + 1:].encode()
    index.append("%s\t%s\t%s" % (hw, b64(len(text)), b64(len(b))))
    text += b
index.insert(3, "Haus\t%s" % index[2].split("\t", 1)[1])    # a second headword, same entry
index.append("zerbrochen\t%s\t%s" % (b64(len(text) + 100), b64(10)))  # outside the text
open(d + "/t.dict", "wb").write(text)
open(d + "/t.index", "w", encoding="utf-8").write("\n".join(index) + "\n")
EOF
cp "$T/t.dict" "$T/plain.dict" && cp "$T/t.index" "$T/plain.index"
gzip -n -9 "$T/t.dict" && mv "$T/t.dict.gz" "$T/t.dict.dz"
check "synthetic dictionary written" test -s "$T/t.dict.dz" -a -s "$T/t.index"

# ---- the pairs
"$M" freedict --dict "$T/t.dict.dz" --out "$T/a" --max-len 60 --valid-frac 0.2 --test-frac 0.2 >"$T/out" 2>"$T/err"
status $? "mega freedict on the synthetic dictionary exits 0"
for s in train valid test; do check "$s.tsv written" test -f "$T/a/$s.tsv"; done
check "exactly three files, no temporaries left" test "$(ls "$T/a" | wc -l)" -eq 3
LC_ALL=C sort >"$T/want" <<'EOF'
Aal	eel
Bank	bank
Bank	bench
Dollar-Zeichen	dollar sign
Einschalter	"on"-switch
Grüß dich!	Hello!
Guatemala	Guatemala
Haus	house
Ich denke, also bin ich.	I think, therefore I am.
Kennzeichen	registration number
Komm runter, Mann!	Chill, man!
Tab	with tab
gehen	go
plan	map
握り飯	rice ball
EOF
cat "$T/a/train.tsv" "$T/a/valid.tsv" "$T/a/test.tsv" | LC_ALL=C sort >"$T/got"
if cmp -s "$T/want" "$T/got"; then ok "the 15 cleaned pairs, exactly"; else
    bad "the cleaned pairs differ:"
    diff "$T/want" "$T/got" | sed 's/^/    /'
fi
check "every line is source<TAB>target" test -z "$(cat "$T/a/"*.tsv | awk -F'\t' 'NF != 2 || $1 == "" || $2 == ""')"
grep -q "25 index lines, 22 entries (2 database lines skipped)" "$T/out"
status $? "summary: index lines, distinct entries, database lines ($(head -n 1 "$T/out"))"
grep -q "pairs kept 15 (1 with the target equal to the source), dropped 7: bad-utf8 1, no-source 1, no-target 1, glued-abbreviation 1, bad-offset 1, too-long 1, duplicate 1" "$T/out"
status $? "summary: one pair dropped per reason ($(sed -n 2p "$T/out"))"
grep -q "wrote .*: [0-9]*/[0-9]*/[0-9]* pairs" "$T/out" && [ ! -s "$T/err" ]
status $? "summary of the split on stdout, nothing on stderr"
n_valid=$(wc -l <"$T/a/valid.tsv")
n_test=$(wc -l <"$T/a/test.tsv")
[ "$n_valid" -ge 3 ] && [ "$n_test" -ge 3 ] && [ "$n_valid" -le 5 ] && [ "$n_test" -le 5 ]
status $? "valid/test hold about 20% of 15 pairs each ($n_valid, $n_test)"
leak=$(for s in train valid test; do cut -f1 "$T/a/$s.tsv" | LC_ALL=C sort -u; done | LC_ALL=C sort | uniq -d)
[ -z "$leak" ]
status $? "no source phrase in two splits ($leak)"

# the same with options
"$M" freedict --dict "$T/t.dict.dz" --out "$T/di" --max-len 60 --drop-identical >"$T/out2" 2>&1 &&
    grep -q "pairs kept 14 .*identical 1" "$T/out2" && ! cat "$T/di/"*.tsv | grep -q '^Guatemala'
status $? "--drop-identical drops Guatemala<TAB>Guatemala"
"$M" freedict --dict "$T/t.dict.dz" --out "$T/nl" >"$T/out3" 2>&1 &&
    cat "$T/nl/"*.tsv | grep -q '^Das ist ein sehr langer Satz, viel zu lang für die kurze Liste dieses Tests.	This is a long one.$'
status $? "default --max-len keeps the 80-byte sentence"
"$M" freedict --dict "$T/plain.dict" --out "$T/p" --max-len 60 --valid-frac 0.2 --test-frac 0.2 >/dev/null 2>&1 &&
    cmp -s "$T/a/train.tsv" "$T/p/train.tsv" && cmp -s "$T/a/test.tsv" "$T/p/test.tsv"
status $? "an uncompressed .dict gives the same files"

# ---- determinism
"$M" freedict --dict "$T/t.dict.dz" --out "$T/b" --max-len 60 --valid-frac 0.2 --test-frac 0.2 --seed 1 >/dev/null 2>&1 &&
    cmp -s "$T/a/train.tsv" "$T/b/train.tsv" && cmp -s "$T/a/valid.tsv" "$T/b/valid.tsv" && cmp -s "$T/a/test.tsv" "$T/b/test.tsv"
status $? "same dictionary and seed (default 1): the same bytes"
"$M" freedict --dict "$T/t.dict.dz" --out "$T/c" --max-len 60 --valid-frac 0.2 --test-frac 0.2 --seed 2 >/dev/null 2>&1 &&
    ! { cmp -s "$T/a/train.tsv" "$T/c/train.tsv" && cmp -s "$T/a/valid.tsv" "$T/c/valid.tsv"; }
status $? "another seed, another split"
"$M" freedict --dict "$T/t.dict.dz" --out "$T/c" --max-len 60 --valid-frac 0 --test-frac 0 >/dev/null 2>&1 &&
    [ "$(wc -l <"$T/c/train.tsv")" -eq 15 ] && [ ! -s "$T/c/valid.tsv" ] && [ ! -s "$T/c/test.tsv" ]
status $? "fractions 0: everything in train.tsv, the directory's files replaced"

"$M" freedict --help >"$T/help" 2>&1 && grep -q -- "--max-len" "$T/help" && grep -q "first translation" "$T/help" &&
    grep -q "Synonym" "$T/help"
status $? "freedict --help lists the flags and the cleaning rule"
"$M" help | grep -q "freedict"
status $? "mega help lists freedict"

# ---- errors: exit code and exactly one "mega: error:" line
err_case() { # err_case NAME WANT_EXIT ARGS...
    name=$1
    want=$2
    shift 2
    "$M" freedict "$@" >"$T/eo" 2>"$T/ee"
    rc=$?
    if [ $rc -eq "$want" ] && [ "$(wc -l <"$T/ee")" -eq 1 ] && grep -q '^mega: error: ' "$T/ee"; then
        status 0 "$name"
    else
        status 1 "$name: exit $rc (want $want), stderr: $(cat "$T/ee")"
    fi
}
err_case "missing --dict" 2 --out "$T/e"
err_case "missing --out" 2 --dict "$T/t.dict.dz"
err_case "unknown flag" 2 --dict "$T/t.dict.dz" --out "$T/e" --bogus 1
err_case "fractions summing to 1" 2 --dict "$T/t.dict.dz" --out "$T/e" --valid-frac 0.5 --test-frac 0.5
err_case "missing dictionary" 1 --dict "$T/none.dict.dz" --out "$T/e"
grep -q "none.dict.dz" "$T/ee"
status $? "the message names the missing file"
cp "$T/t.dict.dz" "$T/noidx.dict.dz"
err_case "missing index" 1 --dict "$T/noidx.dict.dz" --out "$T/e"
grep -q "noidx.index" "$T/ee"
status $? "the message names the missing index"
printf 'Haus /haUs/\nhouse\n' >"$T/junk.dict.dz"
# a gzip header (deflate, no flags), then bytes that are no deflate stream
printf '\037\213\010\000\000\000\000\000\000\003\377\377\377\377garbage, not deflate data' >"$T/bad.dict.dz"
cp "$T/t.index" "$T/junk.index" && cp "$T/t.index" "$T/bad.index"
err_case "a .dz that is not gzip" 1 --dict "$T/junk.dict.dz" --out "$T/e"
err_case "corrupt gzip data" 1 --dict "$T/bad.dict.dz" --out "$T/e"
sz=$(wc -c <"$T/t.dict.dz")
head -c $((sz / 2)) "$T/t.dict.dz" >"$T/cut.dict.dz" && cp "$T/t.index" "$T/cut.index"
err_case "truncated gzip data" 1 --dict "$T/cut.dict.dz" --out "$T/e"
cp "$T/t.dict.dz" "$T/bi.dict.dz" && printf 'Haus\tAAA\n' >"$T/bi.index"
err_case "an index line without length" 1 --dict "$T/bi.dict.dz" --out "$T/e"
grep -q "bi.index:1:" "$T/ee"
status $? "the message names the index line"
printf 'Haus\tA*A\tBB\n' >"$T/bi.index"
err_case "an index line with a bad base64 digit" 1 --dict "$T/bi.dict.dz" --out "$T/e"
printf 'Haus\tzzzzzz\tBB\n' >"$T/bi.index"
err_case "an index of entries outside the dictionary only" 1 --dict "$T/bi.dict.dz" --out "$T/e"
: >"$T/bi.index"
err_case "an empty index" 1 --dict "$T/bi.dict.dz" --out "$T/e"
err_case "a dictionary that is not .dict/.dict.dz" 1 --dict "$T/t.index" --out "$T/e"
check "no output written by the failures" test ! -e "$T/e"

# ---- the real dictionary, when installed
R=/usr/share/dictd/freedict-deu-eng.dict.dz
if [ -f "$R" ]; then
    "$M" freedict --dict "$R" --out "$T/deu" >"$T/rout" 2>&1
    status $? "mega freedict on $R"
    kept=$(sed -n 's/^pairs kept \([0-9]*\) .*/\1/p' "$T/rout")
    lines=$(cat "$T/deu/"*.tsv | wc -l)
    [ "${kept:-0}" -gt 10000 ] && [ "$lines" -eq "$kept" ]
    status $? "deu-eng: more than 10000 pairs, all written ($kept kept, $lines lines)"
    [ -z "$(cat "$T/deu/"*.tsv | awk -F'\t' 'NF != 2 || $1 == "" || $2 == ""' | head -3)" ]
    status $? "deu-eng: every line has one TAB between non-empty fields"
    v=$(wc -l <"$T/deu/valid.tsv")
    [ "$v" -gt $((kept / 100)) ] && [ "$v" -lt $((kept / 20)) ]
    status $? "deu-eng: valid.tsv holds about 2% ($v)"
    grep -q "^Haus	house$" "$T/deu/"*.tsv
    status $? "deu-eng: Haus<TAB>house"
else
    echo "NOTE $R not installed (apt-get install dict-freedict-deu-eng): the real-dictionary checks were skipped"
fi
finish
