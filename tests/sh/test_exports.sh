#!/bin/sh
# The shared library's surface: sh tests/sh/test_exports.sh BUILD_DIR
#   * libmega.so (built with -fvisibility=hidden) exports exactly the functions that the public
#     headers (include/*.h) declare with MEGA_API: nothing internal (no mega__ helper, no layer or
#     kernel function such as mega_block_forward), and every declared function is defined;
#   * every function declaration of the public headers carries MEGA_API (scripts/mega_api.py
#     --check), so nothing public is left hidden;
#   * the Python package (python/mega) calls only exported functions.
# Prints "N passed, M failed" last and exits 1 on any failure. -v as $2 prints every check.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
SO="$B/libmega.so"
if [ ! -e "$SO" ]; then bad "no $SO (make all builds it)"; finish; fi
if ! command -v nm > /dev/null 2>&1; then bad "nm is not installed (binutils)"; finish; fi
T=$(mktemp -d "${TMPDIR:-/tmp}/mega_exports.XXXXXX") || { bad "mktemp -d"; finish; }
trap 'rm -rf "$T"' EXIT
# the names the headers declare with MEGA_API, after the preprocessor (the X-macro lists declare
# functions too): each MEGA_API, marked, up to the name before its parenthesis
CC=${CC:-cc}
printf '#include "mega.h"\n#include "mega_data.h"\n#include "mega_train.h"\n#include "mega_metrics.h"\n' > "$T/all.c"
if ! "$CC" -E -P -DMEGA_API=MEGA_EXPORT_MARK -I"$SRC/include" "$T/all.c" > "$T/all.i" 2> "$T/cpp.err"; then
  bad "the preprocessor failed on the public headers: $(head -c 300 "$T/cpp.err")"; finish
fi
tr '\n' ' ' < "$T/all.i" | grep -oE 'MEGA_EXPORT_MARK[^;(]*\(' | grep -oE '[A-Za-z0-9_]+ *\($' | sed 's/ *($//' | sort -u > "$T/declared"
# every public declaration is marked (a declaration without MEGA_API would not be exported)
if command -v python3 > /dev/null 2>&1; then
  if python3 "$SRC/scripts/mega_api.py" --check "$SRC"/include/*.h > "$T/unmarked" 2>&1; then
    ok "every declaration of the public headers carries MEGA_API"
  else
    bad "public declarations without MEGA_API: $(head -c 400 "$T/unmarked")"
  fi
else
  echo "NOTE test_exports.sh: python3 not installed: the MEGA_API marking is not checked"
fi
# what the library exports: defined symbols of the dynamic table (code and data)
nm -D --defined-only "$SO" | awk '$2 ~ /^[TDRBVW]$/ {print $3}' | grep -v '^_' | sort -u > "$T/exported"
nd=$(wc -l < "$T/declared"); ne=$(wc -l < "$T/exported")
[ "$nd" -gt 100 ] && ok "the headers declare $nd functions with MEGA_API" || bad "only $nd MEGA_API declarations found in include/*.h"
extra=$(comm -13 "$T/declared" "$T/exported")
[ -z "$extra" ] && ok "libmega.so exports nothing undeclared ($ne symbols)" || bad "libmega.so exports symbols no public header declares: $(echo $extra | cut -c1-300)"
missing=$(comm -23 "$T/declared" "$T/exported")
[ -z "$missing" ] && ok "every MEGA_API function is exported" || bad "declared with MEGA_API but not exported (undefined?): $(echo $missing | cut -c1-300)"
internal=$(grep -c '^mega__' "$T/exported")
[ "$internal" -eq 0 ] && ok "no internal mega__ function is exported" || bad "$internal internal mega__ functions exported"
# a known internal function with the public prefix stays internal
grep -qx 'mega_block_forward' "$T/exported" && bad "mega_block_forward (internal) is exported" || ok "mega_block_forward is not exported"
# the Python package's ctypes calls name exported functions only
grep -ohE '\blib\.mega_[A-Za-z0-9_]+' "$SRC"/python/mega/*.py | sed 's/^lib\.//' | sort -u > "$T/python"
np=$(wc -l < "$T/python")
pmiss=$(comm -23 "$T/python" "$T/exported")
[ "$np" -gt 10 ] && [ -z "$pmiss" ] && ok "the Python package's $np library calls are all exported" || bad "the Python package calls functions libmega.so does not export ($np calls): $(echo $pmiss | cut -c1-300)"
finish
