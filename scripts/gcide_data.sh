#!/bin/sh
# The byte-level GCIDE task of `make run` and `make bench-ttq`: the GNU Collaborative
# International Dictionary of English (Debian package dict-gcide), decompressed into
# data/gcide.txt; the last 5% of its bytes are held out (data/gcide.valid), the rest is
# data/gcide.train. Does nothing when both files are there. Run from the repository's root.
set -eu
SRC=/usr/share/dictd/gcide.dict.dz
mkdir -p data
if [ ! -s data/gcide.train ] || [ ! -s data/gcide.valid ]; then
  [ -r "$SRC" ] || { echo "$SRC is missing (apt-get install dict-gcide)" >&2; exit 1; }
  echo "== preparing the corpus: $SRC -> data/gcide.txt"
  gzip -dc "$SRC" > data/gcide.txt.tmp && mv data/gcide.txt.tmp data/gcide.txt
  n=$(wc -c < data/gcide.txt); v=$((n / 20))
  head -c $((n - v)) data/gcide.txt > data/gcide.train.tmp && mv data/gcide.train.tmp data/gcide.train
  tail -c "$v" data/gcide.txt > data/gcide.valid.tmp && mv data/gcide.valid.tmp data/gcide.valid
  echo "   $n bytes: $((n - v)) for training, the last $v (5%) held out"
fi
