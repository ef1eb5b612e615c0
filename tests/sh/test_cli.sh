#!/bin/sh
# End-to-end tests of the mega command-line tool: sh tests/sh/test_cli.sh BUILD_DIR
#   * train a tiny model on a generated corpus (falling loss, checkpoint files, log), then eval,
#     generate, info and plot on it;
#   * exact resume: 40 steps straight == 17 steps, --stop-after, then --resume (loss lines of
#     log.jsonl without the timing fields, model.safetensors and train_state byte-identical);
#   * crash safety: two saves leave two checkpoint generations; a crash before the newest one's
#     manifest, or a damaged newest generation, resumes from the one before and ends
#     byte-identical to the straight run; a model and a state of different steps are refused;
#   * bad input: every case must exit non-zero (below 128: no crash) with exactly one line on
#     stderr, starting with "mega: error:".
# Everything runs in a temporary directory (removed at exit) with --threads 1; deterministic.
# Prints "N passed, M failed" last and exits 1 on any failure. -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir cli
TO=""
command -v timeout >/dev/null 2>&1 && TO="timeout -k 5 300"
mega() { $TO "$MEGA" "$@"; }
START=$(date +%s)

# ---- corpus: ~200 KB of deterministic pseudo-English (Park-Miller LCG, exact in awk doubles) --
awk -v target=200000 'BEGIN {
  nw = split("the a one every some that this my your our old young small great little quiet bright dark " \
    "cat dog bird fox horse king queen child farmer sailor river mountain city garden house road ship book letter " \
    "walks runs sees finds carries builds reads writes remembers follows watches keeps loses opens closes " \
    "slowly quickly often never always gently early late again together alone " \
    "in on under over near beside behind across through into from with without " \
    "and but or so because when while if although", W, " ")
  s = 12345; n = 0; line = ""
  while (n < target) {
    s = (s * 16807) % 2147483647; len = 5 + s % 9; sent = ""
    for (i = 0; i < len; i++) {
      s = (s * 16807) % 2147483647; w = W[1 + s % nw]
      if (i == 0) w = toupper(substr(w, 1, 1)) substr(w, 2)
      sent = sent (i ? " " : "") w
    }
    s = (s * 16807) % 2147483647; sent = sent (s % 5 == 0 ? "?" : ".")
    if (length(line) + length(sent) + 1 > 76) { print line; n += length(line) + 1; line = sent }
    else line = line (line == "" ? "" : " ") sent
  }
  print line
}' > corpus.txt
size=$(wc -c < corpus.txt)
if [ "$size" -gt 190000 ] && [ "$size" -lt 210000 ]; then ok "corpus of $size bytes"; else bad "corpus size $size"; fi
tail -c 20000 corpus.txt > held.txt

MODEL="--layers 2 --embed-dim 32 --z-dim 16 --hidden-dim 64 --ffn-dim 64 --chunk-size 32 --batch 8 --seq-len 64 --threads 1"

# loss values of the training records of a log.jsonl, one per line
losses() { grep '"loss":' "$1" | sed 's/.*"loss": *\([-0-9.eE+]*\).*/\1/'; }
# a log without its timing fields
notime() { sed -e 's/, *"tok_s": *[-0-9.eE+]*//' -e 's/, *"time": *[-0-9.eE+]*//' -e 's/, *"train_seconds": *[-0-9.eE+]*//' -e 's/, *"eval_seconds": *[-0-9.eE+]*//' "$1"; }

# ---- 1. train, eval, generate, info, plot --------------------------------------------------
if mega train --data corpus.txt --out run $MODEL --steps 200 --warmup 20 --lr 5e-3 --eval-every 100 \
  --eval-tokens 4096 --quiet > train.out 2> train.err; then
  ok "mega train 200 steps"
else
  bad "mega train 200 steps: $(cat train.err)"
fi
for f in model.safetensors train_state.safetensors log.jsonl; do
  if [ -s "run/$f" ]; then ok "train wrote $f"; else bad "train did not write run/$f"; fi
done
first=$(losses run/log.jsonl | head -n 1)
last=$(losses run/log.jsonl | tail -n 1)
nrec=$(losses run/log.jsonl | wc -l)
if [ "$nrec" -ge 10 ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 4 && b < 0.6 * a) }'; then
  ok "loss falls: $first -> $last ($nrec records)"
