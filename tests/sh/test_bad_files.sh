#!/bin/sh
# Bad files and bad requests of the mega tool (issue 13): sh tests/sh/test_bad_files.sh BUILD_DIR
#   * validate before allocating: a small checkpoint whose config claims embed-dim 8192 (language
#     model, classifier, encoder-decoder) is refused quickly, naming the tensor, with a small
#     peak RSS (under 200 MB: nothing is allocated for the claimed model); an I32 tensor where a
#     float weight belongs is refused naming it; a classifier whose class list is longer than its
#     head is refused;
#   * bounded reads: only regular files are opened (a FIFO named model.safetensors, a FIFO or
#     /dev/zero as --data, a FIFO as translate --input: refused at once, under `timeout 10`), a
#     sparse file larger than the memory is refused naming its size, `eval --max-bytes 1000` on a
#     50 MB file reads only the start (peak RSS well below 50 MB);
#   * --threads 4096 is capped with a note; --max-memory refuses a run stating what it needs; the
#     training header states the expected memory (and it is near the measured peak);
#   * small fixes: --prenorm --postnorm, --tie-embeddings with --task classify, --top-p 0 (and a
#     tiny top-p is greedy), plot of non-finite values, escaped run names, classifier curves.
# Every expected error: exit code 2 and exactly one "mega: error:" line. Prints "N passed, M
# failed" last; -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
M="$B/mega"
if [ ! -x "$M" ]; then
  bad "no executable $M (build first)"
  finish
fi
command -v python3 >/dev/null 2>&1 || { ok "python3 missing: skipped"; finish; }
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_badfiles.XXXXXX") || { bad "mktemp -d"; finish; }
trap 'rm -rf "$T"' EXIT
trap 'exit 2' INT TERM HUP
cd "$T" || { bad "cd $T"; finish; }
TIME=""
[ -x /usr/bin/time ] && /usr/bin/time -v true >/dev/null 2>&1 && TIME="/usr/bin/time -v -o rss.txt"

# expect_error (lib.sh): exit 2, within 10 s (a blocked open would hit the timeout)
ERR_TIMEOUT=10
# peak RSS of the last $TIME run in MB (0 without /usr/bin/time)
rss_mb() { [ -s rss.txt ] && awk '/Maximum resident/ { printf "%d", $NF / 1024 }' rss.txt || echo 0; }

# ---- data and three tiny models ------------------------------------------------------------
python3 - <<'EOF'
import random
random.seed(3)
w = "the a cat dog sees runs house river king queen small old new and".split()
with open("corpus.txt", "w") as f:
    for i in range(3000):
        f.write(" ".join(random.choice(w) for _ in range(8)) + ".\n")
with open("cls.tsv", "w") as f:
    for i in range(60):
        f.write("%s\t%s\n" % ("ab"[i % 2], " ".join(random.choice(w) for _ in range(5))))
with open("par.tsv", "w") as f:
    for i in range(60):
        s = " ".join(random.choice(w) for _ in range(3))
        f.write(s + "\t" + s[::-1] + "\n")
EOF
small="--layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 16 --ffn-dim 16 --threads 1 --quiet --steps 2"
# shellcheck disable=SC2086
"$M" train --data corpus.txt --out lm $small --chunk-size 16 --batch 2 --seq-len 32 >lm.out 2>&1
status $? "train a tiny language model"
# shellcheck disable=SC2086
"$M" train --task classify --data cls.tsv --out cls $small --batch 4 --seq-len 16 >cls.out 2>&1
status $? "train a tiny classifier"
# shellcheck disable=SC2086
"$M" train --task translate --data par.tsv --valid par.tsv --out s2s $(echo "$small" | sed 's/--layers 1/--encoder-layers 1 --decoder-layers 1/') \
  --max-tokens 128 >s2s.out 2>&1
status $? "train a tiny encoder-decoder"

# rewrite a safetensors header (python3, no torch): config fields, a tensor's dtype, metadata
cat >edit.py <<'EOF'
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h["__metadata__"]
cfg = json.loads(meta["config"])
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    if k.startswith("dtype:"):
        h[k[6:]]["dtype"] = v
    elif k.startswith("meta:"):
        meta[k[5:]] = v
    elif "." in k:  # encoder.embed-dim
        side, f = k.split(".", 1)
        cfg[side][f] = json.loads(v)
    else:
        cfg[k] = json.loads(v)
