#!/bin/sh
# Data-parallel training over MPI (docs/distributed.md): sh tests/sh/test_mpi.sh BUILD_DIR
#   * the same global batch gives the same training whatever its layout: 2 ranks (mpirun -np 2)
#     == 1 process with --grad-accum 2 == 1 process, for lm, classify and translate, over 24
#     steps with dropout 0: every logged loss and gradient norm within a relative 1e-4 (fp32
#     round-off of summing the shards' gradients in another order); the comparison itself is
#     checked to fail on a run with another seed;
#   * batchnorm (lm, classify): 2 ranks share their batch statistics and equal 1 process;
#     --grad-accum 2 (statistics per micro-batch) differs and says so;
#   * with dropout, 2 ranks and --grad-accum 2 (the same 2 shards, the same dropout keys) agree;
#   * only rank 0 writes: one progress line per step on stdout, one log line per step;
#   * kill -9 of one rank mid-run: mpirun exits non-zero within 30 s; the last checkpoint is
#     complete, resumes on 1 process and continues on the trajectory of an uninterrupted run;
#   * a rank that hangs (SIGSTOP): the others stop with "no answer from the other ranks" within
#     --dist-timeout plus a margin, exit non-zero;
#   * SIGTERM to one rank: all stop after the same step, rank 0 saves it, exit 143, it resumes;
#   * a 1-process run resumed on 2 ranks continues on the same trajectory;
#   * --time-budget on 2 ranks (rank 0's clock in the step's allreduce): the ranks stay identical
#     through checkpoints every 5 steps and end at the budget;
#   * a --batch that the ranks x --grad-accum do not divide is refused in one line (F40 with one
#     process, in every build; F41 with 2 ranks);
#   * ranks given different --data (an MPMD mpirun) are refused in one line (F43).
# The MPI checks are skipped (a NOTE) when mpirun is missing or the build has no MPI (NO_MPI=1,
# SAN=1).
# Prints "N passed, M failed" last and exits 1 on any failure. -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
need_tool
# F40 (docs/bad-inputs.md), in every build: one process, --grad-accum not dividing --batch
"$MEGA" train --data "$ROOT/tests/fixtures/runs/lm_v010/data.txt" --out /nonexistent/o --batch 3 --grad-accum 2 >/dev/null 2>"${TMPDIR:-/tmp}/mega_ga.$$"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l < "${TMPDIR:-/tmp}/mega_ga.$$")" -eq 1 ] &&
  grep -q '^mega: error: --batch 3 cannot be split into 2 equal shards (1 rank x --grad-accum 2): give a multiple of 2$' "${TMPDIR:-/tmp}/mega_ga.$$"; then
  ok "F40 --batch 3 --grad-accum 2 is refused in one line"
else bad "F40 --batch 3 --grad-accum 2 (exit $rc: $(head -n 2 "${TMPDIR:-/tmp}/mega_ga.$$"))"; fi
rm -f "${TMPDIR:-/tmp}/mega_ga.$$"
if ! command -v mpirun >/dev/null 2>&1; then
  echo "NOTE test_mpi.sh: no mpirun (apt-get install openmpi-bin): the MPI tests are skipped"
  finish
fi
if "$MEGA" version | grep -q '^distributed no MPI'; then
  echo "NOTE test_mpi.sh: $MEGA is a single-rank build (no MPI): the MPI tests are skipped"
  finish
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_mpi.XXXXXX") || { bad "mktemp -d"; finish; }
PIDS=""
trap 'for p in $PIDS; do kill -9 $p 2>/dev/null; done; rm -rf "$T"' EXIT
trap 'exit 2' INT TERM HUP
cd "$T" || { bad "cd $T"; finish; }
TO=""
command -v timeout >/dev/null 2>&1 && TO="timeout -k 5 120"
# Open MPI refuses root without these; --oversubscribe: more ranks than cores is fine here
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# containers often forbid the cross-process reads (CMA, ptrace rules) of Open MPI's shared-memory
# single copy: plain copies through the shared segment work everywhere
export OMPI_MCA_btl_vader_single_copy_mechanism=none
MPIRUN="mpirun -np 2"
mega() { $TO "$MEGA" "$@"; }
mpi2() { $TO $MPIRUN "$MEGA" "$@"; }

