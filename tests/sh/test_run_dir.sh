#!/bin/sh
# The run directory of mega train: sh tests/sh/test_run_dir.sh BUILD_DIR
#   * --out of an existing run without --resume is refused in one line naming --resume and
#     --force, and changes nothing; --force replaces the run (no file of the old one is left and
#     the new run is byte-identical to the same run in a new directory);
#   * one writer: while a training runs, a second mega train on its directory (--resume, or a new
#     run) exits 2 with "... is in use by another mega train (pid N)", N the first one's pid;
#   * SIGTERM to a running training: exit 143 after "stopped by SIGTERM at step S", a complete
#     checkpoint at step S, and --resume to S + 20 ends byte-identical to a straight run of S + 20
#     steps (a constant schedule: its rates do not depend on --steps); two SIGTERMs in a row end
#     the process at once or after the save, and the run still resumes byte-identically;
#   * the schedule: --resume with another --steps is refused (cosine), --reschedule accepts it
#     and the learning rate goes on from the rate reached (the first resumed step has the old
#     schedule's rate), falling (cosine) to --min-lr at the new length; --warmup >= --steps warns;
#     --reschedule without --resume and --force with --resume are refused;
#   * the optimizer and schedule tables: Apollo (both rebounds) under the fairseq schedules
#     (linear_decay, inverse_sqrt) resumes byte-identically to a straight run; the run names its
#     optimizer (the description and the memory estimate); --resume with another --optimizer is
#     refused in one line, and a run saved before the table (no "optimizer") resumes as AdamW.
# Prints "N passed, M failed" last and exits 1 on any failure. -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
need_tool
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_rundir.XXXXXX") || { bad "mktemp -d"; finish; }
PIDS=""
trap 'for p in $PIDS; do kill -9 $p 2>/dev/null; done; rm -rf "$T"' EXIT
trap 'exit 2' INT TERM HUP
cd "$T" || { bad "cd $T"; finish; }
START=$(date +%s)
TO=""
command -v timeout >/dev/null 2>&1 && TO="timeout -k 5 120"
mega() { $TO "$MEGA" "$@"; }
cp "$ROOT/tests/fixtures/runs/lm_v010/data.txt" data.txt || { bad "no data"; finish; }

F="--data data.txt --threads 1 --quiet --log-every 1 --eval-every 0"
M="$F --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 16 --n-dim 2 --ffn-dim 16 --chunk-size 16 --seq-len 32 --batch 2"
notime() { sed -e 's/, *"tok_s": *[-0-9.eE+]*//' -e 's/, *"time": *[-0-9.eE+]*//' -e 's/, *"train_seconds": *[-0-9.eE+]*//' -e 's/, *"eval_seconds": *[-0-9.eE+]*//' "$1"; }
# one_error FILE: exactly one line on stderr, a "mega: error:" one
one_error() { [ "$(wc -l < "$1")" -eq 1 ] && grep -q '^mega: error: ' "$1"; }
# same_run D1 D2: the same final checkpoint and log
same_run() {
  cmp -s "$1/model.safetensors" "$2/model.safetensors" && cmp -s "$1/train_state.safetensors" "$2/train_state.safetensors" &&
    [ "$(notime "$1/log.jsonl")" = "$(notime "$2/log.jsonl")" ]
}
# wait_step DIR N: until DIR/log.jsonl has a step >= N (about 20 s at most)
# wait_ckpt DIR: until DIR holds a committed checkpoint (checkpoint.json), at most ~60 s
wait_ckpt() {
  k=0
  while [ $k -lt 1200 ]; do
    [ -s "$1/checkpoint.json" ] && return 0
    sleep 0.05
    k=$((k + 1))
  done
  return 1
}

