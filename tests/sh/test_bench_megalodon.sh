#!/bin/sh
# The Megalodon bench workloads start (docs/performance.md "Megalodon"):
#   sh tests/sh/test_bench_megalodon.sh BUILD_DIR
#   * `mega bench --list` and the peer's --list (bench/peer/peer.py) name megalodon-lm-train and
#     megalodon-lm-decode-b1;
#   * one timed run of megalodon-lm-decode-b1: status ok, mixer megalodon, a FLOP count, a token
#     digest that differs from lm-decode-b1's (the same widths with Mega's mixer), so the row did
#     build a Megalodon model.
# The training row (about 10 s a step) and the peer's model (torch) are left to make bench.
. "$(dirname "$0")/lib.sh"
need_tool
list=$("$MEGA" bench --list)
plist=$([ -x /usr/bin/python3 ] && /usr/bin/python3 "$ROOT/bench/peer/peer.py" --list)
for w in megalodon-lm-train megalodon-lm-decode-b1; do
  echo "$list" | grep -q "^$w " && ok "mega bench --list: $w" || bad "mega bench --list lacks $w"
  if [ -x /usr/bin/python3 ]; then
    echo "$plist" | grep -q "^$w " && ok "peer --list: $w" || bad "peer --list lacks $w"
  fi
done
run() { "$MEGA" bench --no-sgemm --json --threads 1 --warmup 0 --repeat 1 "$1" 2>/dev/null; }
mg=$(run megalodon-lm-decode-b1) || bad "mega bench megalodon-lm-decode-b1 failed"
me=$(run lm-decode-b1) || bad "mega bench lm-decode-b1 failed"
echo "$mg" | grep -q '"status":"ok"' && ok "megalodon decode: status ok" || bad "megalodon decode: $mg"
echo "$mg" | grep -q '"mixer":"megalodon"' && ok "megalodon decode: mixer" || bad "megalodon decode mixer: $mg"
echo "$mg" | grep -q '"gflop_per_step":[0-9]' && ok "megalodon decode: FLOP count" || bad "megalodon decode FLOPs: $mg"
dg() { echo "$1" | sed -n 's/.*"tokens_digest":"\([0-9a-f]*\)".*/\1/p'; }
a=$(dg "$mg")
b=$(dg "$me")
if [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]; then ok "megalodon decode: its own model ($a vs Mega's $b)"; else bad "digests: megalodon '$a', mega '$b'"; fi
finish
