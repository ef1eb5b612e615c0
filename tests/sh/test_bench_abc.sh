#!/bin/sh
# The ABC efficiency rows of `mega bench` (docs/performance.md, "ABC efficiency"), one step each:
#   * abc-enc-base and abc-enc-mlp64 run (the 4x128 encoder, 16 x 512 tokens, forward only) and
#     the JSON names their mixers (mha; abc-mlp with 64 slots);
#   * with abc-enc-base in the run, the table relative to BASE follows, BASE at 1.00x and the
#     paper's Table 6 figures beside (ABC-MLP n=64: 1.5x speed, 0.5x memory);
#   * without abc-enc-base there is no relative table.
# Usage: sh tests/sh/test_bench_abc.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir bench_abc

"$MEGA" bench abc-enc-base abc-enc-mlp64 --no-sgemm --threads 1 --repeat 1 --warmup 0 >out.txt 2>err.txt
status $? "bench abc-enc-base abc-enc-mlp64 exits 0"
grep -q "^abc-enc-base  *1.00x  *1.0x  *1.00x  *1.0x$" out.txt
status $? "the relative table has BASE at 1.00x beside the paper's 1.0x"
grep -q "^abc-enc-mlp64  *[0-9.]*x  *1.5x  *[0-9.]*x  *0.5x$" out.txt
status $? "ABC-MLP n=64 measured beside the paper's 1.5x speed and 0.5x memory"
"$MEGA" bench abc-enc-lin64 --no-sgemm --json --threads 1 --repeat 1 --warmup 0 >j.txt 2>/dev/null &&
  grep -q '"status":"ok"' j.txt && grep -q '"mixer":"abc-linformer:64"' j.txt && grep -q '"peak_rss_mib":[0-9]' j.txt
status $? "--json: abc-enc-lin64 runs, names its mixer and memory"
"$MEGA" bench abc-enc-lin64 --no-sgemm --threads 1 --repeat 1 --warmup 0 >out2.txt 2>/dev/null
! grep -q "relative to BASE" out2.txt
status $? "no relative table without abc-enc-base"
finish