meta["config"] = json.dumps(cfg)
hs = json.dumps(h).encode()
hs += b" " * ((8 - len(hs) % 8) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hs)) + hs + b[8 + n:])
EOF

# ---- 1. validate before allocating ---------------------------------------------------------
big="embed-dim=8192 z-dim=4096 hidden-dim=16384 ffn-dim=16384"
# shellcheck disable=SC2086
python3 edit.py lm/model.safetensors big.safetensors $big
size=$(wc -c <big.safetensors)
if [ "$size" -lt 200000 ]; then ok "a ${size}-byte checkpoint claiming embed-dim 8192"; else bad "crafted checkpoint is $size bytes"; fi
t0=$(date +%s)
expect_error "info on embed-dim 8192" "tensor 'decoder.embed_tokens.weight' has shape [257, 16] in the checkpoint but the model expects [257, 8192]" \
  $TIME "$M" info --model big.safetensors
t1=$(date +%s)
mb=$(rss_mb)
if [ -z "$TIME" ] || [ "$mb" -lt 200 ]; then ok "refused with a peak RSS of $mb MB (< 200)"; else bad "peak RSS $mb MB refusing embed-dim 8192"; fi
if [ $((t1 - t0)) -le 3 ]; then ok "refused in $((t1 - t0)) s"; else bad "refusing embed-dim 8192 took $((t1 - t0)) s"; fi
expect_error "eval on embed-dim 8192" "expects [257, 8192]" $TIME "$M" eval --model big.safetensors --data corpus.txt
mb=$(rss_mb)
if [ -z "$TIME" ] || [ "$mb" -lt 200 ]; then ok "eval: peak RSS $mb MB"; else bad "eval: peak RSS $mb MB"; fi
expect_error "generate on embed-dim 8192" "expects [257, 8192]" "$M" generate --model big.safetensors -n 4
# shellcheck disable=SC2086
python3 edit.py cls/model.safetensors bigcls.safetensors $big
expect_error "classifier with embed-dim 8192" "in the checkpoint but the model expects" $TIME "$M" info --model bigcls.safetensors
mb=$(rss_mb)
if [ -z "$TIME" ] || [ "$mb" -lt 200 ]; then ok "classifier: peak RSS $mb MB"; else bad "classifier: peak RSS $mb MB"; fi
python3 edit.py s2s/model.safetensors bigs2s.safetensors encoder.embed-dim=8192 decoder.embed-dim=8192 \
  encoder.hidden-dim=16384 decoder.hidden-dim=16384 encoder.ffn-dim=16384 decoder.ffn-dim=16384
expect_error "encoder-decoder with embed-dim 8192" "in the checkpoint but the model expects" $TIME "$M" info --model bigs2s.safetensors
mb=$(rss_mb)
if [ -z "$TIME" ] || [ "$mb" -lt 200 ]; then ok "encoder-decoder: peak RSS $mb MB"; else bad "encoder-decoder: peak RSS $mb MB"; fi
expect_error "translate with embed-dim 8192" "in the checkpoint but the model expects" sh -c "echo abc | '$M' translate --model bigs2s.safetensors"

# an I32 tensor where a float weight belongs: no silent int -> float
python3 edit.py lm/model.safetensors i32.safetensors dtype:decoder.layers.0.mega_layer.v_proj.weight=I32
expect_error "an I32 weight" "tensor 'decoder.layers.0.mega_layer.v_proj.weight' has dtype I32 in the checkpoint but the model expects floating point" \
  "$M" info --model i32.safetensors
expect_error "an I32 weight (generate)" "has dtype I32" "$M" generate --model i32.safetensors -n 4
# a float tensor stays fine in another float type (F32 bytes read as... no: only the header changes,
# so an F16 claim would mismatch the sizes; the reader refuses that as a malformed file)
python3 edit.py lm/model.safetensors f16.safetensors dtype:decoder.layers.0.mega_layer.v_proj.weight=F16
expect_error "a dtype whose size does not match the bytes" "do not match dtype F16" "$M" info --model f16.safetensors

