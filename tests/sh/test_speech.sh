#!/bin/sh
# Raw speech from the command line (docs/speech.md):
#   * a Speech Commands directory (written here with Python's wave module: tones, one folder per
#     word, validation_list.txt / testing_list.txt, _background_noise_) trains with --preset sc-raw
#     on a tiny model, takes its validation clips from the list (also those of --valid DIR), eval
#     reads the test clips, predict
#     --audio prints a word and a probability; short clips are dropped, or kept with --pad-short;
#   * hostile inputs fail with one line: stereo, 8 kHz, truncated, not audio, too long, a list
#     naming a missing clip, no .wav at all, clips longer than --seq-len;
#   * with espeak-ng: `mega speech-synth` writes the layout, whose test speakers never speak in the
#     training clips, and the reader reads it.
# A build without libsndfile skips (NOTE); without espeak-ng only the synthesis part is skipped.
# Usage: sh tests/sh/test_speech.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
need_tool
in_temp_dir speech

"$MEGA" speech-synth --out probe --per-word 1 --quiet >probe.out 2>probe.err
if grep -q 'writes no audio' probe.err; then
  echo "NOTE test_speech skipped: this build has no libsndfile"
  finish
fi
PY=$(command -v python3 || command -v /usr/bin/python3)
[ -n "$PY" ] || { echo "NOTE test_speech skipped: no python3 to write the WAV files"; finish; }

# a corpus of tones: "yes" low, "no" high; speaker sN; s4 is the test speaker, s3 validation
"$PY" - <<'EOF'
import math, os, random, struct, wave
random.seed(1)
def wav(path, n, f, rate=16000, ch=1, cut=None):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fr = b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * f * i / rate) + random.gauss(0, 300))) * ch
                  for i in range(n))
    w = wave.open(path, "wb"); w.setnchannels(ch); w.setsampwidth(2); w.setframerate(rate); w.writeframes(fr); w.close()
    if cut:
        d = open(path, "rb").read(); open(path, "wb").write(d[:cut])
val, test = [], []
for word, f in (("yes", 300), ("no", 1200)):
    for s in range(5):
        for k in range(2):
            name = f"{word}/s{s}_nohash_{k}.wav"
            wav("sc/" + name, 16000, f * (1 + 0.05 * s))
            (val if s == 3 else test if s == 4 else []).append(name)
wav("sc/yes/short_nohash_0.wav", 12000, 300)
wav("sc/_background_noise_/noise.wav", 48000, 50)
open("sc/validation_list.txt", "w").write("\n".join(val) + "\n")
open("sc/testing_list.txt", "w").write("\n".join(test) + "\n")
wav("bad/stereo.wav", 16000, 300, ch=2)
wav("bad/r8k.wav", 8000, 300, rate=8000)
wav("bad/cut.wav", 16000, 300, cut=20000)
wav("bad/long.wav", 17000, 300)
open("bad/junk.wav", "wb").write(b"RIFF\x10\x00\x00\x00WAVEjunk-not-audio")
EOF
status $? "python3 writes the Speech Commands layout"

tiny="--layers 1 --embed-dim 8 --hidden-dim 16 --z-dim 4 --ffn-dim 16 --n-dim 2 --batch 4 --threads 1 --quiet"
# shellcheck disable=SC2086
"$MEGA" train --task classify --preset sc-raw --data sc --out run --steps 2 --eval-every 2 $tiny >train.out 2>&1
status $? "train --preset sc-raw on a Speech Commands directory exits 0"
"$MEGA" info --model run >info.txt 2>&1
check "the model stores per-index input statistics (input-norm 16000), chunk 1000, truncation 1000, laplace, batchnorm" \
  sh -c 'grep -q "input-norm 16000" info.txt && grep -q "chunk-size 1000" info.txt && grep -q "truncation 1000" info.txt &&
         grep -q "attention-activation laplace" info.txt && grep -q "norm-type batchnorm" info.txt'
"$MEGA" eval --model run --data sc >eval.txt 2>&1
check "eval reads the 4 test clips (testing_list.txt)" grep -q '(./4)' eval.txt
"$MEGA" predict --model run --audio sc/no/s0_nohash_0.wav >pred.txt 2>&1
check "predict --audio prints the clip, a word and a probability" \
  grep -qE '^sc/no/s0_nohash_0.wav	[a-z]+	(0|1)\.[0-9]{4}$' pred.txt
"$MEGA" predict --model run --audio sc/yes >pred_dir.txt 2>&1
check "predict --audio DIR prints one line per clip (11)" test "$(wc -l <pred_dir.txt)" -eq 11
# shellcheck disable=SC2086
"$MEGA" train --task classify --preset sc-raw --data sc --out run2 --steps 1 --pad-short $tiny >pad.out 2>&1
# shellcheck disable=SC2086
"$MEGA" train --task classify --preset sc-raw --data sc --out run3 --steps 1 $tiny >drop.out 2>&1
check "the short clip is dropped (12 training clips), or zero-padded with --pad-short (13)" \
  sh -c 'grep -q ": 12 training examples" drop.out && grep -q ": 13 training examples" pad.out'