cp "$ROOT/tests/fixtures/runs/lm_v010/data.txt" data.txt || { bad "no data"; finish; }
"$MEGA" listops --out lo --train 240 --valid 30 --test 10 --min-len 10 --max-len 60 --max-depth 3 --seed 3 >/dev/null 2>&1
status $? "mega listops writes the classify data"
awk 'BEGIN { srand(7); a = "abcdefgh"; b = "bcdefgh";
  for (i = 0; i < 600; i++) { L = 2 + int(rand() * 5); x = ""; y = "";
    for (k = 0; k < L; k++) { j = 1 + int(rand() * 8); x = x substr(a, j, 1); if (j < 8) y = y substr(b, j, 1) }
    if (y == "") y = "z";
    print x "\t" y > "pairs.tsv" } }'

NODROP="--dropout 0 --attention-dropout 0 --hidden-dropout 0"
COMMON="--threads 1 --quiet --log-every 1 --eval-every 0 --steps 24 --lr 5e-3 --warmup 4 $NODROP"
LM="--data data.txt $COMMON --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 16 --n-dim 2 --ffn-dim 16 --chunk-size 16 --seq-len 32 --batch 4"
CLS="--task classify --data lo/train.tsv $COMMON --layers 1 --embed-dim 16 --hidden-dim 32 --z-dim 8 --ffn-dim 32 --chunk-size -1 --seq-len 64 --batch 8"
S2S="--task translate --data pairs.tsv $COMMON --encoder-layers 1 --decoder-layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 --ffn-dim 32 --n-dim 2 --max-tokens 96"

# series FILE KEY: the values of KEY in a log.jsonl, one per line
series() { sed -n "s/.*\"$2\": \([-0-9.eE+]*\).*/\1/p" "$1"; }
# maxrel A B: the largest relative difference of the losses and gradient norms of two logs
# ("inf" when their lengths differ or a log is empty)
maxrel() {
  for k in loss grad_norm; do series "$1/log.jsonl" $k > a.$k; series "$2/log.jsonl" $k > b.$k; done
  cat a.loss a.grad_norm > a.all
  cat b.loss b.grad_norm > b.all
  paste a.all b.all | awk -v na="$(wc -l < a.all)" -v nb="$(wc -l < b.all)" '
    { d = $1 - $2; if (d < 0) d = -d; s = ($1 < 0 ? -$1 : $1); r = d / (s > 1e-12 ? s : 1e-12); if (r > m) m = r }
    END { if (na != nb || na == 0) print "inf"; else printf "%.3g\n", m + 0 }'
}
# same_traj NAME A B: the logs of A and B agree within a relative 1e-4
same_traj() {
  m=$(maxrel "$2" "$3")
  if [ "$m" != inf ] && awk -v m="$m" 'BEGIN { exit !(m <= 1e-4) }'; then
    ok "$1 (max rel. difference $m)"
    [ -n "$VERBOSE" ] || echo "NOTE $1: max rel. difference $m"
  else bad "$1 (max rel. difference $m)"; fi
}

for t in lm cls s2s; do
  case $t in lm) F=$LM ;; cls) F=$CLS ;; s2s) F=$S2S ;; esac
  # shellcheck disable=SC2086
  mega train $F --out $t.1 >$t.1.out 2>&1
  status $? "$t: 1 process exits 0"
  # shellcheck disable=SC2086
  mega train $F --grad-accum 2 --out $t.acc >$t.acc.out 2>&1
  status $? "$t: --grad-accum 2 exits 0"
  # shellcheck disable=SC2086
  mpi2 train $F --out $t.2 >$t.2.out 2>$t.2.err
  status $? "$t: 2 ranks exit 0"
  check "$t: the log has 24 steps" test "$(series $t.2/log.jsonl loss | wc -l)" -eq 24
  same_traj "$t: 2 ranks == 1 process (24 steps)" $t.1 $t.2
  same_traj "$t: --grad-accum 2 == 1 process (24 steps)" $t.1 $t.acc
