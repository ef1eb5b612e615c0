#!/bin/sh
# Checkpoints of mega train under injected faults: sh tests/sh/test_checkpoint_faults.sh BUILD_DIR
#
# MEGA_FAULT (src/core/fileio.c) numbers the file operations of a process, five for every file
# written (create the temporary file, write, fsync, rename, fsync the directory); "kill:N" ends the
# process (_exit 137, no cleanup) just before operation N, "enospc:N" makes its Nth write fail
# with ENOSPC. A save writes six files (the generation's model, state and manifest, the copies
# model.safetensors and train_state.safetensors, checkpoint.json): 30 operations. A validation
# that improves on the best first writes best.safetensors (5 operations before the save).
#
# A tiny language model trains 6 steps with a checkpoint every 2 (dropout on, so the data and
# dropout streams must resume exactly); the straight run is the reference. Checked:
#   1. every pair of kill points in two consecutive saves: from the step-2 checkpoint, a
#      `--resume --stop-after 2` is killed before each operation of its save (save A, at step 4)
#      or not at all; from what it leaves, the next `--resume --stop-after 2` is killed before
#      each of its operations (its repairs, then save B, the next save: at step 4 again or at 6)
#      or not at all. Kill points are taken from 1 up until the process runs to its end, so
#      "before and after" every operation is covered, and the pairs include every single fault.
#      After both, a plain --resume must finish the run byte-identical to the reference
#      (model.safetensors, train_state.safetensors, the step-6 manifest, checkpoint.json,
#      log.jsonl without its timing fields, and the same files: the two generations kept, no
#      temporary). The final --resume runs once per distinct directory state (the files' bytes,
#      temporaries' pids ignored); the state key decides, so every pair is still checked.
#   2. the first save of a new run, killed before each of its operations: --resume continues if
#      a generation is complete, otherwise it refuses in one line ("no checkpoint") and a plain
#      new run (no --force needed) finishes byte-identical;
#   3. ENOSPC at every write of three resumes: from step 2 to the end (two saves), one that must
#      first cut the log back (resuming from step 2 with steps 3-4 logged), one that must first
#      restore the stable copies (a crash after the step-4 manifest): exit 2 with the full disk
#      named on stderr, no temporary left, and a plain --resume finishes byte-identical.
# Not fault points: the unlinks of pruning and cleaning (a generation's manifest is removed
# before its files, so a kill among them leaves only an incomplete generation, which the loader
# skips and the next start removes). The runs use a tmpfs (/dev/shm) when there is one: a
# killed process is the fault here, not a power cut, so fsync need not reach a disk.
# Prints "N passed, M failed" last (1 in "passed" per pair); -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
need_tool
TD=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && TD=/dev/shm
in_temp_dir faults "$TD"
START=$(date +%s)
unset MEGA_FAULT
cp "$ROOT/tests/fixtures/runs/lm_v010/data.txt" data.txt || { bad "no data"; finish; }

# F: the flags of every invocation (a checkpoint does not store these); M: a new run's
F="--data data.txt --threads 1 --quiet --save-every 2 --log-every 1 --eval-every 2 --eval-tokens 64"
M="$F --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 16 --n-dim 2 --ffn-dim 16 --chunk-size 16 --seq-len 32
  --batch 2 --steps 6 --warmup 2 --dropout 0.1"
CMPFILES="model.safetensors train_state.safetensors step-00000006.manifest.json checkpoint.json"
notime() { sed -e 's/, *"tok_s": *[-0-9.eE+]*//' -e 's/, *"time": *[-0-9.eE+]*//' -e 's/, *"train_seconds": *[-0-9.eE+]*//' -e 's/, *"eval_seconds": *[-0-9.eE+]*//' "$1"; }

# shellcheck disable=SC2086
"$MEGA" train $M --out ref > ref.out 2>&1 || { bad "reference run: $(tail -n 2 ref.out)"; finish; }
# shellcheck disable=SC2086
"$MEGA" train $M --out base --stop-after 2 > base.out 2>&1 || { bad "step-2 run: $(tail -n 2 base.out)"; finish; }
REFSUM=$(cd ref && md5sum $CMPFILES)
REFLOG=$(notime ref/log.jsonl)
REFLS=$(ls ref)
if [ -s ref/step-00000004.manifest.json ] && [ -s ref/step-00000006.manifest.json ] && [ ! -e ref/step-00000002.manifest.json ] &&
  [ -s base/step-00000002.manifest.json ]; then
  ok "reference: generations 4 and 6 kept (--keep 2); the step-2 checkpoint"