# a classifier whose class list is longer than its head
python3 edit.py cls/model.safetensors cls3.safetensors 'meta:classes=["a", "b", "c"]'
expect_error "3 class names for 2 outputs (info)" "3 class names but the head has 2 outputs" "$M" info --model cls3.safetensors
expect_error "3 class names for 2 outputs (eval)" "3 class names but the head has 2 outputs" "$M" eval --model cls3.safetensors --data cls.tsv
expect_error "3 class names for 2 outputs (predict)" "3 class names but the head has 2 outputs" "$M" predict --model cls3.safetensors --data cls.tsv
"$M" info --model cls >info.out 2>&1
status $? "the unchanged classifier loads"

# the loaded models work without gradients (inference loads)
"$M" eval --model lm --data corpus.txt --max-bytes 3000 --quiet >ev.out 2>&1 && grep -q "2999 bytes scored" ev.out
status $? "eval of the tiny model ($(cat ev.out))"
"$M" eval --model cls --data cls.tsv --quiet >evc.out 2>&1 && grep -q "^accuracy" evc.out
status $? "classifier eval ($(head -c 60 evc.out))"
echo "the cat" | "$M" translate --model s2s --beam 2 --max-len-b 4 >tr.out 2>&1
status $? "translate ($(head -c 60 tr.out))"

# ---- 2. bounded reads: regular files only, sizes ---------------------------------------------
mkdir fifodir && mkfifo fifodir/model.safetensors && mkfifo data.fifo
expect_error "a FIFO named model.safetensors (info)" "is not a regular file (a FIFO)" "$M" info --model fifodir
expect_error "a FIFO named model.safetensors (eval)" "is not a regular file" "$M" eval --model fifodir --data corpus.txt
expect_error "a FIFO named model.safetensors (generate)" "is not a regular file" "$M" generate --model fifodir/model.safetensors -n 3
expect_error "train --data /dev/zero" "--data file '/dev/zero' is not a regular file (a character device)" \
  "$M" train --data /dev/zero --out z1 --steps 1
[ ! -e z1 ]
status $? "the refused run leaves no directory"
expect_error "train --data FIFO" "is not a regular file (a FIFO)" "$M" train --data data.fifo --out z2 --steps 1
expect_error "train --valid /dev/zero" "is not a regular file" "$M" train --data corpus.txt --valid /dev/zero --out z3 --steps 1
expect_error "eval --data /dev/zero" "is not a regular file" "$M" eval --model lm --data /dev/zero
expect_error "eval --data FIFO" "is not a regular file" "$M" eval --model lm --data data.fifo
expect_error "classify --data FIFO" "is not a regular file" "$M" train --task classify --data data.fifo --out z4 --steps 1
expect_error "translate --data /dev/zero" "is not a regular file" "$M" train --task translate --data /dev/zero --out z5 --steps 1
expect_error "translate --input FIFO" "--input 'data.fifo' is not a regular file" "$M" translate --model s2s --input data.fifo
expect_error "plot of a FIFO log" "is not a regular file" sh -c "mkdir -p fl && mkfifo fl/log.jsonl && '$M' plot fl"
# larger than the memory (a sparse file: nothing is written)
if truncate -s 8T sparse.txt 2>/dev/null; then
  # refused by the memory check (the run would need it) or the read cap (the file is larger than
  # the memory available): both name the size
  expect_error "an 8 TiB --data file (eval)" "8.00 TiB" "$M" eval --model lm --data sparse.txt
  expect_error "an 8 TiB --data file (train)" "8.00 TiB" "$M" train --data sparse.txt --out z0 --steps 1
  expect_error "an 8 TiB --data file (classify)" "is 8.00 TiB, more than the" "$M" train --task classify --data sparse.txt --out z0 --steps 1
  cp sparse.txt sparse.safetensors 2>/dev/null || truncate -s 8T sparse.safetensors
  expect_error "an 8 TiB model file" "the file is 8.00 TiB, more than the" "$M" info --model sparse.safetensors
  rm -f sparse.txt sparse.safetensors
else
  ok "no sparse files here: size cap not tested"
