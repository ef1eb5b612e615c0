#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ of the libFuzzer targets (fuzz/README.md).

    python3 fuzz/make_corpus.py [path/to/mega]      (default build/mega)

Each corpus holds small valid inputs and slightly broken ones. The model checkpoints are written
by the tool itself (`mega train` with a tiny model for one step), the other seeds come from the
test fixtures or are written here. The committed corpora are what this script wrote; rerunning it
replaces the files it names (the trained weights differ from run to run only in their values) and
leaves the others, e.g. reproducers of fixed bugs (fuzz/corpus/<target>/bug-*), in place.
"""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEGA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "mega")
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors ---------------------------------------------------------------------------------
def st_file(tensors, meta=None, pad=0):
    """tensors: [(name, dtype, shape, bytes)] -> a safetensors image"""
    hdr, off, body = {}, 0, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, data in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        body += data
    h = json.dumps(hdr, separators=(",", ":")).encode() + b" " * pad
    return struct.pack("<Q", len(h)) + h + body


def st_raw(header, body):
    """an image with this exact header text"""
    h = header.encode()
    return struct.pack("<Q", len(h)) + h + body


def st_parse(img):
    n = struct.unpack("<Q", img[:8])[0]
    return json.loads(img[8:8 + n]), img[8 + n:]


def st_with_meta(img, meta):
    """the same tensors with __metadata__ replaced"""
    hdr, body = st_parse(img)
    hdr = dict(hdr)
    hdr["__metadata__"] = meta
    h = json.dumps(hdr, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + body


def safetensors_seeds(models):
    f32 = struct.pack("<3f", 1.0, -2.5, 3.25)
    every = [("f32", "F32", [3], f32), ("f64", "F64", [2], struct.pack("<2d", 0.5, -1e300)),
             ("f16", "F16", [4], struct.pack("<4H", 0x3c00, 0x0001, 0x7c00, 0xfe00)),
             ("bf16", "BF16", [2], struct.pack("<2H", 0x3f80, 0xff80)),
             ("i64", "I64", [2], struct.pack("<2q", -5, 1 << 40)), ("i32", "I32", [1, 2], struct.pack("<2i", 7, -7)),
             ("i16", "I16", [2], struct.pack("<2h", -3, 3)), ("i8", "I8", [2], b"\x80\x7f"), ("u8", "U8", [3], b"\x00\x01\xff"),
             ("bool", "BOOL", [2], b"\x00\x02"), ("scalar", "F32", [], struct.pack("<f", 7.0)), ("empty", "F32", [0, 3], b"")]
    good = st_file(every, {"config": "{}", "k": "v"})
    put("safetensors", "every-dtype.safetensors", good)
    put("safetensors", "padded-header.safetensors", st_file(every[:2], None, pad=5))
    put("safetensors", "truncated.safetensors", good[:-3])
    put("safetensors", "header-too-long.safetensors", struct.pack("<Q", len(good)) + good[8:])
    put("safetensors", "gap.safetensors", st_file([("a", "F32", [1], f32[:4])]) + b"\0\0\0\0")
    put("safetensors", "overlap.safetensors",
        st_raw('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', f32[:4]))
    put("safetensors", "duplicate-name.safetensors",
        st_raw('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\1\2"))
    put("safetensors", "bad-dtype.safetensors", st_file([("a", "F8", [1], b"\1")]))
    put("safetensors", "huge-shape.safetensors", st_file([("a", "F32", [1 << 40, 1 << 40], b"")]))
    put("safetensors", "not-json.safetensors", struct.pack("<Q", 6) + b'{"a":1' + b"\0")
    for name, img in models.items():
        put("safetensors", name + ".safetensors", img)


# ---- models (mega train) ---------------------------------------------------------------------------
TINY = ["--steps", "1", "--embed-dim", "4", "--z-dim", "4", "--hidden-dim", "8", "--n-dim", "2", "--ffn-dim", "8",
        "--chunk-size", "8", "--max-positions", "16", "--seq-len", "16", "--batch", "2", "--eval-every", "0",
        "--quiet", "-t", "1"]


def train(tmp, name, args, data, valid=True):
    d = os.path.join(tmp, name)
    with open(d + ".data", "w") as f:
        f.write(data)
    cmd = [MEGA, "train", "--data", d + ".data", "--out", d] + (["--valid", d + ".data"] if valid else []) + TINY + args
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        return f.read()


def model_seeds(tmp):
    text = "The quick brown fox jumps over the lazy dog. " * 8
    cls_tsv = "label\ttext\n0\thello world\n1\tgoodbye now\n0\thi there\n1\tsee you\n"
    pairs = "Haus\thouse\nKatze\tcat\nHund\tdog\nBaum\ttree\n"
    m = {
        "lm-mega": train(tmp, "lm", ["--layers", "1", "--tie-embeddings"], text),
        "lm-mha": train(tmp, "lmmha", ["--layers", "1", "--tie-embeddings", "--mixer", "mha", "--heads", "2", "--pos", "rope"], text),
        "lm-aft": train(tmp, "lmaft", ["--layers", "1", "--tie-embeddings", "--mixer", "aft-tw", "--heads", "2", "--max-len", "16",
                                       "--norm-type", "rmsnorm"], text),
        "cls": train(tmp, "cls", ["--task", "classify", "--layers", "1", "--classifier-dim", "4"], cls_tsv),
        "s2s": train(tmp, "s2s", ["--task", "translate", "--encoder-layers", "1", "--decoder-layers", "1",
                                  "--share-all-embeddings"], pairs),
    }
    for name, img in m.items():
        put("model_load", name + ".safetensors", img)
        meta = st_parse(img)[0]["__metadata__"]
        put("config_json", name + ".json", meta["config"])
    # broken: a config asking for more layers than the tensors, a config of another kind, no config
    hdr, _ = st_parse(m["lm-mega"])
    meta = dict(hdr["__metadata__"])
    cfg = json.loads(meta["config"])
    cfg["layers"] = 2
    put("model_load", "lm-more-layers.safetensors", st_with_meta(m["lm-mega"], dict(meta, config=json.dumps(cfg))))
    cfg["layers"], cfg["embed-dim"], cfg["vocab-size"] = 1024, 65536, 1 << 24
    put("model_load", "lm-huge-config.safetensors", st_with_meta(m["lm-mega"], dict(meta, config=json.dumps(cfg))))
    put("model_load", "cls-as-lm.safetensors", st_with_meta(m["cls"], dict(meta)))
    put("model_load", "no-config.safetensors", st_with_meta(m["lm-mega"], {"format": "mega 0.1.0"}))
    put("model_load", "truncated.safetensors", m["s2s"][:-16])
    # the tool's vocabulary and class metadata
    for name in ("cls", "s2s"):
        meta = st_parse(m[name])[0]["__metadata__"]
        put("vocab_json", name + "-vocab.json", meta["vocab"])
        if "classes" in meta:
            put("vocab_json", name + "-classes.json", meta["classes"])
    return m


def official_seeds():
    """configs with the official fairseq argument names (the test fixtures' case.json)"""
    fx = os.path.join(ROOT, "tests", "fixtures")
    for sub, case in (("official", "cls_sparse_pad_mp_head1_layernorm_pre_c8_L36"), ("s2s", "s2s_softmax_simple_layernorm_pre_encc8_ragged_sep"),
                      ("generated", "lm_softmax_rotary_layernorm_pre_c8_L24_untied")):
        p = os.path.join(fx, sub, case, "case.json")
        if os.path.exists(p):
            with open(p) as f:
                put("config_json", "official-" + sub + ".json", json.dumps(json.load(f)["config"]))
    put("config_json", "broken-type.json", '{"model":"mega_lm","layers":"4","embed-dim":1.5}')
    put("config_json", "broken-range.json", '{"model":"mega_lm","layers":0,"chunk-size":0,"mixer":"nope"}')
    put("config_json", "s2s-no-encoder.json", '{"model":"mega_s2s","decoder":{}}')
    put("config_json", "not-object.json", '[1,2,3]')


# ---- data ----------------------------------------------------------------------------------------------
def data_seeds():
    # text: byte 0 B-1, byte 1 T, byte 2 seed
    put("text", "short.txt", b"\x01\x08\x00" + b"hello world, hello fuzzer\n")
    put("text", "window-too-long.txt", b"\x00\x40\x01" + b"tiny")
    put("text", "binary.txt", b"\x03\x02\x07" + bytes(range(256)))
    # classification TSVs: byte 0 format|flags, byte 1 max_len, byte 2 max_examples
    listops = "Source\tTarget\n( ( [MAX 2 9 ] ) 3 ]\t9\n[MIN 1 [SM 2 3 ] ]\t1\n\n[MED 4 5 6 ] foo\t5\n"
    text = "label\ttext\n0\tfirst text\n1\tsecond one\r\nneg\tthird\n"
    pairs = "label\ttext1\ttext2\n1\tabc\tabd\n0\tx\ty\n"
    aan = "1\tid1\tid2\tleft text\tright text\n0\ta\tb\tc\td\n"
    put("dataset", "listops-auto.tsv", b"\x00\x00\x00" + listops.encode())
    put("dataset", "listops-parens.tsv", b"\x05\x04\x00" + listops.encode())
    put("dataset", "text.tsv", b"\x02\x00\x00" + text.encode())
    put("dataset", "text-given-classes.tsv", b"\x1a\x03\x02" + text.encode())
    put("dataset", "pairs.tsv", b"\x03\x00\x00" + pairs.encode())
    put("dataset", "pairs-aan-auto.tsv", b"\x10\x02\x00" + aan.encode())
    put("dataset", "listops-no-header.tsv", b"\x01\x00\x00" + b"[MAX 1 ]\t1\n")
    put("dataset", "listops-bad-target.tsv", b"\x01\x00\x00" + b"Source\tTarget\n[MAX 1 ]\t12\n")
    put("dataset", "text-empty-field.tsv", b"\x02\x00\x00" + b"0\t\n")
    put("dataset", "text-one-field.tsv", b"\x02\x00\x00" + b"just text\n")
    # IDX: bytes 0-1 where the images file ends, byte 2 options, byte 3 max_examples
    rows, cols, n = 2, 3, 3
    images = struct.pack(">IIII", 0x803, n, rows, cols) + bytes(range(n * rows * cols))
    labels = struct.pack(">II", 0x801, n) + b"\x00\x01\x09"
    put("idx", "three-images.idx", struct.pack("<H", len(images)) + b"\x00\x00" + images + labels)
    put("idx", "reals-maxlen.idx", struct.pack("<H", len(images)) + b"\x05\x02" + images + labels)
    put("idx", "swapped.idx", struct.pack("<H", len(labels)) + b"\x00\x00" + labels + images)
    put("idx", "truncated.idx", struct.pack("<H", len(images) - 2) + b"\x00\x00" + images[:-2] + labels)
    put("idx", "label-count.idx", struct.pack("<H", len(images)) + b"\x00\x00" + images + labels[:-1])
    # translation TSV: 4 option bytes
    tsv = ("\ufeffHaus\thouse\r\nKatze\tcat\n\nno tab here\nA\tB\tC\n\tempty source\nempty target\t\n"
           "gro\u00df\tbig\nbad \xff\tutf8\nlong source sentence here\tx\n").encode("utf-8", "surrogateescape")
    tsv = tsv.replace("\xff".encode(), b"\xff")
    put("s2s_data", "mixed.tsv", b"\x00\x00\x00\x20" + tsv)
    put("s2s_data", "limits.tsv", b"\x08\x08\x43\x05" + tsv)
    put("s2s_data", "strict.tsv", b"\x00\x00\x10\x10" + b"a\tb\nc\td\n")
    put("s2s_data", "sentences.tsv", b"\x00\x00\xa3\x02" + b"a\tb\ncc\tdd\neee\tf\ng\thhhh\n")
    put("s2s_data", "no-newline.tsv", b"\x00\x00\x60\x01" + b"x\ty")
    # mega translate input lines: byte 0 max_len
    put("s2s_tokenize", "line.txt", b"\x00Guten Morgen\n")
    put("s2s_tokenize", "crlf.txt", b"\x05ab\r\n")
    put("s2s_tokenize", "too-long.txt", b"\x03abcdef")
    put("s2s_tokenize", "bad-utf8.txt", b"\x00ok \xc3\x28\n")
    put("s2s_tokenize", "empty.txt", b"\x00\n")


def fairseq_bin_seeds():
    """fairseq binarized datasets (byte 0: 0 = a dataset read without a limit, 0x10 = with the id
    limit 8; bytes 1-2 where the .idx ends) and dict.txt files (byte 0: 1 = word unit, 3 = byte)"""
    fx = os.path.join(ROOT, "tests", "fixtures", "fairseq-bin")

    def pair(name):
        idx = open(os.path.join(fx, name + ".idx"), "rb").read()
        return idx, open(os.path.join(fx, name + ".bin"), "rb").read()

    for name in ("mmap", "cached"):
        idx, bin_ = pair(name)
        put("fairseq_bin", name + ".bin", b"\x00" + struct.pack("<H", len(idx)) + idx + bin_)
    idx, bin_ = pair("mmap_i64")  # the .bin cut short: the later sequences point past its end
    put("fairseq_bin", "mmap-i64-short.bin", b"\x00" + struct.pack("<H", len(idx)) + idx + bin_[:64])
    idx, bin_ = pair("byte_lm/eval")
    put("fairseq_bin", "byte-lm-limit.bin", b"\x10" + struct.pack("<H", len(idx)) + idx + bin_)
    put("fairseq_bin", "dict-word.bin", b"\x01" + open(os.path.join(fx, "dict.txt"), "rb").read()[:200])
    put("fairseq_bin", "dict-byte-overwrite.bin", b"\x03" + b"32 9\r\n101 4\n32 0 #fairseq:overwrite\nbad\n")


def freedict_seeds():
    entries = [("00-database-short", "\n00-database-short\nTest dictionary\n"),
               ("haus", "Haus /haʊs/ <n, neut>\nhouse <n>, home <n>\n   Synonym: {Heim}\n\n see: {Häuser}\n"),
               ("aal", "Aal /ˈɑːl/ <masc, n, sg>\n         Note: a fish\n [cook.] eel <n>\n      \"Aal blau\"  - eel au bleu\n"),
               ("plan", "plan /plɑ̃/ <n, masc>\n1. map\n2. design, plan\n"),
               ("dollar-zeichen", "Dollar-Zeichen /dɔlˈɑːɾ/ ($) <neut, n, sg>\ndollar sign <n>$\n"),
               ("kennzeichen", "Kennzeichen <neut>\nregistration number <n> [Br.] VRN,  /vrn/ , licence number <n>\n"),
               ("ich denke", "Ich denke, also bin ich. /ɪç/\nI think, therefore I am.\n"),
               ("grüß dich", "Grüß dich! <int>\n [Bayr.] Hello! <int>, Hi! <int> [Br.] , Howzit!\n"),
               ("bank", "Bank /baŋk/ <fem, n, sg>\nbench <n>\n")]
    a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

    def b64(v):
        s = ""
        while True:
            s = a[v % 64] + s
            v //= 64
            if v == 0:
                return s
    text, index = b"", ""
    for hw, body in entries:
        t = body.encode()
        index += "%s\t%s\t%s\n" % (hw, b64(len(text)), b64(len(t)))
        text += t
    index += "haus\t%s\t%s\n" % (b64(len(entries[0][1].encode())), b64(10))  # a second headword, cut short
    idx = index.encode()
    put("freedict", "plain.bin", b"\x00" + idx + b"\x00" + text)
    put("freedict", "gzip-identical-maxlen.bin", bytes([1 | 4 | (8 << 3)]) + idx + b"\x00" + text)
    put("freedict", "dz-raw-gzip.bin", b"\x02" + idx + b"\x00" + gzip.compress(text, mtime=0))
    put("freedict", "gz-not-gzip.bin", b"\x03" + idx + b"\x00" + text)
    put("freedict", "bad-offset.bin", b"\x00" + b"x\tA\tB\nfar\t/////\tB\n" + b"\x00" + b"xy\nz\n")
    put("freedict", "bad-index.bin", b"\x00" + b"no tabs\n" + b"\x00" + text[:40])
    put("freedict", "brackets.bin", b"\x00" + b"w\tA\tBA\n" + b"\x00" + ("w <a [b {c (d /e/ f) g} h] i>\n" + "x " * 9 + "(y, z), q\n").encode()[:64])


def metrics_seeds():
    # 5 option bytes (byte 3 the separator '|', byte 4 references - 1), then fields
    put("metrics", "default.txt", b"\x00\x03\x02|\x00The cat sat on the mat.|The cat is on the mat.|A dog.|A dog!")
    put("metrics", "two-refs.txt", b"\x00\x03\x02|\x01It is a guide to action.|It is a guide to action that ensures.|It is the guiding principle.")
    put("metrics", "chrfpp-floor.txt", b"\x04\x63\x42|\x00Hello, world &amp; 3.5-4 <skipped>!|hello world & 3.5 - 4 !")
    put("metrics", "none-addk-eff.txt", b"\xcf\xf0\x30\n\x02x y z\nx\nz y x\n\n")
    put("metrics", "utf8.txt", "\x00\x05\x01|\x00Größe ändern – “quote” …|Grösse ändern - \"quote\" ...".encode() + b"|\xff\xfe bad|\xc3")
    cases = os.path.join(ROOT, "tests", "fixtures", "metrics", "sacrebleu_cases.txt")
    if os.path.exists(cases):
        segs = []
        with open(cases, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                if line.startswith("seg ") or line.startswith("ref "):
                    segs.append(line[4:].rstrip("\n"))
        body = "\x1f".join(segs[:40]).encode("utf-8", "surrogateescape")
        put("metrics", "sacrebleu-cases.txt", b"\x00\x03\x02\x1f\x00" + body)


def cli_seeds():
    args = [["--steps", "100", "--embed-dim=64", "--mixer", "mha", "--heads", "4", "--pos", "rope"],
            ["--prenorm=false", "-t", "2", "--quiet", "--no-resume", "--resume=true", "--lr", "1e-3"],
            ["--schedule", "linear", "--kind=bb", "--temperature", "0.5", "--seed", "-3", "--scale=1e308"],
            ["--help"], ["--steps"], ["--steps", "1.5"], ["--nope"], ["positional"], ["--chunk-size", "-1", "--layers", "3"],
            ["-m", "run", "-p", "The ", "-n", "300", "--data=", "--attention-activation", "laplace"]]
    for i, a in enumerate(args):
        put("cli", "args%02d.bin" % i, b"\x00".join(x.encode() for x in a))


def vocab_seeds():
    lo = ["<pad>", "<unk>"] + [str(i) for i in range(10)] + ["[MIN", "[MAX", "[MED", "[SM", "]", "(", ")", "[FIRST", "[LAST"]
    put("vocab_json", "listops.json", json.dumps({"kind": "listops", "size": 21, "pad": 0, "unk": 1, "keep_parens": False, "tokens": lo}))
    put("vocab_json", "pixels.json", '{"kind":"pixels","size":257,"pad":256,"real":true,"mean":0.5,"std":0.25}')
    put("vocab_json", "pixels-bad-std.json", '{"kind":"pixels","size":257,"pad":256,"real":true,"mean":0.5,"std":0}')
    put("vocab_json", "bytes-wrong-size.json", '{"kind":"bytes","size":300,"pad":256}')
    put("vocab_json", "classes.json", '["neg","pos","1.0","\\u00e9"]')
    put("vocab_json", "classes-duplicate.json", '["a","b","a"]')
    put("vocab_json", "classes-not-strings.json", '["a",1]')


def bpe_seeds():
    # merge lists as a subword model's checkpoint stores them (metadata "bpe"), and broken ones
    put("bpe", "three.txt", "mega-bpe 1 3\n97 98\n32 258\n258 258\n")
    put("bpe", "empty.txt", "mega-bpe 1 0\n")
    put("bpe", "words.txt", "mega-bpe 1 6\n116 104\n258 101\n32 259\n101 114\n119 111\n262 114\n")
    put("bpe", "forward-ref.txt", "mega-bpe 1 2\n97 259\n97 98\n")
    put("bpe", "pad.txt", "mega-bpe 1 1\n256 97\n")
    put("bpe", "cut.txt", "mega-bpe 1 2\n97 98\n99")
    # two findings of the fuzzer: a leading zero (must not read: it would not write back the same)
    # and a repeated merge (its error message once read the freed list)
    put("bpe", "leading-zero.txt", open(os.path.join(OUT, "bpe", "leading-zero.txt"), "rb").read()
        if os.path.exists(os.path.join(OUT, "bpe", "leading-zero.txt")) else "mega-bpe 1 2\n116 124\n058 101\n")
    put("bpe", "repeat.txt", "mega-bpe 1 2\n116 104\n116 104\n")


def fnv1a64(b):
    # mega_fnv1a64 (include/mega_data.h), with its offset basis
    h = 1469598103934665603
    for c in b:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def manifest_seeds():
    # fuzz_manifest.c: byte 0 says which of generation 2's files exist (bit 0 model, bit 1 state);
    # their contents are fixed there, so these manifests can name them correctly
    m2, s2 = b"model bytes of generation 2", b"state bytes of generation 2"

    def man(step=2, mfile="step-00000002.model.safetensors", sfile="step-00000002.state.safetensors",
            mb=len(m2), ms=None, sb=len(s2), ss=None, extra=None):
        d = {"format": "mega-checkpoint 1", "step": step, "task": "lm",
             "model": {"file": mfile, "bytes": mb, "fnv1a64": "%016x" % (fnv1a64(m2) if ms is None else ms)},
             "state": {"file": sfile, "bytes": sb, "fnv1a64": "%016x" % (fnv1a64(s2) if ss is None else ss)},
             "train": {"steps": 10, "lr": 0.002, "schedule": "cosine"}}
        if extra:
            d.update(extra)
        return json.dumps(d).encode()
    put("manifest", "complete.bin", b"\x03" + man())
    put("manifest", "no-state-file.bin", b"\x01" + man())
    put("manifest", "no-model-file.bin", b"\x02" + man())
    put("manifest", "wrong-checksum.bin", b"\x03" + man(ms=1))
    put("manifest", "wrong-size.bin", b"\x03" + man(sb=len(s2) + 1))
    put("manifest", "other-step.bin", b"\x03" + man(step=7))
    put("manifest", "path-outside.bin", b"\x03" + man(mfile="../step-00000002.model.safetensors"))
    put("manifest", "absolute-path.bin", b"\x03" + man(sfile="/etc/passwd"))
    put("manifest", "generation-1-files.bin", b"\x03" + man(mfile="step-00000001.model.safetensors"))
    put("manifest", "bad-format.bin", b"\x03" + man(extra={"format": "mega-checkpoint 9"}))
    put("manifest", "truncated.bin", b"\x03" + man()[:60])
    put("manifest", "not-json.bin", b"\x03step 2")


def main():
    if not os.access(MEGA, os.X_OK):
        sys.exit("make_corpus.py: %s is not built (make, or give the path of mega)" % MEGA)
    tmp = tempfile.mkdtemp(prefix="mega_corpus_")
    try:
        models = model_seeds(tmp)
        safetensors_seeds(models)
        official_seeds()
        data_seeds()
        fairseq_bin_seeds()
        freedict_seeds()
        metrics_seeds()
        cli_seeds()
        vocab_seeds()
        bpe_seeds()
        manifest_seeds()
    finally:
        shutil.rmtree(tmp)
    total = 0
    for d, _, files in os.walk(OUT):
        total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
    print("fuzz/corpus: %d bytes" % total)


if __name__ == "__main__":
    main()
