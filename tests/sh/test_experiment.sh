#!/bin/sh
# `mega experiment` (docs/results.md) in --quick mode, so that no experiment rots:
#   sh tests/sh/test_experiment.sh BUILD_DIR
# Every experiment runs end to end at toy sizes (data, training, evaluation, table, figures) and
# must exit 0 with a results.md whose table has a row per model and no failed run (—), and SVG
# figures that are well-formed XML with drawn data. Also: --list, an unknown name, a missing or
# too small --data file, and that a rerun with the same seed gives the same validation numbers.
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")/../.." && pwd)
M="$B/mega"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
cd "$T" || exit 1
# a text of the repository's own docs (about 300 KB) for the language-model experiments
cat "$HERE"/docs/*.md "$HERE"/README.md > text.txt

n=$("$M" experiment --list | wc -l)
if [ "$n" -eq 7 ] && "$M" experiment --list | grep -q "^extrapolate " && "$M" experiment --list | grep -q "^speech "; then
  ok "--list names the 7 experiments"
else
  bad "--list ($n lines)"
fi
"$M" experiment nosuch > out.txt 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "unknown experiment 'nosuch'" out.txt && [ "$(wc -l < out.txt)" -eq 1 ]; then ok "unknown name: one line, exit 2"; else bad "unknown name (rc $rc): $(cat out.txt)"; fi
"$M" experiment aft --quick --out x --data missing.txt > out.txt 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "missing.txt: no such file" out.txt; then ok "missing --data: clear error"; else bad "missing --data (rc $rc)"; fi
# Fashion-MNIST (Debian's dataset-fashion-mnist) missing or damaged: one clear line
"$M" experiment lra --quick --out x --fashion-mnist "$T/nowhere" > out.txt 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "no $T/nowhere/train-images-idx3-ubyte.gz (install Debian's dataset-fashion-mnist" out.txt; then
  ok "missing Fashion-MNIST: clear error"
else
  bad "missing Fashion-MNIST (rc $rc): $(tail -1 out.txt)"
fi
mkdir fm
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  head -c 100 /usr/share/datasets/fashion-mnist/$f.gz > fm/$f.gz 2>/dev/null || printf 'junk' > fm/$f.gz
done
"$M" experiment ablation-fmnist --quick --out x --fashion-mnist fm > out.txt 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "corrupt compressed data\|not an IDX file" out.txt; then ok "truncated Fashion-MNIST: clear error"; else bad "truncated Fashion-MNIST (rc $rc): $(tail -1 out.txt)"; fi
head -c 3000 text.txt > tiny.txt
"$M" experiment aft --quick --out x --data tiny.txt > out.txt 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "too little text" out.txt; then ok "too small --data: clear error"; else bad "tiny --data (rc $rc): $(tail -1 out.txt)"; fi

# svg_ok FILE: well-formed XML whose root is <svg> with drawn data: a line, points or cells
svg_ok() {
  if [ -x /usr/bin/python3 ]; then
    /usr/bin/python3 - "$1" <<'EOF'
import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
pts = [p.get("points", "").split() for p in r.iter(ns + "polyline")]
dots = list(r.iter(ns + "circle"))
sys.exit(0 if r.tag == ns + "svg" and (any(len(p) >= 2 for p in pts) or dots or len(list(r.iter(ns + "rect"))) > 3) else 1)
EOF
  else
    [ "$(head -c 4 "$1")" = "<svg" ] && tail -n 1 "$1" | grep -q "</svg>"
  fi
}

# speech needs espeak-ng and a build with libsndfile (speech-synth of one clip tells)
SPEECH="speech 4 2"
if ! command -v espeak-ng >/dev/null 2>&1; then
  SPEECH=skip
  echo "NOTE test_experiment: speech skipped (espeak-ng not installed)"
elif ! "$M" speech-synth --out probe --n-words 1 --per-word 1 --quiet > probe.txt 2>&1; then
  SPEECH=skip
  echo "NOTE test_experiment: speech skipped ($(head -n 1 probe.txt))"
fi

# name, expected model rows in results.md (table rows that are not headers, separators or the
# majority line), expected figures
for spec in "aft 5 6" "lra 10 2" "ablation-listops 11 2" "ablation-fmnist 11 2" "extrapolate 9 3" "speed 15 2" "$SPEECH"; do
  [ "$spec" = skip ] && continue
  set -- $spec
  name=$1 rows=$2 figs=$3
  "$M" experiment "$name" --quick --out q --data text.txt --threads 1 > "$name.out" 2>&1
  rc=$?
  status $rc "experiment $name --quick exits 0"
  md="q/$name/results.md"
  r=$(grep '^| ' "$md" 2>/dev/null | grep -v -e '^| model' -e '^| variant' -e '^| majority' | wc -l)
  if [ "$r" -eq "$rows" ]; then ok "$name: $rows table rows"; else bad "$name: $r table rows, expected $rows"; fi
  if [ -s "$md" ] && ! grep '^| ' "$md" | grep -q '—'; then ok "$name: no failed run in the table"; else bad "$name: a failed run in $md"; fi
  f=$(ls q/"$name"/*.svg 2>/dev/null | wc -l)
  if [ "$f" -eq "$figs" ]; then ok "$name: $figs figures"; else bad "$name: $f figures, expected $figs"; fi
  for s in q/"$name"/*.svg; do
    if [ -f "$s" ] && svg_ok "$s"; then ok "$s well-formed with data"; else bad "$s is not a well-formed SVG with data"; fi
    grep -q '(s)\|(byte)\|(bytes)\|(tokens)\|accuracy\|per byte\|k_d\|f_h' "$s" || bad "$s: no axis label with a unit"
  done
done
grep -q "majority class" q/lra/results.md && ok "lra reports the majority baseline" || bad "lra: no majority baseline"
if [ "$SPEECH" != skip ]; then
  if grep -q "Chance is 50.0 %" q/speech/results.md && grep -q "peak memory" q/speech/results.md &&
     [ -L q/speech/data/speech-sub/"$(head -n 1 q/speech/data/speech-sub/testing_list.txt)" ]; then
    ok "speech: chance, peak memory, and the Transformer's linked test subset"
  else
    bad "speech: results.md or data/speech-sub incomplete"
  fi
fi

# the same seed gives the same validation numbers (the bits-per-byte column of aft)
"$M" experiment aft --quick --out q2 --data text.txt --threads 1 > /dev/null 2>&1
col() { grep '^| ' "$1" | grep -v -e '^| model' -e '^|---' | awk -F'|' '{print $5}'; }
if [ -n "$(col q/aft/results.md)" ] && [ "$(col q/aft/results.md)" = "$(col q2/aft/results.md)" ]; then
  ok "aft rerun with the same seed: same bits per byte"
else
  bad "aft rerun differs: $(col q/aft/results.md | tr '\n' ' ') vs $(col q2/aft/results.md | tr '\n' ' ')"
fi
finish