fi
# --max-bytes reads only the start of a 50 MB file
python3 -c "
import sys
line = open('corpus.txt').read()
with open('big.txt', 'w') as f:
    while f.tell() < 50 * 1024 * 1024: f.write(line)
"
# the peak is compared with the same evaluation of a 1000-byte file (not an absolute figure: a
# sanitizer build's shadow memory and the BLAS/OpenMP runtimes set the floor); reading the whole
# 50 MB would add at least 50 MB
head -c 1000 big.txt >small.txt
$TIME "$M" eval --model lm --data small.txt --quiet >/dev/null 2>&1
mb0=$(rss_mb)
$TIME "$M" eval --model lm --data big.txt --max-bytes 1000 --quiet >mb.out 2>mb.err
rc=$?
mb=$(rss_mb)
if [ $rc -eq 0 ] && grep -q " 999 bytes scored" mb.out; then ok "eval --max-bytes 1000 of 50 MB scores 999 bytes"; else bad "eval --max-bytes: exit $rc $(cat mb.out mb.err)"; fi
if [ -z "$TIME" ] || [ "$mb" -lt $((mb0 + 10)) ]; then ok "and reads little: peak RSS $mb MB (a 1000-byte file: $mb0 MB)"; else bad "eval --max-bytes 1000 of 50 MB: peak RSS $mb MB, a 1000-byte file $mb0 MB"; fi

# ---- 3. threads, memory ------------------------------------------------------------------
"$M" eval --model lm --data corpus.txt --max-bytes 2000 --threads 4096 --quiet >th.out 2>th.err
rc=$?
if [ $rc -eq 0 ] && grep -q "^mega: note: --threads 4096 is more than 4 x the [0-9]* online CPUs; using [0-9]*$" th.err; then
  ok "--threads 4096 is capped: $(cat th.err)"
else
  bad "--threads 4096: exit $rc, $(cat th.err)"
fi
expect_error "eval --max-memory 1K" "this evaluation would need about" "$M" eval --model lm --data corpus.txt --max-memory 1K
expect_error "eval --max-memory nonsense" "--max-memory expects a size" "$M" eval --model lm --data corpus.txt --max-memory 12Q
# every training run states the memory it expects
if grep -q "^  memory    about .*: weights .*, gradients .*, AdamW moments .*, buffers .* (batch 2 x 32)" lm.out; then
  ok "train prints the expected memory ($(grep '^  memory' lm.out | cut -c1-60)...)"
else
  bad "train does not print the expected memory: $(grep -i memory lm.out)"
fi
grep -q "^  memory    about" cls.out && grep -q "^  memory    about" s2s.out
status $? "classify and translate runs print it too"
if "$M" train --help | grep -q -- "--max-memory"; then
  expect_error "train --max-memory 1M" "this training run would need about" "$M" train --data corpus.txt --out z6 --max-memory 1M --steps 1
  [ ! -e z6 ]
  status $? "the refused run leaves no directory"
else
  ok "train has no --max-memory flag yet: not tested"
fi
# the estimate is near the peak: a default-size model, batch 8 x 256 (about 120 MB of buffers);
# not in a sanitizer build, whose shadow memory and quarantine add to every allocation
if [ -n "$TIME" ] && ! grep -qa __asan_init "$M"; then
  $TIME "$M" train --data corpus.txt --out est --steps 2 --batch 8 --seq-len 256 --threads 1 --quiet --eval-every 0 >est.out 2>&1
  rc=$?
  est=$(sed -n 's/^  memory    about \([0-9.]*\) MiB.*/\1/p' est.out)
  mb=$(rss_mb)
  if [ $rc -eq 0 ] && [ -n "$est" ] && awk -v e="$est" -v r="$mb" 'BEGIN { exit !(r > 0.8 * e && r < 1.3 * e) }'; then
    ok "expected $est MiB, measured peak $mb MB"
  else
    bad "expected '$est' MiB, measured peak $mb MB (exit $rc)"
  fi
fi