else
  bad "reference: $(ls ref | tr '\n' ' ')"
fi

# same DIR: the directory holds the reference's final checkpoint
same() {
  [ "$(cd "$1" && md5sum $CMPFILES 2>/dev/null)" = "$REFSUM" ] && [ "$(notime "$1/log.jsonl")" = "$REFLOG" ] &&
    [ "$(ls "$1")" = "$REFLS" ]
}
# finish DIR: a plain --resume to the end, then same
finish_run() {
  # shellcheck disable=SC2086
  "$MEGA" train $F --out "$1" --resume > "$1.fin" 2>&1 && same "$1"
}
# key DIR: the directory's state (file names and bytes; temporaries' pids, the lock and the
# log's timing fields ignored)
key() {
  { (cd "$1" && md5sum -- *) | sed -e '/ train\.lock$/d' -e '/ log\.jsonl$/d' -e 's/\.tmp\.[0-9]*$/.tmp/' | sort
    notime "$1/log.jsonl"; } | md5sum
}

# put_key KEY RESULT: the result of a state, written whole and then renamed: the other worker may
# read the same key at that moment (a plain "echo >" truncates first: it would read nothing)
put_key() {
  echo "$2" > "keys/$1.$w" && mv -f "keys/$1.$w" "keys/$1"
}

# ---- 1. every pair of kill points in two consecutive saves ---------------------------------
# worker W: the kill points i of save A with i % 2 == W (the two run side by side); results in
# files: pairs.W (one line per pair: ok or FAIL ...)
mkdir -p keys
worker() {
  w=$1
  i=$((w + 1))
  out="pairs.$w"
  : > "$out"
  while :; do
    a="A$i"
    cp -r base "$a"
    # shellcheck disable=SC2086
    MEGA_FAULT=kill:$i "$MEGA" train $F --out "$a" --resume --stop-after 2 > "$a.out" 2>&1
    rc1=$?
    if [ $rc1 -ne 137 ] && [ $rc1 -ne 0 ]; then echo "FAIL save A, kill:$i: exit $rc1: $(tail -n 1 "$a.out")" >> "$out"; fi
    echo "$rc1" >> "points.$w"
    j=1
    # past the last operation both workers run save A without a fault: one of them goes on
    [ $rc1 -eq 137 ] || mkdir nofault 2> /dev/null || j=0
    while [ $j -gt 0 ]; do
      b="B${i}_$j"
      cp -r "$a" "$b"
      # shellcheck disable=SC2086
      MEGA_FAULT=kill:$j "$MEGA" train $F --out "$b" --resume --stop-after 2 > "$b.out" 2>&1
      rc2=$?
      k=$(key "$b")
      k=${k%% *}
      if [ -s "keys/$k" ]; then
        r=$(cat "keys/$k")
      elif [ $rc2 -ne 137 ] && [ $rc2 -ne 0 ]; then
        r="exit $rc2: $(tail -n 1 "$b.out")"
      elif finish_run "$b"; then
        r=ok
        put_key "$k" "$r"
      else
        r="the resumed run differs: $(tail -n 1 "$b.fin")"
        put_key "$k" "$r"
      fi
      if [ "$r" = ok ]; then echo ok >> "$out"; else echo "FAIL kill:$i in save A, kill:$j after: $r" >> "$out"; fi
      [ $rc2 -eq 137 ] || break
      j=$((j + 1))
    done
    rm -rf "$a" "$a.out" "B${i}_"*
    [ $rc1 -eq 137 ] || break
    i=$((i + 2))
  done
}
worker 0 &
p0=$!
worker 1 &
p1=$!
wait $p0
wait $p1
npairs=$(cat pairs.0 pairs.1 | wc -l)
nbad=$(cat pairs.0 pairs.1 | grep -c '^FAIL')
pass=$((pass + npairs - nbad))
fail=$((fail + nbad))
grep -h '^FAIL' pairs.0 pairs.1 | head -n 20
nA=$(cat points.0 points.1 | grep -c '^137$')
nstates=$(ls keys | wc -l)
if [ "$nA" -ge 30 ]; then ok "save A: $nA operations, each a kill point"; else bad "save A: only $nA kill points"; fi
# (not vacuous: the faults leave many different directories behind)
if [ "$nstates" -ge 20 ]; then ok "$nstates distinct states after two faults"; else bad "only $nstates distinct states after two faults"; fi
echo "NOTE test_checkpoint_faults.sh: $npairs pairs of faults ($nA kill points in save A, and none), $nstates distinct states resumed"

