#!/bin/sh
# scripts/convert_fairseq.py on an official-format sc_raw checkpoint (tests/fixtures/sc_raw/
# checkpoint: a tiny SCRawModel with random weights and running statistics, pickled as fairseq
# saves checkpoints, with the official eval-mode logits; tests/ref/ref_sc_raw.py made them):
#   * without statistics the converted model's logits on the same (already normalised) inputs
#     match the official ones within 1e-4 of their largest magnitude;
#   * with --speech-dir the per-index statistics of the directory's training clips are stored,
#     and the model on raw clips equals the model without statistics on (x - mean) / (std + 1e-5);
#   * a non-speech directory or a corrupt checkpoint is refused with one line.
# Needs /usr/bin/python3 with torch and numpy (skips without).
# Usage: sh tests/sh/test_sc_convert.sh [BUILD_DIR]
. "$(dirname "$0")/lib.sh"
need_tool
need_torch test_sc_convert
HERE=$ROOT
in_temp_dir sc_convert
CK="$HERE/tests/fixtures/sc_raw/checkpoint"

"$PY" "$HERE/scripts/convert_fairseq.py" --checkpoint "$CK/sc_raw_tiny.pt" --out plain >conv.out 2>&1
status $? "convert_fairseq.py converts the sc_raw checkpoint"
"$MEGA" info --model plain >info.txt 2>&1
check "its config: 2 layers, laplace, batchnorm pre-norm, chunk 8, 10 classes, no input statistics" \
  sh -c 'grep -q "layers 2" info.txt && grep -q "attention-activation laplace" info.txt && grep -q "input-norm 0" info.txt &&
         grep -q "chunk-size 8" info.txt && grep -q "classes 10" info.txt'

# a Speech Commands directory of tones for the statistics (16,000 samples a clip)
"$PY" - <<'PYEOF'
import math, os, random, struct, wave
random.seed(2)
val = []
for word in ("yes", "no", "up"):
    for k in range(4):
        os.makedirs(f"sc/{word}", exist_ok=True)
        w = wave.open(f"sc/{word}/s{k}_nohash_0.wav", "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
        w.writeframes(b"".join(struct.pack("<h", int(6000 * math.sin(i * (0.01 + 0.003 * k)) + random.gauss(0, 500)))
                               for i in range(16000)))
        w.close()
        if k == 3:
            val.append(f"{word}/s{k}_nohash_0.wav")
open("sc/validation_list.txt", "w").write("\n".join(val) + "\n")
PYEOF
"$PY" "$HERE/scripts/convert_fairseq.py" --checkpoint "$CK/sc_raw_tiny.pt" --speech-dir sc --out stats >conv2.out 2>&1
status $? "convert_fairseq.py --speech-dir stores the statistics"

PYTHONPATH="$HERE/python" MEGA_LIB="$B/libmega.so" OMP_NUM_THREADS=1 "$PY" - "$CK/expected.safetensors" <<'PYEOF' >py.out 2>&1
import json, struct, sys, wave
import numpy as np
import mega

def st_load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k != "__metadata__":
            s, e = v["data_offsets"]
            out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype="<f4").reshape(v["shape"])
    return out

ex = st_load(sys.argv[1])
m = mega.load("plain")
got = m.logits(ex["values"])
err = np.abs(got - ex["logits"]).max() / np.abs(ex["logits"]).max()
print(f"plain rel err {err:.2e}")
ok1 = err <= 1e-4
# the statistics, computed here on their own from the training clips (not in the list)
xs = []
for word in ("yes", "no", "up"):
    for k in range(3):
        with wave.open(f"sc/{word}/s{k}_nohash_0.wav") as r:
            xs.append(np.frombuffer(r.readframes(16000), dtype="<i2") / 32768.0)
xs = np.array(xs)
mean, std = xs.mean(0), xs.std(0, ddof=1) + 1e-5
raw = (np.random.RandomState(3).randn(3, 32) * 0.2).astype(np.float32)
norm = ((raw - mean[:32]) / std[:32]).astype(np.float32)
a, b = mega.load("stats").logits(raw), m.logits(norm)
err2 = np.abs(a - b).max() / np.abs(b).max()
print(f"stats rel err {err2:.2e}")
sys.exit(0 if ok1 and err2 <= 1e-4 else 1)
PYEOF
status $? "converted logits match the official ones, and the stored statistics normalise raw inputs ($(tr '\n' ' ' <py.out))"

mkdir -p notsc
"$PY" "$HERE/scripts/convert_fairseq.py" --checkpoint "$CK/sc_raw_tiny.pt" --speech-dir notsc --out bad >bad.out 2>&1
rc=$?
check "a directory without clips is refused with one line (exit 2)" \
  sh -c "[ $rc -eq 2 ] && [ \$(wc -l <bad.out) -eq 1 ] && grep -q 'convert_fairseq: error: .*0 training clips' bad.out && [ ! -e bad/model.safetensors ]"
head -c 2000 "$CK/sc_raw_tiny.pt" >cut.pt
"$PY" "$HERE/scripts/convert_fairseq.py" --checkpoint cut.pt --out bad2 >bad2.out 2>&1
rc=$?
check "a truncated checkpoint is refused (exit 2, nothing written)" sh -c "[ $rc -eq 2 ] && [ ! -e bad2/model.safetensors ]"
finish