done
check "only rank 0 prints: 24 progress lines for 24 steps" test "$(grep -c '^step ' lm.2.out)" -eq 24
check "the run says it has 2 ranks" grep -q 'parallel  2 ranks' lm.2.out
check "the log has the allreduce share" grep -q '"allreduce_share": ' lm.2/log.jsonl
# --time-budget on 2 ranks: rank 0's clock sets every rank's learning rate and the end; a save
# every 5 steps checks that the ranks' models are still identical (they would differ at once if
# the rates did), and both ranks end at the same step with exit 0
# shellcheck disable=SC2086
mpi2 train $(echo "$LM" | sed 's/--steps 24/--steps 100000000/') --time-budget 2 --save-every 5 --out tb.2 >tb.2.out 2>tb.2.err
status $? "--time-budget 2 on 2 ranks exits 0 (ranks in sync at every save)"
check "--time-budget on 2 ranks: spent, with a checkpoint" grep -q "the --time-budget of 2 s is spent at step" tb.2.out
check "--time-budget on 2 ranks: the manifest stores the clock" grep -q '"train-seconds":' tb.2/step-*.manifest.json
# the comparison can fail: another seed is another trajectory
# shellcheck disable=SC2086
mega train $LM --seed 2 --out lm.seed2 >/dev/null 2>&1
m=$(maxrel lm.1 lm.seed2)
if [ "$m" = inf ] || awk -v m="$m" 'BEGIN { exit !(m > 1e-3) }'; then ok "the comparison sees another seed ($m)"; else
  bad "the comparison does not see another seed ($m)"; fi

# batchnorm: the ranks' statistics are synchronized (the whole batch's, as one process);
# --grad-accum's micro-batches are not (each its own): that it differs shows the batch statistics
# matter at this size
for t in lm cls; do
  case $t in lm) F="$LM --norm-type batchnorm" ;; cls) F="$CLS --norm-type batchnorm" ;; esac
  # shellcheck disable=SC2086
  mega train $F --out $t.bn1 >/dev/null 2>&1 && mpi2 train $F --out $t.bn2 >/dev/null 2>&1 &&
    mega train $F --grad-accum 2 --out $t.bnacc >/dev/null 2>$t.bnacc.err
  status $? "$t batchnorm: 1 process, 2 ranks and --grad-accum 2 exit 0"
  same_traj "$t batchnorm: 2 ranks (synchronized statistics) == 1 process" $t.bn1 $t.bn2
  m=$(maxrel $t.bn1 $t.bnacc)
  if [ "$m" = inf ] || awk -v m="$m" 'BEGIN { exit !(m > 1e-3) }'; then ok "$t batchnorm: --grad-accum 2 (per micro-batch statistics) differs ($m)"
  else bad "$t batchnorm: --grad-accum 2 does not differ from 1 process ($m)"; fi
  check "$t batchnorm: --grad-accum 2 warns about per-micro-batch statistics" grep -q 'warning: batchnorm statistics are those of each micro-batch' $t.bnacc.err
done

# with dropout: 2 ranks and --grad-accum 2 draw the same masks (shard keys)
DROP=$(echo "$LM" | sed "s/$NODROP/--dropout 0.2 --hidden-dropout 0.1/")
# shellcheck disable=SC2086
mega train $DROP --grad-accum 2 --out drop.acc >/dev/null 2>&1 && mpi2 train $DROP --out drop.2 >/dev/null 2>&1
status $? "dropout 0.2: 2 ranks and --grad-accum 2 exit 0"
same_traj "dropout 0.2: 2 ranks == --grad-accum 2" drop.acc drop.2

# refused: 2 ranks x --grad-accum 3 do not divide --batch 4
# shellcheck disable=SC2086
mpi2 train $LM --grad-accum 3 --out bad >bad.out 2>bad.err
rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c '^mega: error: --batch 4 cannot be split into 6 equal shards (2 ranks x --grad-accum 3)' bad.err)" -eq 1 ]; then
  ok "--batch 4 on 2 ranks x --grad-accum 3 is refused in one line"
else bad "--batch 4 on 2 ranks x --grad-accum 3 (exit $rc: $(head -n 3 bad.err))"; fi

# F43: ranks given different data (MPMD: one --data per rank) would train on a mix of both and
# exit 0; the ranks compare their data's size and checksum at the start and refuse in one line
sed 's/e/E/g' data.txt > data2.txt
# shellcheck disable=SC2086
$TO mpirun -np 1 "$MEGA" train $LM --out mixed : -np 1 "$MEGA" train $(echo "$LM" | sed 's/--data data.txt/--data data2.txt/') --out mixed >mixed.out 2>mixed.err
rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c '^mega: error: ' mixed.err)" -eq 1 ] && grep -q '^mega: error: the ranks were given different training data' mixed.err &&
  [ ! -e mixed/model.safetensors ]; then
  ok "F43 2 ranks with different --data are refused in one line (exit $rc)"