else
  bad "loss does not fall clearly: first '$first', last '$last' ($nrec records)"
fi
if grep -q '"valid_loss":' run/log.jsonl && grep -q '"step": 200' run/log.jsonl; then ok "log has validation records and step 200"; else bad "log.jsonl lacks validation records or step 200"; fi
if [ -s train.err ]; then bad "train wrote to stderr: $(head -n 3 train.err)"; else ok "train: nothing on stderr"; fi

mega eval --model run --data held.txt --quiet > eval.out 2> eval.err
rc=$?
bpb=$(sed -n 's/.*bits per byte \([0-9][0-9]*\.[0-9]*\).*/\1/p' eval.out)
if [ $rc -eq 0 ] && [ -n "$bpb" ] && awk -v x="$bpb" 'BEGIN { exit !(x > 0 && x < 4) }'; then
  ok "eval prints bits per byte ($bpb)"
else
  bad "eval: exit $rc, output '$(cat eval.out)' '$(cat eval.err)'"
fi
# eval of a model file path instead of the directory, limited bytes, other segment length
mega eval --model run/model.safetensors --data held.txt --quiet --max-bytes 5000 --seq-len 50 > eval2.out 2>&1
bpb2=$(sed -n 's/.*bits per byte \([0-9][0-9]*\.[0-9]*\).*/\1/p' eval2.out)
scored=$(sed -n 's/.* \([0-9][0-9]*\) bytes scored.*/\1/p' eval2.out)
if [ -n "$bpb2" ] && [ "$scored" = 4999 ]; then ok "eval --max-bytes 5000 scores 4999 bytes"; else bad "eval --max-bytes: '$(cat eval2.out)'"; fi

mega generate --model run --tokens 64 --temperature 0 --quiet > gen.out 2> gen.err
rc=$?
n=$(wc -c < gen.out)
if [ $rc -eq 0 ] && [ "$n" -eq 65 ]; then ok "generate --quiet prints 64 bytes + newline"; else bad "generate: exit $rc, $n bytes, stderr '$(cat gen.err)'"; fi
mega generate --model run --tokens 64 --temperature 0 --quiet > gen2.out 2>/dev/null
if cmp -s gen.out gen2.out; then ok "greedy generation is deterministic"; else bad "greedy generation differs between runs"; fi
mega generate --model run --prompt "The king " --tokens 100 --temperature 0.8 --seed 7 > gen3.out 2> gen3.err
rc=$?
n=$(wc -c < gen3.out)
if [ $rc -eq 0 ] && [ "$n" -eq 109 ] && [ "$(head -c 9 gen3.out)" = "The king " ]; then
  ok "generate prints the prompt and 100 bytes"
else
  bad "generate with prompt: exit $rc, $n bytes"
fi
mega generate --model run --prompt "The king " --tokens 100 --temperature 0.8 --seed 7 > gen4.out 2>/dev/null
if cmp -s gen3.out gen4.out; then ok "sampling with a seed is deterministic"; else bad "sampling with --seed 7 differs between runs"; fi

mega info --model run > info.out 2> info.err
rc=$?
np_info=$(sed -n 's/^parameters *\([0-9][0-9]*\).*/\1/p' info.out)
np_train=$(sed -n 's/^ *model *\([0-9][0-9]*\) parameters.*/\1/p' train.out)
if [ $rc -eq 0 ] && [ -n "$np_info" ] && [ "$np_info" = "$np_train" ]; then
  ok "info prints the parameter count ($np_info, as train)"
else
  bad "info: exit $rc, parameters '$np_info' vs train '$np_train'"
fi
if grep -q '^step *200' info.out; then ok "info prints the step"; else bad "info lacks 'step 200'"; fi

mega plot run > plot.out 2> plot.err
rc=$?
if [ $rc -eq 0 ] && [ -s run/curves.svg ] && [ "$(head -c 4 run/curves.svg)" = "<svg" ] &&
  [ "$(sed -e '/^[[:space:]]*$/d' run/curves.svg | tail -n 1)" = "</svg>" ]; then
  ok "plot writes an SVG (<svg ... </svg>)"
else
  bad "plot: exit $rc, $(cat plot.err)"
