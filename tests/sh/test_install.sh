#!/bin/sh
# The installed library as a user sees it: sh tests/sh/test_install.sh BUILD_DIR
#   * BUILD_DIR/install-test is a `make install` copy (make test writes it: the install-test
#     target, the same recipe as make install, with PREFIX=BUILD_DIR/install-test); its build.env
#     names the compiler of the build (a clang-built library needs clang's OpenMP runtime);
#   * the layout: headers, libmega.a, libmega.so -> libmega.so.0 -> libmega.so.0.1.0 (soname
#     libmega.so.0), mega.pc; pkg-config's flags carry nothing internal (-DMEGA_USE_BLAS);
#   * examples/generate.c compiles without a warning through pkg-config alone, against the
#     shared library (pkg-config --cflags --libs mega) and against the static one (pkg-config
#     --static --libs mega, with -lmega asking for the archive), and examples/Makefile builds it;
#   * on a model trained for 3 steps: the example exits 0, prints the requested number of
#     bytes, the same bytes on every run, with either library, for the run directory or its
#     model.safetensors, and exactly what `mega generate` prints for the same model, prompt,
#     seed, temperature and top-p (the sampler is the library's); greedy too;
#   * a missing model or a directory without one: exit 1 and exactly one line on stderr.
# Prints "N passed, M failed" last and exits 1 on any failure. -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
P="$B/install-test"
if [ ! -f "$P/lib/pkgconfig/mega.pc" ] || [ ! -f "$P/build.env" ]; then
  bad "no installed copy in $P (make test installs it first: make MEGA_INNER=1 BUILD=... install-test)"
  finish
fi
if ! command -v pkg-config > /dev/null 2>&1; then
  bad "pkg-config is not installed (scripts/deps.sh installs it)"
  finish
fi
CC=cc
. "$P/build.env"
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_install.XXXXXX") || { bad "mktemp -d"; finish; }
trap 'rm -rf "$T"' EXIT
trap 'exit 2' INT TERM HUP
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
TO=""
command -v timeout > /dev/null 2>&1 && TO="timeout -k 5 300"

# ---- the installed files and pkg-config ------------------------------------------------------
version=$(sed -n 's/^#define MEGA_VERSION "\(.*\)"/\1/p' "$SRC/include/mega.h")
for f in include/mega.h lib/libmega.a "lib/libmega.so.$version" bin/mega; do
  check "installed $f" test -s "$P/$f"