else bad "F43 2 ranks with different --data (exit $rc: $(grep 'mega: error' mixed.err | head -n 3))"; fi

# a resumed run splits the checkpoint's batch (6), not the flag's default: 2 ranks x 2 refused
# shellcheck disable=SC2086
mega train $(echo "$LM" | sed 's/--batch 4/--batch 6/') --stop-after 4 --out six >/dev/null 2>&1 &&
  mpi2 train --data data.txt --out six --resume --grad-accum 2 >six.out 2>six.err
rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c '^mega: error: --batch 6 cannot be split into 4 equal shards' six.err)" -eq 1 ]; then
  ok "a resumed run's batch 6 on 2 ranks x --grad-accum 2 is refused in one line"
else bad "a resumed run's batch 6 on 2 ranks x --grad-accum 2 (exit $rc: $(head -n 3 six.err))"; fi

# rank_pid MPIRUN_PID RANK: the pid of a rank (Open MPI's OMPI_COMM_WORLD_RANK in its environment;
# else the youngest child for rank 1)
rank_pid() {
  for p in $(pgrep -P "$1"); do
    r=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^\(OMPI_COMM_WORLD_RANK\|PMIX_RANK\|PMI_RANK\)=//p' | head -n 1)
    [ "$r" = "$2" ] && { echo "$p"; return; }
  done
  [ "$2" = 1 ] && pgrep -n -P "$1"
}
# wait_step DIR N: until DIR's checkpoint is at step >= N (about 60 s at most)
wait_step() {
  k=0
  while [ $k -lt 600 ]; do
    s=$(sed -n 's/^{"step": \([0-9]*\),.*/\1/p' "$1/checkpoint.json" 2>/dev/null)
    [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
    sleep 0.1
    k=$((k + 1))
  done
  return 1
}
# runs stopped in the middle: a constant schedule (its rates do not depend on --steps) and steps
# slow enough (~20 ms) that the run is still going when it is interrupted
SLOW="--data data.txt --threads 1 --quiet --log-every 1 --eval-every 0 --lr 5e-3 --warmup 4 --schedule constant --steps 100000 $NODROP
  --layers 1 --embed-dim 32 --z-dim 16 --hidden-dim 64 --n-dim 2 --ffn-dim 64 --chunk-size 32 --seq-len 256 --batch 8"

# kill -9 one rank: the job ends non-zero in bounded time; the checkpoint resumes on 1 process
# on the trajectory of an uninterrupted run
# shellcheck disable=SC2086
$MPIRUN "$MEGA" train $SLOW --save-every 10 --out killed >killed.out 2>&1 &
MP=$!
PIDS="$PIDS $MP"
if wait_step killed 20 && R1=$(rank_pid $MP 1) && [ -n "$R1" ]; then
  t0=$(date +%s)
  kill -9 "$R1"
  k=0
  while kill -0 $MP 2>/dev/null && [ $k -lt 300 ]; do sleep 0.1; k=$((k + 1)); done
  dt=$(($(date +%s) - t0))
  if kill -0 $MP 2>/dev/null; then bad "kill -9 of rank 1: the job still runs after 30 s"; kill -9 $MP 2>/dev/null; else
    wait $MP
    rc=$?
    if [ $rc -ne 0 ]; then ok "kill -9 of rank 1: the job exits $rc within ${dt} s"; else bad "kill -9 of rank 1: exit 0"; fi
    echo "NOTE kill -9 of rank 1 at step >= $(sed -n 's/^{"step": \([0-9]*\),.*/\1/p' killed/checkpoint.json): the job ended within ${dt} s"
  fi
  s=$(sed -n 's/^{"step": \([0-9]*\),.*/\1/p' killed/checkpoint.json)
  mega train --data data.txt --out killed --resume --quiet --threads 1 --log-every 1 --eval-every 0 --stop-after 20 >resumed.out 2>&1
  status $? "the killed run's checkpoint (step $s) resumes on 1 process"
  check "the resumed run reaches step $((s + 20))" grep -q "\"step\": $((s + 20))," killed/log.jsonl
  # shellcheck disable=SC2086
  mega train $SLOW --stop-after $((s + 20)) --out straight >/dev/null 2>&1
  same_traj "2 ranks killed at step $s, resumed on 1 process == 1 process straight ($((s + 20)) steps)" straight killed
else
  bad "the 2-rank run did not save step 20 in time (or no rank 1 pid): $(tail -n 3 killed.out)"
  kill -9 $MP 2>/dev/null
fi

# a hung rank (SIGSTOP): the others give up after --dist-timeout
# shellcheck disable=SC2086
$MPIRUN "$MEGA" train $SLOW --save-every 10 --dist-timeout 3 --out hung >hung.out 2>hung.err &
MP=$!
PIDS="$PIDS $MP"
if wait_step hung 20 && R1=$(rank_pid $MP 1) && [ -n "$R1" ]; then
  PIDS="$PIDS $R1"
  t0=$(date +%s)
  kill -STOP "$R1"
  k=0
  while kill -0 $MP 2>/dev/null && [ $k -lt 300 ]; do sleep 0.1; k=$((k + 1)); done
  dt=$(($(date +%s) - t0))
  kill -CONT "$R1" 2>/dev/null
  if kill -0 $MP 2>/dev/null; then bad "a stopped rank: the job still runs after 30 s"; kill -9 $MP 2>/dev/null; else
    wait $MP
    rc=$?
    if [ $rc -ne 0 ] && grep -q '^mega: error: rank 0 of 2: .*no answer from the other ranks for 3 s' hung.err; then
      ok "a stopped rank: rank 0 gives up with one error line and the job exits $rc within ${dt} s"
      echo "NOTE SIGSTOP of rank 1, --dist-timeout 3: the job ended within ${dt} s"
    else bad "a stopped rank: exit $rc, $(grep 'mega: error' hung.err | head -n 2)"; fi
  fi
else
  bad "the 2-rank run did not save step 20 in time: $(tail -n 3 hung.out)"
  kill -9 $MP 2>/dev/null
fi

# SIGTERM to one rank: every rank stops after the same step, rank 0 saves it, exit 143
# shellcheck disable=SC2086
$MPIRUN "$MEGA" train $SLOW --save-every 100000 --out termed >termed.out 2>termed.err &
MP=$!
PIDS="$PIDS $MP"
k=0
while [ $k -lt 600 ] && ! grep -q '"step": 5,' termed/log.jsonl 2>/dev/null; do sleep 0.1; k=$((k + 1)); done
if R1=$(rank_pid $MP 1) && [ -n "$R1" ]; then
  kill -TERM "$R1"
  wait $MP
  rc=$?
  s=$(sed -n 's/^stopped by SIGTERM at step \([0-9]*\) with a checkpoint.*/\1/p' termed.out)
  c=$(sed -n 's/^{"step": \([0-9]*\),.*/\1/p' termed/checkpoint.json 2>/dev/null)
  if [ $rc -eq 143 ] && [ -n "$s" ] && [ "$s" = "$c" ]; then ok "SIGTERM to rank 1: exit 143, rank 0 saved step $s"; else
    bad "SIGTERM to rank 1: exit $rc, stopped at '$s', checkpoint '$c'"; fi
  mega train --data data.txt --out termed --resume --quiet --threads 1 --stop-after 2 >/dev/null 2>&1
  status $? "the SIGTERM checkpoint resumes on 1 process"
else
  bad "SIGTERM: no rank 1 pid"
  kill -9 $MP 2>/dev/null
fi

# 1 process, resumed on 2 ranks: the same trajectory
# shellcheck disable=SC2086
mega train $SLOW --stop-after 10 --out grow >/dev/null 2>&1 &&
  mpi2 train --data data.txt --out grow --resume --quiet --threads 1 --log-every 1 --eval-every 0 --stop-after 10 >grow.out 2>&1
status $? "a 1-process run resumes on 2 ranks"
# shellcheck disable=SC2086
mega train $SLOW --stop-after 20 --out straight20 >/dev/null 2>&1
same_traj "1 process to step 10, then 2 ranks to 20 == 1 process straight (20 steps)" straight20 grow
finish