fi
if [ -x /usr/bin/python3 ]; then
  if /usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); sys.exit(0 if r.tag.endswith("svg") and len(r.findall(".//{http://www.w3.org/2000/svg}polyline")) >= 1 else 1)' run/curves.svg 2>/dev/null; then
    ok "the SVG is well-formed XML with a curve"
  else
    bad "run/curves.svg is not well-formed XML with a polyline"
  fi
fi
mega plot run --out custom.svg > /dev/null 2>&1
if [ "$(head -c 4 custom.svg 2>/dev/null)" = "<svg" ]; then ok "plot --out FILE"; else bad "plot --out custom.svg"; fi

# ---- 2. exact resume ------------------------------------------------------------------------
R="$MODEL --dropout 0.1 --steps 40 --warmup 5 --lr 3e-3"
RUNF="--threads 1 --log-every 1 --eval-every 10 --eval-tokens 2048 --quiet"
mega train --data corpus.txt --out A $R $RUNF > A.out 2>&1 || bad "run A: $(tail -n 3 A.out)"
mega train --data corpus.txt --out Bx $R $RUNF --stop-after 17 > B1.out 2>&1 || bad "run B (first part): $(tail -n 3 B1.out)"
if [ -s Bx/model.safetensors ] && grep -q '"step": 17' Bx/log.jsonl && ! grep -q '"step": 18' Bx/log.jsonl; then
  ok "--stop-after 17 stops at step 17 with a checkpoint"
else
  bad "--stop-after 17 did not leave a step-17 checkpoint"
fi
mega train --data corpus.txt --out Bx --resume $RUNF > B2.out 2>&1 || bad "run B (--resume): $(tail -n 3 B2.out)"
if grep -q 'resuming *from step 17' B2.out; then ok "resume reports step 17"; else bad "resume does not report step 17: $(head -n 12 B2.out)"; fi
notime A/log.jsonl > A.log
notime Bx/log.jsonl > B.log
if [ "$(losses A/log.jsonl | wc -l)" -eq 40 ] && cmp -s A.log B.log; then
  ok "resumed log.jsonl == straight run (40 loss records + validation, timing fields ignored)"
else
  bad "resumed log differs from the straight run: $(diff A.log B.log | head -n 4)"
fi
if cmp -s A/model.safetensors Bx/model.safetensors; then ok "resumed model.safetensors is byte-identical"; else bad "resumed model.safetensors differs"; fi
if cmp -s A/train_state.safetensors Bx/train_state.safetensors; then ok "resumed train_state.safetensors is byte-identical"; else bad "resumed train_state differs"; fi
# the number of threads does not change a run (docs/distributed.md, threads): the same run on 2
# threads (attention and the loss run in parallel at this size), and the resume on 2 threads
mega train --data corpus.txt --out A2 $R $RUNF --threads 2 > A2.out 2>&1 || bad "run A on 2 threads: $(tail -n 3 A2.out)"
notime A2/log.jsonl > A2.log
if cmp -s A.log A2.log && cmp -s A/model.safetensors A2/model.safetensors; then
  ok "--threads 2 == --threads 1 bit for bit (log.jsonl without timing fields, model.safetensors)"
else
  bad "--threads 2 differs from --threads 1: $(diff A.log A2.log | head -n 4)"
fi
mega train --data corpus.txt --out B2x $R $RUNF --stop-after 17 > B21.out 2>&1 &&
  mega train --data corpus.txt --out B2x --resume $RUNF --threads 2 > B22.out 2>&1 || bad "stop on 1 thread, resume on 2: $(tail -n 3 B22.out)"
if cmp -s A/model.safetensors B2x/model.safetensors; then ok "resumed on 2 threads: model byte-identical to the straight 1-thread run"; else bad "a run resumed on 2 threads differs"; fi
# without dropout the run must differ (the dropout flag is effective) - sanity of the comparison
mega train --data corpus.txt --out A0 $MODEL --steps 40 --warmup 5 --lr 3e-3 $RUNF > /dev/null 2>&1
if ! cmp -s A/model.safetensors A0/model.safetensors; then ok "dropout 0.1 changes the trained model"; else bad "dropout had no effect"; fi