# --valid DIR: that directory's validation_list.txt clips (here 2 of its 20), not its training clips
cp -r sc scv && printf 'yes/s3_nohash_0.wav\nno/s3_nohash_1.wav\n' >scv/validation_list.txt
# shellcheck disable=SC2086
"$MEGA" train --task classify --preset sc-raw --data sc --valid scv --out runv --steps 1 $tiny >valid.out 2>&1
check "--valid DIR validates on its validation_list.txt (2 clips)" grep -q ": 12 training examples (.*), 2 validation examples" valid.out
rm scv/validation_list.txt
# shellcheck disable=SC2086
expect_error "--valid DIR without validation_list.txt" "no validation clips of 16,000 samples (no clip named by its validation_list.txt)" \
  "$MEGA" train --task classify --preset sc-raw --data sc --valid scv --out runv2 --steps 1 $tiny

for f in stereo:channels r8k:"8000 Hz" cut:truncated junk:"audio file" long:"more than the 16000"; do
  name=${f%%:*} pat=${f#*:}
  expect_error "predict --audio refuses bad/$name.wav" "$pat" "$MEGA" predict --model run --audio "bad/$name.wav"
done
cp -r sc sc_st && cp bad/stereo.wav sc_st/yes/s0_nohash_9.wav
# shellcheck disable=SC2086
expect_error "train refuses a stereo clip in the corpus" "2 channels" "$MEGA" train --task classify --preset sc-raw --data sc_st --out x $tiny
cp -r sc sc_miss && echo "no/gone_nohash_0.wav" >>sc_miss/testing_list.txt
# shellcheck disable=SC2086
expect_error "a split list naming a missing clip" "gone_nohash_0.wav" "$MEGA" train --task classify --preset sc-raw --data sc_miss --out x $tiny
mkdir -p empty/yes
# shellcheck disable=SC2086
expect_error "a directory without .wav files" "no .wav files" "$MEGA" train --task classify --preset sc-raw --data empty --out x $tiny
# shellcheck disable=SC2086
expect_error "clips longer than --seq-len" "longer than the model's length" \
  "$MEGA" train --task classify --preset sc-raw --data sc --out x --seq-len 8000 $tiny

if command -v espeak-ng >/dev/null 2>&1; then
  "$MEGA" speech-synth --out syn --per-word 3 --seed 5 --quiet >syn.out 2>&1
  status $? "speech-synth writes a corpus with espeak-ng"
  check "30 clips in 10 word folders, with both split lists" \
    sh -c 'test "$(ls syn/*/*.wav | wc -l)" -eq 30 && test -f syn/validation_list.txt && test -f syn/testing_list.txt'
  # speakers: the name before _nohash_; no test or validation speaker in the training clips
  ls syn/*/*.wav | sed 's|^syn/||' | sort >all.txt
  sort syn/validation_list.txt syn/testing_list.txt >held.txt
  comm -23 all.txt held.txt | sed 's|.*/||; s|_nohash_.*||' | sort -u >train_spk.txt
  sed 's|.*/||; s|_nohash_.*||' held.txt | sort -u >held_spk.txt
  check "no held-out speaker speaks in the training clips" test -z "$(comm -12 train_spk.txt held_spk.txt)"
  "$PY" -c "import wave,sys; w=wave.open('$(head -n 1 all.txt | sed 's|^|syn/|')'); sys.exit(not (w.getframerate()==16000 and w.getnchannels()==1 and w.getsampwidth()==2 and w.getnframes()==16000))"
  status $? "a synthesized clip is 16 kHz mono 16-bit, 16,000 samples"
  # shellcheck disable=SC2086
  "$MEGA" train --task classify --preset sc-raw --data syn --out synrun --steps 1 $tiny >syn_train.out 2>&1
  status $? "train reads the synthesized corpus"
  # the whole path: a held-out (test speaker) clip through the trained model
  clip=syn/$(head -n 1 syn/testing_list.txt)
  "$MEGA" predict --model synrun --audio "$clip" >syn_pred.txt 2>&1
  check "predict --audio classifies a held-out synthesized clip as one of the ten words" \
    grep -qE "^$clip	(yes|no|up|down|left|right|on|off|stop|go)	(0|1)\.[0-9]{4}\$" syn_pred.txt
  "$MEGA" speech-synth --out syn2 --n-words 2 --per-word 2 --seed 5 --quiet >syn2.out 2>&1
  check "speech-synth --n-words 2 writes the first two words only (yes, no)" \
    sh -c 'test "$(ls syn2 | grep -v _list.txt | tr "\n" " ")" = "no yes " && test "$(ls syn2/*/*.wav | wc -l)" -eq 4'
else
  echo "NOTE test_speech: speech-synth part skipped (espeak-ng not installed)"
fi
finish