done
for h in "$SRC"/include/*.h; do check "installed header $(basename "$h")" cmp -s "$h" "$P/include/$(basename "$h")"; done
check "libmega.so -> libmega.so.0" test "$(readlink "$P/lib/libmega.so")" = libmega.so.0
check "libmega.so.0 -> libmega.so.$version" test "$(readlink "$P/lib/libmega.so.0")" = "libmega.so.$version"
if command -v readelf > /dev/null 2>&1; then
  check "soname libmega.so.0" sh -c "readelf -d '$P/lib/libmega.so.$version' | grep -q 'SONAME.*\[libmega.so.0\]'"
fi
check "pkg-config --modversion mega is $version" test "$(pkg-config --modversion mega)" = "$version"
cflags=$(pkg-config --cflags mega | sed "s/ *$//")
libs=$(pkg-config --libs mega | sed "s/ *$//")
slibs=$(pkg-config --static --libs mega | sed "s/ *$//")
check "pkg-config --cflags mega: $cflags" test "$cflags" = "-I$P/include"
case "$libs" in "-L$P/lib -lmega"*) ok "pkg-config --libs mega: $libs" ;; *) bad "pkg-config --libs mega: $libs" ;; esac
case "$cflags $libs $slibs" in *MEGA_USE_BLAS* | *-DMEGA*) bad "pkg-config flags carry internal defines: $cflags $libs $slibs" ;; *) ok "no internal defines in the flags" ;; esac
echo "NOTE test_install.sh: pkg-config --libs mega = $libs"
echo "NOTE test_install.sh: pkg-config --static --libs mega = $slibs"

# ---- the example, against the shared and the static library --------------------------------
# shellcheck disable=SC2086
if $CC -std=c11 -Wall -Wextra "$SRC/examples/generate.c" $cflags $libs -o "$T/gen_shared" 2> "$T/cc1.err" && [ ! -s "$T/cc1.err" ]; then
  ok "$CC examples/generate.c \$(pkg-config --cflags --libs mega): no warning"
else
  bad "compiling the example against the shared library: $(head -5 "$T/cc1.err")"
fi
# the archive: -l:libmega.a instead of -lmega (with both installed, -lmega means libmega.so)
# shellcheck disable=SC2086
if $CC -std=c11 -Wall -Wextra "$SRC/examples/generate.c" $cflags $(echo "$slibs " | sed 's/-lmega /-l:libmega.a /') -o "$T/gen_static" 2> "$T/cc2.err" && [ ! -s "$T/cc2.err" ]; then
  ok "the example against libmega.a with pkg-config --static --libs mega: no warning"
else
  bad "compiling the example against the static library: $(head -5 "$T/cc2.err")"
fi
if command -v readelf > /dev/null 2>&1; then
  check "the shared build needs libmega.so.0" sh -c "readelf -d '$T/gen_shared' | grep -q 'NEEDED.*\[libmega.so.0\]'"
  check "the static build does not" sh -c "! readelf -d '$T/gen_static' | grep -q 'NEEDED.*libmega'"
fi
mkdir -p "$T/ex" && cp "$SRC/examples/generate.c" "$SRC/examples/Makefile" "$T/ex/"
if make -s -C "$T/ex" CC="$CC" > "$T/make.out" 2>&1 && [ -x "$T/ex/generate" ]; then
  ok "examples/Makefile builds the example"
else
  bad "examples/Makefile: $(head -5 "$T/make.out")"
fi

# ---- running it on a tiny model ----------------------------------------------------------
awk 'BEGIN { s = 7; for (i = 0; i < 3000; i++) { s = (s * 16807) % 2147483647;
  printf "%s%s", substr("the quick brown fox jumps over a lazy dog and ", 1 + s % 40, 7), (i % 9 == 8 ? "\n" : " ") } }' > "$T/corpus.txt"
if $TO "$B/mega" train --data "$T/corpus.txt" --out "$T/run" --steps 3 --layers 1 --embed-dim 16 --z-dim 8 --hidden-dim 32 \
  --n-dim 2 --ffn-dim 32 --chunk-size 16 --seq-len 32 --batch 2 --eval-every 0 --threads 1 --quiet > "$T/train.out" 2>&1; then
  ok "mega train: a tiny model for 3 steps"
else
  bad "mega train: $(tail -3 "$T/train.out")"
  finish
fi
export OMP_NUM_THREADS=1
N=150
gen() { # gen EXE OUT MODEL PROMPT TOKENS TEMPERATURE TOP_P SEED
  exe=$1 out=$2; shift 2
  LD_LIBRARY_PATH="$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" $TO "$exe" "$@" > "$out" 2> "$out.err"
}
if gen "$T/gen_shared" "$T/a1" "$T/run" "The " $N 0.8 0.95 7; then ok "the example runs (shared library)"; else bad "the example failed: $(cat "$T/a1.err")"; fi
check "it prints $N bytes and a newline" test "$(wc -c < "$T/a1")" -eq $((N + 1))
gen "$T/gen_shared" "$T/a2" "$T/run" "The " $N 0.8 0.95 7
check "the same bytes on a second run (fixed seed)" cmp -s "$T/a1" "$T/a2"
gen "$T/gen_static" "$T/a3" "$T/run" "The " $N 0.8 0.95 7
check "the same bytes from the static build" cmp -s "$T/a1" "$T/a3"
gen "$T/ex/generate" "$T/a4" "$T/run/model.safetensors" "The " $N 0.8 0.95 7
check "the same bytes for the model file instead of the run directory (examples/Makefile build)" cmp -s "$T/a1" "$T/a4"
$TO "$B/mega" generate --model "$T/run" --prompt "The " --tokens $N --temperature 0.8 --top-p 0.95 --seed 7 --threads 1 --quiet > "$T/m1" 2> "$T/m1.err"
check "the same bytes as mega generate (temperature 0.8, top-p 0.95, seed 7)" cmp -s "$T/a1" "$T/m1"
gen "$T/gen_shared" "$T/a5" "$T/run" "The " $N 0.8 0.95 8
check "another seed gives other bytes" sh -c "! cmp -s '$T/a1' '$T/a5'"
gen "$T/gen_shared" "$T/g1" "$T/run" "a lazy" 40 0 1 0
$TO "$B/mega" generate --model "$T/run" --prompt "a lazy" --tokens 40 --temperature 0 --top-p 1 --threads 1 --quiet > "$T/g2" 2> /dev/null
check "greedy (temperature 0): the same bytes as mega generate" sh -c "test -s '$T/g1' && cmp -s '$T/g1' '$T/g2'"

# ---- errors: one line ----------------------------------------------------------------------
mkdir -p "$T/emptydir"
for what in "nomodel:no such file or directory" "emptydir:no model.safetensors in this directory"; do
  gen "$T/gen_shared" "$T/e" "$T/${what%%:*}" "x" 5 0.8 0.95 1
  rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l < "$T/e.err")" -eq 1 ] && grep -q "${what#*:}" "$T/e.err" && [ ! -s "$T/e" ]; then
    ok "${what%%:*}: exit 1, one line: $(cat "$T/e.err")"
  else
    bad "${what%%:*}: exit $rc, stderr: $(cat "$T/e.err")"
  fi
done
finish
