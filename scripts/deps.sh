#!/bin/sh
# Installs the Debian packages the build and the tests need, only when missing.
# Usage: scripts/deps.sh [build|run|bench|bench-ttq|test|valgrind]
#   build (default): compiler toolchain, OpenBLAS, cJSON, zlib, libpng (PNG images; optional), MPI (Open MPI: data-parallel
#                    training; the build works without it, as a single rank)
#   run:             build + the default corpus (dict-gcide)
#   bench:           build + the PyTorch peer (python3-torch)
#   bench-ttq:       bench + the GCIDE corpus (dict-gcide)
#   test:            build + the FreeDict deu-eng dictionary (the translation data tests), python3-numpy
#                    (the Python package's test, tests/sh/test_python.sh), Fashion-MNIST
#                    (dataset-fashion-mnist: the classification experiments, tests/sh/test_experiment.sh)
#   valgrind:        build + valgrind (make check-valgrind)
# Quiet when everything is present. Needs root (or sudo) only when something is missing.
set -e
what=${1:-build}
pkgs="make gcc libopenblas-dev libopenblas-openmp-dev libcjson-dev pkg-config zlib1g-dev libopenmpi-dev openmpi-bin libpng-dev"
case "$what" in
  run) pkgs="$pkgs dict-gcide" ;;
  bench) pkgs="$pkgs python3-torch python3-numpy" ;;
  bench-ttq) pkgs="$pkgs python3-torch python3-numpy dict-gcide" ;;
  test) pkgs="$pkgs dict-freedict-deu-eng python3 python3-numpy dataset-fashion-mnist" ;;
  valgrind) pkgs="$pkgs valgrind" ;;
  build) ;;
  *) echo "deps.sh: unknown target '$what' (build|run|bench|bench-ttq|test|valgrind)" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing="$missing $p"
  fi
done
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps.sh: missing packages:$missing (and no apt-get here); install them by hand" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "deps.sh: missing packages:$missing; run as root or install them: apt-get install$missing" >&2
    exit 1
  fi
fi
echo "deps.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -qq $missing >/tmp/mega-apt.log 2>&1; then
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  if ! $SUDO apt-get install -y -qq $missing >/tmp/mega-apt.log 2>&1; then
    echo "deps.sh: apt-get install$missing failed; see /tmp/mega-apt.log" >&2
    tail -5 /tmp/mega-apt.log >&2
    exit 1
  fi
fi