# ---- 4. small fixes ----------------------------------------------------------------------
expect_error "--prenorm --postnorm" "--postnorm contradicts --prenorm" "$M" train --data corpus.txt --out z7 --prenorm --postnorm
expect_error "--postnorm --prenorm=true" "contradicts --postnorm" "$M" train --data corpus.txt --out z7 --postnorm --prenorm=true
expect_error "classify --postnorm --prenorm" "contradicts" "$M" train --task classify --data cls.tsv --out z7 --postnorm --prenorm
expect_error "--scale-embedding --no-scale-embedding" "contradicts" "$M" train --data corpus.txt --out z7 --scale-embedding --no-scale-embedding
expect_error "--tie-embeddings with --task classify" "unknown flag --tie-embeddings" "$M" train --task classify --data cls.tsv --out z7 --tie-embeddings
expect_error "--no-scale-embedding with --task classify" "unknown flag" "$M" train --task classify --data cls.tsv --out z7 --no-scale-embedding
expect_error "generate --top-p 0" "--top-p must be in (0, 1]" "$M" generate --model lm --top-p 0 -n 4
"$M" generate --model lm --prompt "The " -n 40 --temperature 0 --quiet >greedy.out 2>&1
"$M" generate --model lm --prompt "The " -n 40 --temperature 0.9 --top-p 1e-300 --seed 5 --quiet >tiny.out 2>&1
cmp -s greedy.out tiny.out
status $? "a tiny --top-p is greedy"
"$M" generate --help | grep -q "(0, 1\]"
status $? "generate --help states the range of --top-p"

# plot: non-finite and huge values are not drawn, names are escaped, classifier runs are accuracy
mkdir 'r&<b>"q'
printf '%s\n' '{"step": 1, "loss": 5, "bpb": 7.2}' '{"step": 2, "loss": 5, "bpb": 1e999}' '{"step": 3, "loss": 5, "bpb": 1e300}' \
  '{"step": 4, "loss": 5, "bpb": -1e308}' '{"step": 5, "loss": 5, "bpb": nan}' '{"step": 6, "loss": 5, "bpb": 6.5}' \
  '{"step": 6, "valid_loss": 4, "valid_bpb": 6.9}' >'r&<b>"q/log.jsonl'
"$M" plot 'r&<b>"q' >plot.out 2>plot.err
status $? "plot of a log with non-finite values"
svg='r&<b>"q/curves.svg'
if ! grep -qiE "nan|inf" "$svg" && python3 -c 'import sys, xml.dom.minidom as X; X.parse(sys.argv[1])' "$svg" 2>/dev/null; then
  ok "the SVG has finite coordinates and is well-formed XML"
else
  bad "the SVG has non-finite coordinates or is not XML"
fi
grep -qF 'r&amp;&lt;b&gt;&quot;q: bits per byte' "$svg"
status $? "the run name is escaped in the title"
grep -q "3 point(s)" plot.err
status $? "the points not drawn are counted ($(grep -v malformed plot.err))"
mkdir flat && printf '%s\n' '{"step": 1, "bpb": 100000000.00001}' '{"step": 2, "bpb": 100000000.00002}' >flat/log.jsonl
timeout 10 "$M" plot flat >/dev/null 2>&1
status $? "plot of values below the axis resolution ends"
"$M" plot cls >/dev/null 2>&1 && grep -q ": accuracy</text>" cls/curves.svg && grep -q "<polyline" cls/curves.svg
status $? "a classifier's curves are accuracy"
"$M" plot s2s >/dev/null 2>&1 && grep -q ": token accuracy" s2s/curves.svg
status $? "a translation run's curves are token accuracy"
# a mapped data file cut short while eval reads it: the SIGBUS becomes the one-line error, exit 2
# (4 MB takes ~20 s to score with this model on one core; the file is emptied after 1 s)
awk 'BEGIN { for (i = 0; i < 52000; i++) print "the quick brown fox jumps over the lazy dog again and again" }' >cut.txt
( "$M" eval --model lm --data cut.txt --quiet --threads 1 >cut.out 2>cut.err; echo $? >cut.rc ) &
sleep 1
: >cut.txt
wait
if [ "$(cat cut.rc)" = 2 ] && [ "$(wc -l <cut.err)" -eq 1 ] && grep -q "^mega: error: an input file was truncated" cut.err; then
  ok "a data file truncated under eval: one error line, exit 2"
else
  bad "a data file truncated under eval: exit $(cat cut.rc), $(head -c 300 cut.err) $(head -c 200 cut.out)"
fi
finish
