# Shared by bench/run.sh and bench/ttq.sh (sourced, from the repository's root).

# what both sides need: our binary ($MEGA) and torch for $PY; exits with a message otherwise
# usage: bench_require NAME MAKE_TARGET
bench_require() {
  if [ ! -x "$MEGA" ]; then
    echo "$1: $MEGA not found (run 'make' first, or 'make $2')" >&2
    exit 1
  fi
  if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "$1: $PY cannot import torch; install python3-torch (scripts/deps.sh bench)" >&2
    exit 1
  fi
}

# The machine facts every benchmark prints and stores. Sets cpu, host, load_before; prints the
# load and warns when the machine is busy.
# usage: bench_machine NAME CORES
bench_machine() {
  cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
  host=$(hostname 2>/dev/null || echo unknown)
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "$1: load average $load_before"
  if awk -v l="${load_before%% *}" -v c="$2" 'BEGIN { exit !(l > 0.5 * c) }'; then
    echo "$1: WARNING: the machine is busy (load ${load_before%% *} on $2 cores): the numbers will be noisy" >&2
  fi
}

# The peer's BLAS. Debian's torch (BLAS_INFO=generic) multiplies through libblas.so.3, which the
# alternatives system points at OpenBLAS's pthread build: a thread pool of its own next to torch's
# OpenMP one, so 2 + 2 busy threads on 2 cores, whose workers spin after every product while
# torch's threads do the element-wise work. OpenBLAS's OpenMP build shares torch's pool instead
# (as MKL does in the usual PyTorch wheels). docs/performance.md ("The peer's BLAS") has the
# figures. BENCH_PEER_BLAS=openmp (default) runs the peer on the OpenMP build; =system keeps the
# machine's choice. Sets peer_ld (the peer's LD_LIBRARY_PATH, empty for system) and peer_blas (a
# description); exits when openmp is asked for and not installed.
# usage: bench_peer_blas NAME
bench_peer_blas() {
  peer_ld=""
  case "${BENCH_PEER_BLAS:-openmp}" in
    system) peer_ld=${LD_LIBRARY_PATH:-}; peer_blas="the system's libblas.so.3 ($(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown))" ;;
    openmp)
      for d in /usr/lib/*/openblas-openmp; do
        [ -e "$d/libblas.so.3" ] && peer_ld=$d && break
      done
      if [ -z "$peer_ld" ]; then
        echo "$1: OpenBLAS's OpenMP build (libopenblas0-openmp) is not installed: install it, or BENCH_PEER_BLAS=system" >&2
        exit 1
      fi
      peer_blas="OpenBLAS OpenMP build ($peer_ld), sharing torch's OpenMP threads" ;;
    *) echo "$1: BENCH_PEER_BLAS must be openmp or system, not '$BENCH_PEER_BLAS'" >&2; exit 2 ;;
  esac
  [ "${BENCH_PEER_BLAS:-openmp}" = openmp ] && peer_ld=$peer_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  return 0
}

# The widest vector registers our binary ($MEGA) uses, from its disassembly: sets vec.
# usage: bench_vectors
bench_vectors() {
  vec="unknown (no objdump)"
  command -v objdump >/dev/null 2>&1 || return 0
  objdump -d "$MEGA" >"${TMPDIR:-/tmp}/bench_vec.$$" 2>/dev/null || return 0
  if grep -q '%zmm' "${TMPDIR:-/tmp}/bench_vec.$$"; then vec="AVX-512 (zmm)"
  elif grep -q '%ymm' "${TMPDIR:-/tmp}/bench_vec.$$"; then vec="AVX2 (ymm, no zmm)"
  else vec="128-bit (no ymm)"; fi
  rm -f "${TMPDIR:-/tmp}/bench_vec.$$"
}

# --avx2: an AVX2-only machine simulated on an AVX-512 one (docs/performance.md, "An AVX2-only
# machine, simulated"). Both sides on OpenBLAS's Haswell (AVX2) kernels; the peer's ATen and
# oneDNN kernels capped at AVX2; our binary must have no AVX-512 instruction. Exits otherwise.
# usage: bench_avx2 NAME (after bench_vectors)
bench_avx2() {
  case "$vec" in
    AVX-512*) echo "$1: --avx2: $MEGA uses AVX-512 registers; build it with 'make bench AVX2=1' (build-avx2: NATIVE=0 EXTRA_CFLAGS=-march=haswell)" >&2; exit 1 ;;
  esac
  export OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2
  echo "$1: AVX2-only machine simulated: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE ATEN_CPU_CAPABILITY=$ATEN_CPU_CAPABILITY ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA=$DNNL_MAX_CPU_ISA (both sides)"
}
