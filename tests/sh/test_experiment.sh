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
if [ "$n" -eq 12 ] && "$M" experiment --list | grep -q "^abc-mt " && "$M" experiment --list | grep -q "^extrapolate " && "$M" experiment --list | grep -q "^ablation-fmnist " &&
  "$M" experiment --list | grep -q "^pathfinder " && "$M" experiment --list | grep -q "^vision " && "$M" experiment --list | grep -q "^abc-mlm " &&
  "$M" experiment --list | grep -q "^megalodon " &&
  "$M" experiment --list | grep -q "^speech "; then
  ok "--list names the 12 experiments"
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

# the pathfinder experiment generates PNG images: without libpng it says so in one line and is skipped
PF="pathfinder 6 3"
"$M" pathfinder --out nopng --count 1 > /dev/null 2> err.txt
if grep -q 'no libpng' err.txt; then
  PF=
  "$M" experiment pathfinder --quick --out x > out.txt 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -q "this build has no libpng" out.txt; then ok "pathfinder without libpng: one clear line"; else bad "pathfinder without libpng (rc $rc)"; fi
  echo "NOTE test_experiment.sh: this build has no libpng; experiment pathfinder --quick is skipped"
fi

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
# majority line; pathfinder: 2 rows of data statistics and 4 models), expected figures
for spec in "aft 5 6" "lra 10 2" "ablation-listops 11 2" "ablation-fmnist 11 2" "extrapolate 9 3" "speed 15 2" "vision 4 1" "megalodon 9 3" ${PF:+"$PF"} "$SPEECH"; do
  [ "$spec" = skip ] && continue
  set -- $spec
  name=$1 rows=$2 figs=$3
  "$M" experiment "$name" --quick --out q --data text.txt --threads 1 > "$name.out" 2>&1
  rc=$?
  status $rc "experiment $name --quick exits 0"
  md="q/$name/results.md"
  r=$(grep '^| ' "$md" 2>/dev/null | grep -v -e '^| model' -e '^| variant' -e '^| set ' -e '^| majority' | wc -l)
  if [ "$r" -eq "$rows" ]; then ok "$name: $rows table rows"; else bad "$name: $r table rows, expected $rows"; fi
  if [ -s "$md" ] && ! grep '^| ' "$md" | grep -q '—'; then ok "$name: no failed run in the table"; else bad "$name: a failed run in $md"; fi
  f=$(ls q/"$name"/*.svg 2>/dev/null | wc -l)
  if [ "$f" -eq "$figs" ]; then ok "$name: $figs figures"; else bad "$name: $f figures, expected $figs"; fi
  for s in q/"$name"/*.svg; do
    if [ -f "$s" ] && svg_ok "$s"; then ok "$s well-formed with data"; else bad "$s is not a well-formed SVG with data"; fi
    grep -q '(s)\|(byte)\|(bytes)\|(tokens)\|accuracy\|per byte\|k_d\|f_h\|(% of the label)' "$s" || bad "$s: no axis label with a unit"
  done
done
grep -q "majority class" q/lra/results.md && ok "lra reports the majority baseline" || bad "lra: no majority baseline"
grep -q "82.3 % for Mega (90M parameters) against 81.8 % for DeiT-B" q/vision/results.md && ok "vision: the paper's ImageNet figures beside" ||
  bad "vision: no ImageNet context"
if [ -n "$PF" ]; then
  for d in easy hard; do
    if [ "$(head -c 8 q/pathfinder/pathfinder-$d.png | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && grep -q "(pathfinder-$d.png)" q/pathfinder/results.md; then
      ok "pathfinder: the $d samples figure (PNG) is written and shown"
    else
      bad "pathfinder: no $d samples figure"
    fi
  done
  # the test images are another seed's: not the training images
  if ! cmp -s q/pathfinder/data/pathfinder32-train-80/curv_baseline/imgs/0/sample_0.png q/pathfinder/data/pathfinder32-test-40/curv_baseline/imgs/0/sample_0.png; then
    ok "pathfinder: test set differs from the training set"
  else
    bad "pathfinder: the test images are the training images"
  fi
fi

# abc-mlm reads GCIDE (dict-gcide) and eight FreeDict dictionaries, not --data
need=""
for d in gcide freedict-deu-eng freedict-fra-eng freedict-ita-eng freedict-spa-eng freedict-por-eng freedict-nld-eng freedict-swe-eng freedict-fin-eng; do
  [ -f /usr/share/dictd/$d.index ] || need="$need $d"
done
if [ -n "$need" ]; then
  echo "NOTE abc-mlm --quick skipped: /usr/share/dictd lacks$need (apt-get install dict-gcide dict-freedict-LANG-eng)"
else
  "$M" experiment abc-mlm --quick --out q --threads 1 > abc-mlm.out 2>&1
  status $? "experiment abc-mlm --quick exits 0"
  md=q/abc-mlm/results.md
  r=$(grep '^| ' "$md" 2>/dev/null | grep -v -e '^| model' | wc -l)
  if [ "$r" -eq 6 ]; then ok "abc-mlm: 6 table rows"; else bad "abc-mlm: $r table rows, expected 6"; fi
  if [ -s "$md" ] && ! grep '^| ' "$md" | grep -q '—'; then ok "abc-mlm: no failed run in the table"; else bad "abc-mlm: a failed run in $md"; fi
  grep -q "^init-from .*initialised fresh 3 " q/abc-mlm/logs/pos-pre-abc64.txt
  status $? "abc-mlm: the fine-tuning run loaded the pretrained encoder (all but the 3 head tensors)"
  [ "$(cut -f1 q/abc-mlm/data/langid-train.tsv | sort -u | wc -l)" -eq 8 ] && [ "$(cut -f1 q/abc-mlm/data/pos-test.tsv | sort -u | wc -l)" -eq 4 ]
  status $? "abc-mlm: 8 languages and 4 parts of speech in the data"
fi
# abc-mt reads FreeDict deu-eng (dict-freedict-deu-eng), not --data
if [ ! -f /usr/share/dictd/freedict-deu-eng.index ]; then
  echo "NOTE abc-mt --quick skipped: /usr/share/dictd lacks freedict-deu-eng (apt-get install dict-freedict-deu-eng)"
else
  "$M" experiment abc-mt --quick --out q --threads 1 > abc-mt.out 2>&1
  status $? "experiment abc-mt --quick exits 0"
  md=q/abc-mt/results.md
  r=$(grep '^| ' "$md" 2>/dev/null | grep -v -e '^| model' | wc -l)
  if [ "$r" -eq 10 ]; then ok "abc-mt: 10 table rows (6 sentence-level, 4 document-level)"; else bad "abc-mt: $r table rows, expected 10"; fi
  if [ -s "$md" ] && ! grep '^| ' "$md" | grep -q '—'; then ok "abc-mt: no failed run in the table"; else bad "abc-mt: a failed run in $md"; fi
  f=$(ls q/abc-mt/*.svg 2>/dev/null | wc -l)
  if [ "$f" -eq 2 ]; then ok "abc-mt: 2 figures"; else bad "abc-mt: $f figures, expected 2"; fi
  for s in q/abc-mt/*.svg; do
    if [ -f "$s" ] && svg_ok "$s"; then ok "$s well-formed with data"; else bad "$s is not a well-formed SVG with data"; fi
  done
  grep -q '^| ABC-MLP 32/8 .* | 27.1 |$' "$md" && grep -q '^| BASE (Transformer) .* | 39.9 |$' "$md"
  status $? "abc-mt: the paper's BLEU beside the models"
  # a document's source is at least 100 bytes (quick mode) and joins several pairs
  awk -F'\t' 'length($1) < 100 { short++ } END { exit !(NR >= 40 && short <= 1) }' q/abc-mt/data/doc-train.tsv
  status $? "abc-mt: documents of joined entries (sources of at least 100 bytes)"
fi
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