# ---- 2. the first save of a new run -------------------------------------------------------------
i=1
while :; do
  d="N$i"
  # shellcheck disable=SC2086
  MEGA_FAULT=kill:$i "$MEGA" train $M --out "$d" --stop-after 2 > "$d.out" 2>&1
  rc=$?
  # shellcheck disable=SC2086
  "$MEGA" train $F --out "$d" --resume > "$d.res" 2> "$d.err"
  rr=$?
  if [ $rr -eq 0 ] && finish_run "$d"; then
    ok "first save, kill:$i: --resume continues, ends byte-identical"
  elif [ $rr -eq 2 ] && [ "$(wc -l < "$d.err")" -eq 1 ] && grep -q '^mega: error: --resume: no checkpoint' "$d.err" &&
    ! ls "$d" | grep -q 'manifest\.json$'; then
    # shellcheck disable=SC2086
    if "$MEGA" train $M --out "$d" > "$d.new" 2>&1 && same "$d"; then
      ok "first save, kill:$i: no complete checkpoint: --resume refuses, a new run ends byte-identical"
    else
      bad "first save, kill:$i: the new run in its directory: $(tail -n 1 "$d.new")"
    fi
  else
    bad "first save, kill:$i: --resume exit $rr: $(head -n 2 "$d.err" | tr '\n' ' ')"
  fi
  rm -rf "$d" "$d".*
  [ $rc -eq 137 ] || break
  i=$((i + 1))
done

# ---- 3. ENOSPC at every write --------------------------------------------------------------------
# the starting points: base; a crash before the step-4 manifest (the log runs to step 4); a crash
# after it, before the stable copies (operation 21: creating model.safetensors' temporary, after
# best.safetensors' 5 and the generation's 15)
cp -r base S_log
# shellcheck disable=SC2086
MEGA_FAULT=kill:12 "$MEGA" train $F --out S_log --resume --stop-after 2 > /dev/null 2>&1
cp -r base S_copy
# shellcheck disable=SC2086
MEGA_FAULT=kill:21 "$MEGA" train $F --out S_copy --resume --stop-after 2 > /dev/null 2>&1
if grep -q '"step": 4' S_log/log.jsonl && [ ! -e S_log/step-00000004.manifest.json ] &&
  [ -s S_copy/step-00000004.manifest.json ] && ! cmp -s S_copy/model.safetensors S_copy/step-00000004.model.safetensors; then
  ok "ENOSPC starting points: a log past the checkpoint; stable copies behind the newest generation"
else
  bad "ENOSPC starting points are not as meant: $(ls S_log S_copy | tr '\n' ' ')"
fi
for s in base S_log S_copy; do
  n=1
  while :; do
    d="E_${s}_$n"
    cp -r "$s" "$d"
    # shellcheck disable=SC2086
    MEGA_FAULT=enospc:$n "$MEGA" train $F --out "$d" --resume > "$d.out" 2> "$d.err"
    rc=$?
    [ $rc -eq 0 ] && { rm -rf "$d" "$d".*; break; }
    if [ $rc -eq 2 ] && [ "$(grep -c '^mega: error: .*No space left on device' "$d.err")" -eq 1 ] &&
      [ "$(tail -n 1 "$d.err" | cut -c1-13)" = "mega: error: " ] && ! ls "$d" | grep -q '\.tmp\.' && finish_run "$d"; then
      ok "ENOSPC at write $n (from $s): exit 2, one error line, no temporary; --resume ends byte-identical"
    else
      bad "ENOSPC at write $n (from $s): exit $rc, $(tr '\n' ' ' < "$d.err") $(tail -n 1 "$d.fin" 2>/dev/null)"
    fi
    rm -rf "$d" "$d".*
    n=$((n + 1))
    [ $n -gt 100 ] && { bad "ENOSPC from $s: more than 100 writes"; break; }
  done
  [ $n -ge 3 ] && ok "ENOSPC from $s: $((n - 1)) writes"
done

echo "NOTE test_checkpoint_faults.sh: $(($(date +%s) - START)) s"
finish
