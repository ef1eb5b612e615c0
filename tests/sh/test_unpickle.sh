#!/bin/sh
# Nothing in a checkpoint runs code (scripts/convert_fairseq.py, docs/bad-inputs.md):
#   sh tests/sh/test_unpickle.sh BUILD_DIR
# A .pt file is a pickle, which may name any callable for the unpickler to call. The converter's
# unpickler resolves only tensors, storages, plain data and inert stand-ins of fairseq classes.
#  - malicious checkpoints, each naming one callable that would leave a marker file (os.system,
#    builtins.eval, builtins.exec, builtins.open, subprocess.Popen, subprocess.check_output,
#    torch.save, numpy.save; hand-written pickles: getattr(__import__('os'), 'system')(...),
#    torch._utils._import_dotted_name('os.system')(...), collections.OrderedDict.fromkeys, and
#    state set on the class argparse.Namespace instead of an instance), in
#    the zip format of torch.save and the legacy one: each is refused with exit 2 and one line
#    naming the global, its marker is not made, and nothing is written;
#  - a TorchScript archive (code that torch.load would hand to torch.jit.load) is refused;
#  - the official-format byte LM re-saved in both formats and with protocols 2 and 4, with numpy
#    scalars and arrays, sets, bytes, a Counter, a defaultdict, a Parameter and half tensors in
#    extra_state, converts to the same model as the fixture;
#  - no script or reference generator calls torch.load or pickle.load without a restriction.
# Needs /usr/bin/python3 with torch and numpy; else a SKIP line and no checks.
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")/../.." && pwd)
FX="$HERE/tests/fixtures/fairseq/byte_lm"
CONV="$HERE/scripts/convert_fairseq.py"
need_torch test_unpickle.sh
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
mkdir "$T/f" "$T/mark"

"$PY" - "$T/f" "$T/mark" "$CONV" "$FX/model.pt" <<'EOF' >"$T/gen" 2>&1 || { bad "making the checkpoints: $(tail -3 "$T/gen")"; finish; }
import builtins, collections, importlib.util, os, pickle, subprocess, sys
import numpy as np
import torch
out, mark = sys.argv[1], sys.argv[2]


def m(name):
    return os.path.join(mark, name)


class R:
    """pickles as fn(*args): what a malicious file asks the unpickler to call"""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def ck(x):
    return {"args": None, "model": {"w": torch.zeros(2)}, "extra_state": x}


for name, obj in {
    "os_system": R(os.system, "touch " + m("os_system")),
    "eval": R(builtins.eval, f"open({m('eval')!r}, 'w')"),
    "exec": R(builtins.exec, f"open({m('exec')!r}, 'w')"),
    "open": R(builtins.open, m("open"), "w"),
    "popen": R(subprocess.Popen, ["touch", m("popen")]),
    "check_output": R(subprocess.check_output, ["touch", m("check_output")]),
    "torch_save": R(torch.save, {}, m("torch_save")),
    "numpy_save": R(np.save, m("numpy_save"), np.zeros(1)),
}.items():
    torch.save(ck(obj), os.path.join(out, name + ".pt"))
torch.save(ck(R(os.system, "touch " + m("os_system_legacy"))), os.path.join(out, "os_system_legacy.pt"),
           _use_new_zipfile_serialization=False)
# hand-written pickles (a callable that one reduction returns, called by the next) in the legacy
# format: torch.load reads the magic number, the protocol and the system info, then this pickle
s = torch.serialization
head = (pickle.dumps(s.MAGIC_NUMBER, 2) + pickle.dumps(s.PROTOCOL_VERSION, 2) +
        pickle.dumps({"protocol_version": s.PROTOCOL_VERSION, "little_endian": True,
                      "type_sizes": {"short": 2, "int": 4, "long": 4}}, 2))


def sb(t):  # SHORT_BINUNICODE
    b = t.encode()
    return b"\x8c" + bytes([len(b)]) + b


for name, payload in {
    "getattr_chain": b"c__builtin__\ngetattr\n(c__builtin__\n__import__\n(Vos\ntRVsystem\ntR(Vtouch %s\ntR." % m("getattr_chain").encode(),
    "import_dotted": b"ctorch._utils\n_import_dotted_name\n(Vos.system\ntR(Vtouch %s\ntR." % m("import_dotted").encode(),
    # BUILD on a class: slot state that sets argparse.Namespace.__repr__ = int for the whole process
    "class_build": b"cargparse\nNamespace\n(N}V__repr__\ncbuiltins\nint\nstbN.",
    "fromkeys": b"\x80\x04" + sb("collections") + sb("OrderedDict.fromkeys") + b"\x93(" + sb(m("fromkeys")) + b"\x85tR.",
}.items():
    with open(os.path.join(out, name + ".pt"), "wb") as f:
        f.write(head + payload + pickle.dumps([], 2))
torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), os.path.join(out, "torchscript.pt"))
# the fixture, re-saved with more kinds of data
spec = importlib.util.spec_from_file_location("conv", sys.argv[3])
conv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conv)
ck = conv.load_checkpoint(sys.argv[4])
extra = {"best": np.float64(1.5), "arr": np.arange(3), "set": {1, 2}, "frozen": frozenset([3]), "bytes": b"\xff\x00",
         "bytearray": bytearray(b"x"), "counter": collections.Counter("ab"), "dd": collections.defaultdict(list),
         "complex": 1j, "dtype": torch.float16, "size": torch.Size([2]), "param": torch.nn.Parameter(torch.ones(2)),
         "half": torch.zeros(2, dtype=torch.float16), "long": torch.arange(3)}
for proto in (2, 4):
    for zipped in (True, False):  # DIR/model.pt: the file name is part of the converted metadata
        d = os.path.join(out, f"good_p{proto}_{'zip' if zipped else 'legacy'}")
        os.makedirs(d)
        torch.save({"args": ck["args"], "model": ck["model"], "optimizer_history": [{"num_updates": 10}],
                    "extra_state": extra}, os.path.join(d, "model.pt"),
                   pickle_protocol=proto, _use_new_zipfile_serialization=zipped)
EOF

"$PY" "$CONV" --checkpoint "$FX/model.pt" --dict "$FX/dict.txt" --out "$T/ref" >"$T/out" 2>&1 ||
  { bad "the fixture does not convert: $(cat "$T/out")"; finish; }

# evil NAME GLOBAL: refused with exit 2 and one line naming GLOBAL; no marker, nothing written
evil() {
  rm -rf "$T/o"
  "$PY" "$CONV" --checkpoint "$T/f/$1.pt" --dict "$FX/dict.txt" --out "$T/o" >"$T/out" 2>"$T/err"; rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -qF "names $2, which a checkpoint may not name" "$T/err" &&
     [ -z "$(ls "$T/mark")" ] && [ ! -e "$T/o" ] && [ ! -s "$T/out" ]; then
    ok "$1: refused, nothing ran ($(cat "$T/err"))"
  else
    bad "$1: rc $rc, markers [$(ls "$T/mark")], stderr: $(head -3 "$T/err")"
  fi
}
evil os_system posix.system
evil os_system_legacy posix.system
evil eval builtins.eval
evil exec builtins.exec
evil open io.open
evil popen subprocess.Popen
evil check_output subprocess.check_output
evil torch_save torch.serialization.save
evil numpy_save numpy.save
evil getattr_chain builtins.getattr
evil import_dotted torch._utils._import_dotted_name
evil fromkeys collections.OrderedDict.fromkeys
evil class_build "argparse.Namespace (setting attributes of a class)"

"$PY" "$CONV" --checkpoint "$T/f/torchscript.pt" --dict "$FX/dict.txt" --out "$T/o" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "is a TorchScript archive" "$T/err" && [ ! -e "$T/o" ] &&
  ok "TorchScript archive refused: $(cat "$T/err")" || bad "TorchScript archive: rc $rc $(head -3 "$T/err")"

for g in good_p2_zip good_p2_legacy good_p4_zip good_p4_legacy; do
  rm -rf "$T/o"
  "$PY" "$CONV" --checkpoint "$T/f/$g/model.pt" --dict "$FX/dict.txt" --out "$T/o" >"$T/out" 2>&1
  [ $? -eq 0 ] && cmp -s "$T/o/model.safetensors" "$T/ref/model.safetensors" &&
    ok "$g: numpy, sets, bytes, counters, parameters in the checkpoint; the fixture's model" || bad "$g: $(cat "$T/out")"
done

# every loader of .pt or pickle files is restricted (the converter's Unpickler, or weights_only)
left=$(cd "$HERE" && grep -rnE 'torch\.load\(|pickle\.load\(' scripts python tests/ref | grep -vE 'weights_only *= *True|Unpickler')
[ -z "$left" ] && ok "no unrestricted torch.load / pickle.load in scripts, python, tests/ref" || bad "unrestricted loads: $left"
finish
