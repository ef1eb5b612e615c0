#!/bin/sh
# mega pathfinder and the pathfinder data format from the command line (docs/vision.md): the
# release layout written, the same seed writing the same files, bad flags refused in one line,
# a classifier trained for two steps on the written directory with the lra-pathfinder preset
# and evaluated on it; a build without libpng says so in one line (the rest is skipped).
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir pathfinder
"$MEGA" pathfinder --out x --count 1 --quiet 2>err.txt
if grep -q 'no libpng' err.txt; then
  expect_error "without libpng" "no libpng" "$MEGA" pathfinder --out y --count 1
  echo "NOTE test_pathfinder.sh: this build has no libpng; the Pathfinder tests are skipped"
  finish
fi
rm -rf x
"$MEGA" pathfinder --out a/pathfinder32 --count 30 --seed 5 --figure grid.png > out1.txt
status $? "mega pathfinder --count 30"
D=a/pathfinder32/curv_contour_length_14
check "metadata/0.npy with 30 lines" test "$(wc -l < $D/metadata/0.npy)" -eq 30
check "imgs/0/sample_29.png written" test -s $D/imgs/0/sample_29.png
check "the figure written" test -s grid.png
check "a line of the release's form" grep -q '^imgs/0 sample_3.png 3 [01] 1 14 4 2 0.5 1 1$' $D/metadata/0.npy
grep -q "label 1:.*ink" out1.txt
status $? "the statistics printed"
"$MEGA" pathfinder --out b/pathfinder32 --count 30 --seed 5 --quiet
check "the same seed writes the same metadata" cmp -s $D/metadata/0.npy b/pathfinder32/curv_contour_length_14/metadata/0.npy
check "... and the same images" cmp -s $D/imgs/0/sample_17.png b/pathfinder32/curv_contour_length_14/imgs/0/sample_17.png
"$MEGA" pathfinder --out c --count 3 --difficulty easy --quiet
check "easy: curv_baseline" test -s c/curv_baseline/metadata/0.npy
expect_error "--size 48" "--size must be 32, 64 or 128" "$MEGA" pathfinder --out d --size 48
expect_error "--difficulty" "--difficulty must be easy, medium or hard" "$MEGA" pathfinder --out d --difficulty extreme
expect_error "no --out" "--out DIR is required" "$MEGA" pathfinder --count 3
# two training steps of a small model with the preset's data handling (format, pixels, labels)
"$MEGA" train --task classify --preset lra-pathfinder --data a/pathfinder32 --layers 1 --embed-dim 16 --hidden-dim 32 \
  --z-dim 8 --ffn-dim 32 --classifier-dim 16 --n-dim 4 --steps 2 --batch 4 --warmup 1 --out run > train.txt 2>&1
status $? "mega train --preset lra-pathfinder --data DIR ($(tail -n 1 train.txt))"
"$MEGA" eval --model run --data a/pathfinder32 > eval.txt 2>&1
grep -q "accuracy .* 30 examples" eval.txt
status $? "mega eval on the directory ($(tail -n 1 eval.txt))"
rm $D/imgs/0/sample_4.png
expect_error "a metadata line naming a missing image" "sample_4.png' does not exist" "$MEGA" eval --model run --data a/pathfinder32
finish