# ---- 3. crash safety of checkpoints ---------------------------------------------------------
# (every fault point of two saves in a row is in tests/sh/test_checkpoint_faults.sh; here the
# states a crash leaves are made by hand)
mega train --data corpus.txt --out C $R $RUNF --stop-after 10 > C1.out 2>&1 || bad "run C (to 10): $(tail -n 3 C1.out)"
mega train --data corpus.txt --out C --resume $RUNF --stop-after 10 > C2.out 2>&1 || bad "run C (to 20): $(tail -n 3 C2.out)"
g10=C/step-00000010
g20=C/step-00000020
if [ -s $g10.manifest.json ] && [ -s $g20.manifest.json ] && cmp -s C/model.safetensors $g20.model.safetensors &&
  cmp -s C/train_state.safetensors $g20.state.safetensors && grep -q '"step": 20' C/checkpoint.json; then
  ok "two saves leave generations 10 and 20 (manifests), and model.safetensors / train_state are step 20's"
else
  bad "after two saves: $(ls C | tr '\n' ' ')"
fi
cp -r C D
cp -r C E
# a crash inside the step-20 save, before its manifest: generation 20 is incomplete (and the
# stable names still hold step 10)
rm -f C/step-00000020.manifest.json
cp $g10.model.safetensors C/model.safetensors
echo "junk of a killed writer" > C/model.safetensors.tmp.999999999
mega train --data corpus.txt --out C --resume $RUNF > C3.out 2> C3.err
rc=$?
if [ $rc -eq 0 ] && grep -q 'resuming *from step 10' C3.out && [ ! -e C/model.safetensors.tmp.999999999 ]; then
  ok "crash before the step-20 manifest: --resume continues from step 10 (stale temporary removed)"
else
  bad "crash before the step-20 manifest: exit $rc, $(head -n 2 C3.err) $(grep resuming C3.out)"
fi
if cmp -s A/model.safetensors C/model.safetensors; then ok "after the crash, the resumed run ends byte-identical to the straight run"; else bad "crash-resumed model differs from the straight run"; fi
notime C/log.jsonl > C.log
if cmp -s A.log C.log; then ok "after the crash, log.jsonl == straight run"; else bad "crash-resumed log differs: $(diff A.log C.log | head -n 4)"; fi
# a damaged newest generation (one byte of its state changed): skipped with a note, step 10 used
printf 'X' | dd of=E/step-00000020.state.safetensors bs=1 seek=1000 conv=notrunc 2> /dev/null
mega train --data corpus.txt --out E --resume $RUNF > E.out 2> E.err
rc=$?
if [ $rc -eq 0 ] && grep -q 'resuming *from step 10' E.out && grep -q 'skipping the checkpoint at step 20: .*checksum' E.err &&
  cmp -s A/model.safetensors E/model.safetensors; then
  ok "a checksum error in generation 20: resumes from step 10, ends byte-identical"
else
  bad "damaged generation 20: exit $rc $(head -n 2 E.err)"
fi
# the files of mega 0.1 only (no generation), with a state of another step than the model:
# refused in one line, never mixed
rm -f D/step-*
cp $g10.state.safetensors D/train_state.safetensors
cp D/model.safetensors D.model.before
mega train --data corpus.txt --out D --resume $RUNF > D.out 2> D.err
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l < D.err)" -eq 1 ] && grep -q '^mega: error: .*step' D.err &&
  cmp -s D/model.safetensors D.model.before; then
  ok "model 20 with state 10 and no generation: refused ($(cat D.err))"
else
  bad "mismatched state/model: exit $rc, stderr '$(cat D.err)'"
fi

# ---- 4. bad input: exactly one "mega: error:" line, exit in [1, 127] ------------------------
# expect_error (lib.sh): any exit code of 1..123 and the error line is all of stderr
ERR_RC=any ERR_OTHER=none
: > empty.txt
head -c 40 corpus.txt > short.txt
mkdir -p emptydir
echo "this is not a model" > junk.safetensors
sz=$(wc -c < run/model.safetensors)
head -c $((sz / 2)) run/model.safetensors > cut.safetensors
cp run/model.safetensors garbage.safetensors
printf 'XX\377\376garbage{]}\001\002\003' | dd of=garbage.safetensors bs=1 seek=40 conv=notrunc 2> /dev/null
cp run/model.safetensors badlen.safetensors
printf '\377\377\377\377\377\377\377\177' | dd of=badlen.safetensors bs=1 seek=0 conv=notrunc 2> /dev/null
mkdir -p cutdir && cp cut.safetensors cutdir/model.safetensors
head -c 5000 corpus.txt > other.txt
echo "not a directory" > afile
S="--steps 5 $MODEL"

