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