wait_step() {
  k=0
  while [ $k -lt 400 ]; do
    s=$(tail -n 1 "$1/log.jsonl" 2>/dev/null | sed -n 's/^{"step": \([0-9]*\),.*/\1/p')
    [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
    sleep 0.05
    k=$((k + 1))
  done
  return 1
}

# ---- 1. an existing run: refused without --resume, replaced with --force ---------------------
mega train $M --out R --steps 12 --save-every 4 > R.out 2>&1 || bad "first run: $(tail -n 2 R.out)"
before=$(cd R && md5sum * | grep -v ' train.lock$')
mega train $M --out R --steps 6 > R2.out 2> R2.err
rc=$?
if [ $rc -eq 2 ] && one_error R2.err && grep -q -- '--resume' R2.err && grep -q -- '--force' R2.err &&
  [ "$(cd R && md5sum * | grep -v ' train.lock$')" = "$before" ]; then
  ok "--out of an existing run without --resume: refused, nothing changed ($(cat R2.err))"
else
  bad "--out of an existing run: exit $rc, $(cat R2.err)"
fi
mega train $M --out R --steps 6 --seed 5 --force > R3.out 2> R3.err
rc=$?
mega train $M --out R5 --steps 6 --seed 5 > R5.out 2>&1
if [ $rc -eq 0 ] && same_run R R5 && [ "$(ls R | grep step- | tr '\n' ' ')" = "$(ls R5 | grep step- | tr '\n' ' ')" ]; then
  ok "--force replaces the run: the same files and bytes as the run in a new directory"
else
  bad "--force: exit $rc, $(head -n 2 R3.err) files: $(ls R | tr '\n' ' ')"
fi
mega train $M --out R --resume --force > R6.out 2> R6.err
rc=$?
if [ $rc -eq 2 ] && one_error R6.err; then ok "--force with --resume: refused ($(cat R6.err))"; else bad "--force --resume: exit $rc, $(cat R6.err)"; fi
mega train $M --out R7 --steps 6 --reschedule > R7.out 2> R7.err
rc=$?
if [ $rc -eq 2 ] && one_error R7.err && [ ! -e R7 ]; then ok "--reschedule without --resume: refused ($(cat R7.err))"; else bad "--reschedule alone: exit $rc, $(cat R7.err)"; fi

# ---- 2. one writer, SIGTERM ------------------------------------------------------------------
# a long constant-schedule run (checkpoints every 50 steps)
LONG="$M --schedule constant --warmup 2 --save-every 50"
"$MEGA" train $LONG --out S --steps 1000000 > S.out 2> S.err &
pid=$!
PIDS="$pid"
if wait_step S 30 && [ "$(cat S/train.lock 2>/dev/null)" = "$pid" ]; then
  ok "a long run is training (pid $pid in S/train.lock)"
else
  bad "the long run did not start: $(tail -n 2 S.err)"
fi
mega train $F --out S --resume > S2.out 2> S2.err
rc=$?
if [ $rc -eq 2 ] && one_error S2.err && grep -q "in use by another mega train (pid $pid)" S2.err; then
  ok "a second writer (--resume) is refused: $(cat S2.err)"
else
  bad "second writer (--resume): exit $rc, $(cat S2.err)"
fi
mega train $LONG --out S --steps 10 > S3.out 2> S3.err
rc=$?
if [ $rc -eq 2 ] && one_error S3.err && grep -q "in use by another mega train (pid $pid)" S3.err; then
  ok "a second writer (a new run) is refused: $(cat S3.err)"
else
  bad "second writer (new run): exit $rc, $(cat S3.err)"
fi
kill -TERM $pid
wait $pid
rc=$?
PIDS=""
step=$(sed -n 's/^stopped by SIGTERM at step \([0-9]*\) with a checkpoint.*/\1/p' S.out)
man=S/step-$(printf '%08d' "${step:-0}").manifest.json
if [ $rc -eq 143 ] && [ -n "$step" ] && [ -s "$man" ] && grep -q "\"step\": $step," S/checkpoint.json &&
  cmp -s S/model.safetensors "S/step-$(printf '%08d' "$step").model.safetensors" && ! ls S | grep -q '\.tmp\.'; then
  ok "SIGTERM: exit 143, a complete checkpoint at step $step"
else
  bad "SIGTERM: exit $rc, step '$step', $(tail -n 2 S.out) $(ls S | tr '\n' ' ')"
fi
target=$((${step:-0} + 20))
mega train $F --out S --resume --steps $target --save-every 50 > S4.out 2> S4.err
rc=$?
mega train $LONG --out Sref --steps $target > Sref.out 2>&1
if [ $rc -eq 0 ] && grep -q "resuming *from step $step" S4.out && same_run S Sref; then
  ok "--resume after SIGTERM ends byte-identical to a straight run of $target steps"
else
  bad "--resume after SIGTERM: exit $rc, $(head -n 2 S4.err)"
fi
# two signals in a row
"$MEGA" train $LONG --out D --steps 1000000 > D.out 2> D.err &
pid=$!
PIDS="$pid"
wait_step D 30 || bad "the second long run did not start"
wait_ckpt D || bad "the second long run saved no checkpoint"   # slow builds (sanitizers) take longer
kill -TERM $pid
kill -TERM $pid
wait $pid
rc=$?
PIDS=""
dstep=$("$MEGA" info --model D 2>/dev/null | sed -n 's/^step *\([0-9]*\)$/\1/p') # the newest complete checkpoint's
dtarget=$((${dstep:-0} + 20))
mega train $F --out D --resume --steps $dtarget --save-every 50 > D2.out 2> D2.err
rc2=$?
mega train $LONG --out Dref --steps $dtarget > Dref.out 2>&1
if [ $rc -eq 143 ] && [ -n "$dstep" ] && [ $rc2 -eq 0 ] && same_run D Dref; then
  ok "two SIGTERMs: exit 143 ($(grep -c 'stopped by' D.out) stop message), resumes from step $dstep byte-identically"
else
  bad "two SIGTERMs: exit $rc, checkpoint step '$dstep', resume exit $rc2 $(head -n 2 D2.err)"
fi

# ---- 3. the schedule ---------------------------------------------------------------------------
C="$M --schedule cosine --warmup 4 --lr 4e-3 --min-lr 1e-4 --save-every 0"
mega train $C --out K --steps 20 --stop-after 10 > K1.out 2>&1 || bad "cosine run to 10: $(tail -n 2 K1.out)"
cp -r K K0
mega train $F --out K --resume --steps 40 > K2.out 2> K2.err
rc=$?
if [ $rc -eq 2 ] && one_error K2.err && grep -q -- '--reschedule' K2.err && cmp -s K/model.safetensors K0/model.safetensors; then
  ok "--resume with another --steps: refused ($(cut -c1-110 K2.err)...)"
else
  bad "--steps changed on resume: exit $rc, $(cat K2.err)"
fi
mega train $C --out K20 --steps 20 > K20.out 2>&1
mega train $F --out K --resume --steps 40 --reschedule > K3.out 2> K3.err
rc=$?
lr_at() { sed -n "s/^{\"step\": $2, \"loss\": [^,]*, \"bpb\": [^,]*, \"lr\": \([^,]*\),.*/\1/p" "$1"; }
l11=$(lr_at K/log.jsonl 11)
l11ref=$(lr_at K20/log.jsonl 11)
l40=$(lr_at K/log.jsonl 40)
mono=$(for s in $(seq 11 40); do lr_at K/log.jsonl "$s"; done | awk 'NR > 1 && $1 > p + 1e-12 { bad = 1 } { p = $1 } END { print bad ? "no" : "yes" }')
# the last step's rate: cosine from the rate reached at step 10 to --min-lr over steps 10..40
want40=$(awk -v l="$l11" 'BEGIN { printf "%.6g", 1e-4 + 0.5 * (l - 1e-4) * (1 + cos(3.141592653589793 * 29 / 30)) }')
if [ $rc -eq 0 ] && grep -q 'reschedule *from step 10' K3.out && [ -n "$l11" ] && [ "$l11" = "$l11ref" ] &&
  [ "$l40" = "$want40" ] && [ "$mono" = yes ]; then
  ok "--reschedule: step 11 keeps the old schedule's rate ($l11), then a cosine to --min-lr by step 40 ($l40 at the last)"
else
  bad "--reschedule: exit $rc, lr step 11 '$l11' (old schedule '$l11ref'), step 40 '$l40', monotone $mono; $(cat K3.err)"
fi
mega train $M --out W --steps 4 --warmup 10 > W.out 2> W.err
rc=$?
if [ $rc -eq 0 ] && grep -q '^mega: warning: --warmup 10 >= --steps 4' W.err; then ok "--warmup >= --steps warns: $(cat W.err)"; else bad "no warning for --warmup >= --steps: exit $rc, $(cat W.err)"; fi

# ---- 4. the optimizer and schedule tables ----------------------------------------------------
for v in "constant linear_decay --warmup-init-lr 1e-5 --end-learning-rate 2e-4" "belief inverse_sqrt --weight-decay-type stable"; do
  set -- $v
  reb=$1 sch=$2
  shift 2
  O="$M --optimizer apollo --apollo-rebound $reb --lr-scheduler $sch --warmup 4 --lr 3e-3 --save-every 0 $*"
  mega train $O --out "AP$reb" --steps 16 --stop-after 7 > "AP$reb.1.out" 2>&1 || bad "apollo $reb to 7: $(tail -n 2 "AP$reb.1.out")"
  mega train $F --out "AP$reb" --resume --steps 16 > "AP$reb.2.out" 2>&1 || bad "apollo $reb resume: $(tail -n 2 "AP$reb.2.out")"
  mega train $O --out "AQ$reb" --steps 16 > "AQ$reb.out" 2>&1 || bad "apollo $reb straight: $(tail -n 2 "AQ$reb.out")"
  if same_run "AP$reb" "AQ$reb" && grep -q 'optimizer apollo' "AQ$reb.out" && grep -q '"lr"' "AQ$reb/log.jsonl" &&
    ! grep -q 'nan' "AQ$reb/log.jsonl"; then
    ok "apollo ($reb, $sch): stopped at 7 and resumed to 16, byte-identical to a straight run of 16"
  else
    bad "apollo ($reb, $sch): the resumed run differs from the straight one"
  fi
done
if grep -q '^  optimizer apollo' APconstant.1.out && grep -q 'apollo state' APconstant.1.out; then
  ok "an apollo run names its optimizer: $(grep '^  optimizer' APconstant.1.out | cut -c1-60)..."
else
  bad "apollo run description: $(head -n 5 APconstant.1.out)"
fi
help=$(mega train --help 2>&1)
if echo "$help" | grep -q -- '--lr-scheduler {cosine|linear|constant|linear_decay|inverse_sqrt|cosine_fairseq}' &&
  echo "$help" | grep -q -- '--optimizer {adamw|apollo}' && echo "$help" | grep -q -- '--apollo-rebound {constant|belief}'; then
  ok "mega train --help lists the tables' schedules, optimizers and the optimizers' flags"
else
  bad "mega train --help: $(echo "$help" | grep -e '--lr-scheduler' -e '--optimizer')"
fi
cp -r APconstant AP2
mega train $F --out AP2 --resume --steps 20 --optimizer adamw > AP2.out 2> AP2.err
rc=$?
if [ $rc -eq 2 ] && one_error AP2.err && grep -q -- '--optimizer apollo' AP2.err && cmp -s AP2/model.safetensors APconstant/model.safetensors; then
  ok "--resume with another --optimizer: refused ($(cat AP2.err))"
else
  bad "--resume --optimizer adamw of an apollo run: exit $rc, $(cat AP2.err)"
fi
mkdir -p v0 && cp "$ROOT/tests/fixtures/runs/lm_v010"/*.safetensors "$ROOT/tests/fixtures/runs/lm_v010"/*.json* v0/ &&
  cp "$ROOT/tests/fixtures/runs/lm_v010/data.txt" v0data.txt
mega train --data v0data.txt --threads 1 --quiet --out v0 --resume --optimizer apollo > V0.out 2> V0.err
rc=$?
if [ $rc -eq 2 ] && one_error V0.err && grep -q -- '--optimizer adamw' V0.err; then
  ok "a run saved before the optimizer table is an AdamW run: --optimizer apollo refused ($(cat V0.err))"
else
  bad "0.1.0 run with --optimizer apollo: exit $rc, $(cat V0.err)"
fi

# a symbolic link in the run directory is not followed (R23, R24 in docs/bad-inputs.md): train.lock
# or log.jsonl pointing elsewhere makes the run stop in one line, the file pointed at untouched
printf 'keep\n' > victim
for f in train.lock log.jsonl; do
  rm -rf L && mkdir L && ln -s "$T/victim" "L/$f"
  mega train $M --out L --steps 2 --warmup 1 > L.out 2> L.err
  rc=$?
  if [ $rc -eq 2 ] && one_error L.err && grep -q "L/$f' is a symbolic link" L.err && [ "$(cat victim)" = keep ] && [ -L "L/$f" ]; then
    ok "a symbolic link as $f: refused, the target untouched ($(cat L.err))"
  else bad "a symbolic link as $f: exit $rc, victim '$(cat victim)', $(cat L.err)"; printf 'keep\n' > victim; fi
done
# ... and on --resume, where log.jsonl is cut back and appended to
rm -rf L && mega train $M --out L --steps 4 --warmup 1 --stop-after 2 > L.out 2>&1 && rm L/log.jsonl && ln -s "$T/victim" L/log.jsonl &&
  mega train --data data.txt --out L --resume --quiet > L.out 2> L.err
rc=$?
if [ $rc -eq 2 ] && one_error L.err && grep -q "L/log.jsonl' is a symbolic link" L.err && [ "$(cat victim)" = keep ] && [ -L L/log.jsonl ]; then
  ok "--resume with a symbolic link as log.jsonl: refused, the target untouched"
else bad "--resume with a symbolic link as log.jsonl: exit $rc, victim '$(cat victim)', $(cat L.err)"; fi

# ... nor a hard link where a save writes its temporary file (NAME.tmp.PID: the pid is known
# to whoever starts the run; exec keeps the shell's): the link is replaced, not written through
printf 'keep\n' > victim
rm -rf L && mkdir L
for n in step-00000002.model.safetensors step-00000002.state.safetensors step-00000002.manifest.json model.safetensors \
  train_state.safetensors checkpoint.json; do echo "L/$n.tmp"; done > tmpnames
# shellcheck disable=SC2016
sh -c 'while read -r n; do ln victim "$n.$$"; done < tmpnames; exec "$@"' sh "$MEGA" train $M --out L --steps 2 --warmup 1 > L.out 2> L.err
rc=$?
if [ $rc -eq 0 ] && [ "$(cat victim)" = keep ] && [ -s L/checkpoint.json ]; then ok "hard links at the temporary files' names: the run saves, the linked file untouched"
else bad "hard links at the temporary files' names: exit $rc, victim '$(head -c 100 victim)', $(head -n 2 L.err)"; fi

echo "NOTE test_run_dir.sh: $(($(date +%s) - START)) s"
finish