expect_error "train: missing data file" "" mega train --data nope.txt --out o1 $S
expect_error "train: empty data file" "" mega train --data empty.txt --out o1 $S
expect_error "train: data shorter than --seq-len" "" mega train --data short.txt --out o1 $S
expect_error "train: a directory as data" "" mega train --data emptydir --out o1 $S
expect_error "train: unknown flag" "" mega train --data corpus.txt --out o1 --bogus-flag 3
expect_error "unknown command" "" mega frobnicate --data corpus.txt
expect_error "train: missing --out" "" mega train --data corpus.txt $S
expect_error "train: missing --data" "" mega train --out o1 $S
expect_error "train: --layers 0" "" mega train --data corpus.txt --out o1 $S --layers 0
expect_error "train: --lr -1" "" mega train --data corpus.txt --out o1 $S --lr -1
expect_error "train: --chunk-size 0" "" mega train --data corpus.txt --out o1 $S --chunk-size 0
expect_error "train: --chunk-size -5" "" mega train --data corpus.txt --out o1 $S --chunk-size -5
expect_error "train: --n-dim 100" "" mega train --data corpus.txt --out o1 $S --n-dim 100
expect_error "train: --dropout 1.5" "" mega train --data corpus.txt --out o1 $S --dropout 1.5
expect_error "train: non-numeric --steps" "" mega train --data corpus.txt --out o1 --steps abc
expect_error "train: --steps 2.5" "" mega train --data corpus.txt --out o1 --steps 2.5
expect_error "train: --batch without a value" "" mega train --data corpus.txt --out o1 --batch
expect_error "train: bad --attention-activation" "" mega train --data corpus.txt --out o1 $S --attention-activation tanh
expect_error "train: odd --z-dim with rotary" "" mega train --data corpus.txt --out o1 $S --z-dim 15 --rel-pos-bias rotary
expect_error "train: --min-lr above --lr" "" mega train --data corpus.txt --out o1 $S --lr 1e-3 --min-lr 1e-2
expect_error "train: --out is a file" "" mega train --data corpus.txt --out afile $S
expect_error "train: --resume with no checkpoint (missing dir)" "" mega train --data corpus.txt --out nodir --resume
expect_error "train: --resume with no checkpoint (empty dir)" "" mega train --data corpus.txt --out emptydir --resume
expect_error "train: --resume with a conflicting --embed-dim" "" mega train --data corpus.txt --out A --resume --embed-dim 48 --steps 80
expect_error "train: --resume with a different data file" "" mega train --data other.txt --out A --resume --steps 80
if ls o1 > /dev/null 2>&1 && [ -n "$(ls o1)" ]; then bad "failed train runs left files in o1: $(ls o1)"; else ok "failed train runs leave no checkpoint files"; fi
for cmd in eval generate info; do
  extra=""
  [ $cmd = eval ] && extra="--data held.txt"
  expect_error "$cmd: missing model" "" mega $cmd --model nomodel $extra
  expect_error "$cmd: directory without a model" "" mega $cmd --model emptydir $extra
  expect_error "$cmd: truncated model.safetensors" "" mega $cmd --model cut.safetensors $extra
  expect_error "$cmd: truncated model in a run directory" "" mega $cmd --model cutdir $extra
  expect_error "$cmd: garbage in the header" "" mega $cmd --model garbage.safetensors $extra
  expect_error "$cmd: absurd header length" "" mega $cmd --model badlen.safetensors $extra
  expect_error "$cmd: not a safetensors file" "" mega $cmd --model junk.safetensors $extra
  expect_error "$cmd: training state instead of a model" "" mega $cmd --model run/train_state.safetensors $extra
  expect_error "$cmd: unknown flag" "" mega $cmd --model run --frobnicate $extra
