#!/bin/sh
# The simulated AVX2-only machine of make bench (bench/run.sh --avx2, bench/lib.sh; docs/performance.md
# "An AVX2-only machine, simulated"):
#   sh tests/sh/test_bench_avx2.sh BUILD_DIR
#   * bench_vectors names the widest registers of the binary as its disassembly shows them;
#   * --avx2 refuses a binary with AVX-512 (zmm) instructions, with a one-line message and a
#     non-zero exit, before running anything (checked only when BUILD_DIR is such a build and
#     torch is installed: without it bench/run.sh stops earlier);
#   * bench/peer/peer.py --kernels reports ATen's capability and OpenBLAS's core, and follows
#     ATEN_CPU_CAPABILITY=avx2 and OPENBLAS_CORETYPE=Haswell (needs torch on OpenBLAS's OpenMP
#     build, else a NOTE).
# About 3 s (one torch import).
. "$(dirname "$0")/lib.sh"
need_tool
cd "$ROOT" || { bad "cd $ROOT"; finish; }
PY=/usr/bin/python3
torch=0
[ -x "$PY" ] && "$PY" -c 'import torch' >/dev/null 2>&1 && torch=1
if ! command -v objdump >/dev/null 2>&1; then
  echo "NOTE test_bench_avx2.sh: no objdump, the register checks skipped"
else
  MEGA="$B/mega"
  . bench/lib.sh
  bench_vectors
  if objdump -d "$MEGA" | grep -q '%zmm'; then want="AVX-512 (zmm)"
  elif objdump -d "$MEGA" | grep -q '%ymm'; then want="AVX2 (ymm, no zmm)"
  else want="128-bit (no ymm)"; fi
  check "bench_vectors: $vec" [ "$vec" = "$want" ]
  case "$torch$vec" in
    0*) echo "NOTE test_bench_avx2.sh: no torch (bench/run.sh stops before the check), the refusal is not checked" ;;
    1AVX-512*)
      msg=$(sh bench/run.sh "$B" --avx2 no-such-workload 2>&1)
      status $(( $? == 0 )) "--avx2 on an AVX-512 binary exits non-zero"
      check "--avx2 on an AVX-512 binary says why" sh -c 'echo "$1" | grep -q "uses AVX-512 registers; build it with .make bench AVX2=1."' _ "$msg"
      check "--avx2 on an AVX-512 binary runs nothing" sh -c '! echo "$1" | grep -q "sgemm"' _ "$msg" ;;
    *) echo "NOTE test_bench_avx2.sh: $B/mega has no AVX-512, the refusal is not checked" ;;
  esac
fi
ld=""
for d in /usr/lib/*/openblas-openmp; do [ -e "$d/libblas.so.3" ] && ld=$d && break; done
if [ "$torch" = 0 ] || [ -z "$ld" ]; then
  echo "NOTE test_bench_avx2.sh: no torch or no OpenBLAS OpenMP build, peer.py --kernels not checked"
  finish
fi
k=$(LD_LIBRARY_PATH=$ld OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 "$PY" bench/peer/peer.py --kernels 2>&1)
check "peer.py --kernels under the simulation: $k" \
  [ "$k" = "ATen AVX2, OpenBLAS Haswell kernels (OPENBLAS_CORETYPE=Haswell)" ]
finish