done
expect_error "eval --chunk-size 64 on a simple-bias model" "" mega eval --model run --data held.txt --chunk-size 64
expect_error "eval: missing --data file" "" mega eval --model run --data nope.txt
expect_error "eval: empty --data file" "" mega eval --model run --data empty.txt
expect_error "eval: missing --data flag" "" mega eval --model run
expect_error "generate: empty prompt" "" mega generate --model run --prompt ""
expect_error "generate: negative --tokens" "" mega generate --model run --tokens -3
expect_error "generate: --top-p 2" "" mega generate --model run --top-p 2
expect_error "plot: directory without log.jsonl" "" mega plot emptydir
expect_error "plot: missing directory" "" mega plot nodir

# ---- --time-budget: the schedule follows the training time -----------------------------------
# A budget of 3 s, stopped by --time-limit 1 and resumed: the run ends once it has trained 3 s in
# all (validation and saves not counted), with a checkpoint and a final validation; the log has the
# timing fields and its learning rate reaches --min-lr. No speed is asserted: only that the run
# ends at its budget (train_seconds >= 3, far below --steps, which only bounds it).
TBF="$MODEL --steps 100000000 --warmup 5 --lr 2e-3 --min-lr 1e-4 --eval-every 0 --eval-tokens 2048 --quiet"
# the values of KEY in the training records of a log, one per line
field() { sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" "$2"; }
mega train --data corpus.txt --out tb $TBF --time-budget 3 --time-limit 1 > tb1.out 2>&1
status $? "--time-budget 3 --time-limit 1: exit 0"
grep -q "stopped after .* (--time-limit)" tb1.out && grep -q '"time-budget":3' tb/step-*.manifest.json &&
  grep -q '"train-seconds":' tb/step-*.manifest.json
status $? "--time-limit stops the budget run with a checkpoint storing time-budget and train-seconds"
s1=$(sed -n 's/.*"step": *\([0-9]*\).*/\1/p' tb/checkpoint.json)
mega train --data corpus.txt --out tb --resume --threads 1 --eval-tokens 2048 --quiet > tb2.out 2>&1
status $? "--resume of the budget run: exit 0"
grep -q "the --time-budget of 3 s is spent at step" tb2.out && grep -q "the run has trained" tb2.out
status $? "the resumed run stops at its budget: $(grep -E 'spent|^done' tb2.out | tr '\n' ' ')"
s2=$(sed -n 's/.*"step": *\([0-9]*\).*/\1/p' tb/checkpoint.json)
[ -s tb/model.safetensors ] && [ -n "$s2" ] && [ "$s2" -gt "$s1" ] && [ "$s2" -lt 100000000 ]
status $? "a checkpoint at the end of the budget (steps $s1 then $s2, below --steps)"
last_ts=$(field train_seconds tb/log.jsonl | tail -n 1)
awk -v t="$last_ts" 'BEGIN { exit !(t >= 3 && t < 60) }'
status $? "the last log record has trained the budget: train_seconds $last_ts"
[ "$(field eval_seconds tb/log.jsonl | wc -l)" -eq "$(field train_seconds tb/log.jsonl | wc -l)" ] &&
  [ "$(field loss tb/log.jsonl | wc -l)" -eq "$(field train_seconds tb/log.jsonl | wc -l)" ] &&
  tail -n 1 tb/log.jsonl | grep -q "\"step\": $s2, \"valid_loss\""
status $? "every training record has train_seconds and eval_seconds; a final validation at step $s2"
# the resumed part continues the clock: its first record is past the first part's seconds
ts_resume=$(awk -v s="$s1" '/"train_seconds"/ { match($0, /"step": *[0-9]+/); st = substr($0, RSTART + 7) + 0;
  if (st > s) { sub(/.*"train_seconds": */, ""); print $0 + 0; exit } }' tb/log.jsonl)
awk -v t="$ts_resume" 'BEGIN { exit !(t >= 1) }'
status $? "the resumed run's clock starts from the stored seconds (first resumed record: $ts_resume s)"
lrs=$(field lr tb/log.jsonl)
echo "$lrs" | awk 'NR == 1 { first = $1 } { if ($1 > max) max = $1; last = $1 }
  END { exit !(last >= 0.99e-4 && last <= 1.01e-4 && max >= 1e-3) }'
status $? "the learning rate warms up to --lr, then decays to --min-lr at the end: $(echo "$lrs" | head -n 3 | tr '\n' ' ')... $(echo "$lrs" | tail -n 1)"
mega train --data corpus.txt --out tb --resume --threads 1 > tb3.out 2>&1 && grep -q "it is complete" tb3.out
status $? "--resume of a run whose budget is spent: nothing to do"
# without --steps the budget alone decides the length (the default 1000 steps do not bound it)
mega train --data corpus.txt --out tbn $MODEL --time-budget 1 --warmup 5 --eval-every 0 --eval-tokens 2048 > tbn.out 2>&1
status $? "--time-budget without --steps: exit 0"
grep -q "the budget alone ends the run (no --steps)" tbn.out && grep -q "the --time-budget of 1 s is spent at step" tbn.out &&
  ! grep -q "^step .*/1000 " tbn.out && grep -q '"steps":1000000000' tbn/step-*.manifest.json
status $? "--time-budget without --steps: no step bound, the budget ends the run: $(grep -E 'budget|spent' tbn.out | tr '\n' ' ' | cut -c1-240)"
expect_error "train: --time-budget -1" "" mega train --data corpus.txt --out o1 $S --time-budget -1
expect_error "train: --time-budget nan" "" mega train --data corpus.txt --out o1 $S --time-budget nan
expect_error "train: --time-budget 3s" "" mega train --data corpus.txt --out o1 $S --time-budget 3s
expect_error "train: --resume with another --time-budget" "" mega train --data corpus.txt --out tb --resume --time-budget 5
expect_error "train: --resume --reschedule of a budget run" "" mega train --data corpus.txt --out tb --resume --steps 200000000 --reschedule

# ---- a run written before the block-configuration refactor (tests/fixtures/runs/lm_v010) ------
# The numbers come from that build (OpenBLAS, AVX-512); another GEMM or CPU rounds differently,
# so they are compared to 1e-4 relative (on the machine that wrote it they agree to the last digit).
V0="$ROOT/tests/fixtures/runs/lm_v010"
mkdir -p v0/run && cp "$V0/data.txt" v0/ && cp "$V0"/*.safetensors "$V0"/*.json* v0/run/
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * (b < 0 ? -b : b)) }'; }
loss_of() { sed -n 's/^loss \([0-9.]*\) nats.*/\1/p' "$1"; }
(cd v0 && mega eval --model run --data data.txt --threads 1 --quiet > eval.out 2>&1)
close "$(loss_of v0/eval.out)" 5.817061 && ok "0.1.0 run: eval gives that build's loss" || bad "0.1.0 run: eval: $(cat v0/eval.out)"
(cd v0 && mega train --data data.txt --out run --resume --threads 1 > resume.out 2>&1) || bad "0.1.0 run: --resume: $(tail -n 2 v0/resume.out)"
(cd v0 && mega eval --model run --data data.txt --threads 1 --quiet > eval2.out 2>&1)
close "$(loss_of v0/eval2.out)" 5.810075 && ok "0.1.0 run: resumed to step 6, the loss of that build's straight run" ||
  bad "0.1.0 run: after --resume: $(cat v0/eval2.out)"

# ---- the short OpenMP spin (tools/mega.c short_spin; docs/performance.md "A busy neighbour") ----
if mega version | grep -q ' openmp'; then
  if mega version | grep -q '^compiler gcc'; then
    mega version | grep -q '^openmp wait GOMP_SPINCOUNT=1000 ' && ok "version: the tool runs libgomp with GOMP_SPINCOUNT=1000" ||
      bad "version: $(mega version | grep '^openmp')"
  fi
  GOMP_SPINCOUNT=77 mega version | grep -q '^openmp wait GOMP_SPINCOUNT=77 ' && ok "version: the user's GOMP_SPINCOUNT is kept" ||
    bad "version with GOMP_SPINCOUNT=77: $(GOMP_SPINCOUNT=77 mega version | grep '^openmp')"
  OMP_WAIT_POLICY=passive mega version | grep -q '^openmp wait GOMP_SPINCOUNT=(default) OMP_WAIT_POLICY=passive' &&
    ok "version: the user's OMP_WAIT_POLICY is kept (no spin count added)" || bad "version with OMP_WAIT_POLICY: $(OMP_WAIT_POLICY=passive mega version | grep '^openmp')"
fi

echo "NOTE test_cli.sh: $(($(date +%s) - START)) s"
finish
