"""The checks of tests/sh/test_python.sh, run there with the files it made (not a test on its own).

Usage: python3 python_checks.py WORKDIR   (MEGA_LIB and PYTHONPATH set by the shell test)
Prints one "PASS name" / "FAIL name: why" line per check; the shell counts them.
"""
import gc
import json
import os
import resource
import sys

import numpy as np

W = sys.argv[1]
os.chdir(W)
results = []


def check(name, cond, why=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else f": {why}"), flush=True)


def raises(name, fn, want):
    """fn() must raise mega.MegaError whose message contains `want`"""
    try:
        fn()
    except mega.MegaError as e:
        check(name, want in str(e) and isinstance(e, RuntimeError), f"message {str(e)!r} lacks {want!r}")
        return
    except Exception as e:  # noqa: BLE001 - any other exception is the failure being tested
        check(name, False, f"raised {type(e).__name__}: {e}")
        return
    check(name, False, "no exception")


def cli(name):
    with open(name, "rb") as f:
        return f.read()


import mega  # noqa: E402

check("import mega uses the library under test", os.path.samefile(mega.LIB_PATH, os.environ["MEGA_LIB"]), mega.LIB_PATH)
mega.set_threads(1)

# ---- a language model: load, config, logits ---------------------------------------------------
lm = mega.load("lm")
check("load(run directory) gives an LM", isinstance(lm, mega.LM), type(lm).__name__)
info_params = int(open("info_params.txt").read())
check("num_params equals `mega info`", lm.num_params == info_params, f"{lm.num_params} != {info_params}")
cfg = lm.config
check("config is the checkpoint's config", cfg.get("model") == "mega_lm" and cfg.get("embed-dim") == 32 and
      cfg.get("chunk-size") == 32 and cfg.get("layers") == 2, json.dumps(cfg)[:200])
lm2 = mega.load("lm/model.safetensors")
check("load(model.safetensors) gives the same config", lm2.config == cfg)
lm2.close()
lm2.close()  # idempotent

held = np.frombuffer(cli("held.txt"), dtype=np.uint8).astype(np.int64)
x = np.stack([held[:100], held[100:200]])
lg = lm.logits(x)
check("logits: float32 [B, T, V]", lg.dtype == np.float32 and lg.shape == (2, 100, 257), f"{lg.dtype} {lg.shape}")
lg1 = lm.logits(held[100:200].astype(np.uint8))
check("a 1-D sequence gives [T, V], the same as its row in a batch", lg1.shape == (100, 257) and
      np.allclose(lg1, lg[1], rtol=0, atol=1e-5 * np.abs(lg).max()), f"{lg1.shape}")
# bits per byte from .logits over the whole held-out text (one forward) vs `mega eval` (streaming)
n = len(held)
lf = lm.logits(held[None, :-1])[0].astype(np.float64)
mx = lf.max(axis=1, keepdims=True)
ce = (mx[:, 0] + np.log(np.exp(lf - mx).sum(axis=1)) - lf[np.arange(n - 1), held[1:]]).mean()
bpb = ce / np.log(2)
want = float(open("eval_bpb.txt").read())
check(f"bits per byte from .logits ({bpb:.6f}) equals `mega eval` ({want:.6f})", abs(bpb - want) < 2e-5 * max(1, want))
loss = lm.loss(held[None, :-1], held[None, 1:])
check("loss(tokens, targets) is the same cross-entropy", abs(loss - ce) < 1e-5 * ce, f"{loss} vs {ce}")

# ---- generate == mega generate ----------------------------------------------------------------
prompt = cli("prompt.txt")
for tag, kw in [("greedy", dict(temperature=0)), ("t0.9_p0.9_s5", dict(temperature=0.9, top_p=0.9, seed=5)),
                ("t1.2_k5_s11", dict(temperature=1.2, top_k=5, seed=11))]:
    got = lm.generate(prompt, 80, **kw)
    ref = cli(f"gen_{tag}.txt")[:-1]  # --quiet ends with a newline
    check(f"generate {tag} equals `mega generate` byte for byte ({len(ref)} bytes)", got == ref and len(got) == 80,
          f"{got[:40]!r} vs {ref[:40]!r}")
check("generate with a str prompt and 0 tokens", lm.generate("x", 0) == b"")
check("the same seed draws the same text", lm.generate(b"a", 30, seed=3) == lm.generate(b"a", 30, seed=3))

# ---- errors -------------------------------------------------------------------------------------
raises("missing model: MegaError naming the path", lambda: mega.load("nowhere/at/all"), "nowhere/at/all")
raises("truncated checkpoint: MegaError", lambda: mega.load("truncated.safetensors"), "truncated.safetensors")
raises("not a safetensors file: MegaError", lambda: mega.load("held.txt"), "held.txt")
raises("token out of range: MegaError", lambda: lm.logits(np.array([[1, 2, 257]])), "outside the vocabulary")
raises("negative token: MegaError", lambda: lm.logits(np.array([[-1, 2]])), "outside the vocabulary")
raises("float tokens: MegaError", lambda: lm.logits(np.zeros((1, 4))), "integers")
raises("3-D tokens: MegaError", lambda: lm.logits(np.zeros((1, 2, 3), dtype=np.int32)), "[B, T]")
raises("targets of another shape: MegaError", lambda: lm.loss(np.zeros((1, 4), np.int32), np.zeros((1, 3), np.int32)),
       "shape")
raises("empty prompt: MegaError", lambda: lm.generate(b"", 5), "prompt")
raises("top_p 0: MegaError", lambda: lm.generate(b"a", 5, top_p=0), "top_p")
raises("negative temperature: the library's sampler refuses it", lambda: lm.generate(b"a", 5, temperature=-1),
       "temperature")
raises("backward on an inference model: MegaError", lm.backward, "inference")
raises("a bad config: the library's message", lambda: mega.create_lm(layers=0), "layers")
raises("an unknown config field: the library's message", lambda: mega.create_lm(no_such_field=3), "no-such-field")
# a file whose config names an encoder-decoder (no tensors needed: the kind is read first)
hdr = json.dumps({"__metadata__": {"config": json.dumps({"model": "mega_s2s"})}}).encode()
with open("s2s.safetensors", "wb") as f:
    f.write(len(hdr).to_bytes(8, "little") + hdr)
raises("an encoder-decoder file without its tensors: MegaError (it loads as a Translator)",
       lambda: mega.load("s2s.safetensors"), "s2s.safetensors")
raises("an encoder-decoder for training: MegaError", lambda: mega.load("s2s", training=True), "translation only")
closed = mega.load("lm")
closed.close()
raises("a closed model: MegaError", lambda: closed.logits(np.zeros((1, 2), np.int32)), "closed")

# ---- training in Python -------------------------------------------------------------------------
corpus = np.frombuffer(cli("corpus.txt"), dtype=np.uint8).astype(np.int32)
rng = np.random.default_rng(0)


def windows(B, T):
    s = rng.integers(0, len(corpus) - T - 1, size=B)
    idx = s[:, None] + np.arange(T)[None, :]
    return corpus[idx], corpus[idx + 1]


tm = mega.load("lm", training=True)
evx, evy = windows(8, 64)
before = tm.loss(evx, evy)
opt = mega.AdamW(tm, weight_decay=0.01)
losses = [tm.train_step(*windows(8, 64), opt, lr=3e-3) for _ in range(25)]
after = tm.loss(evx, evy)
check(f"25 AdamW steps from Python lower the held-out loss ({before:.4f} -> {after:.4f})", after < before - 0.05)
check("train_step returns finite losses", all(np.isfinite(losses)), str(losses[:3]))
ta = mega.load("lm", training=True)
aop = mega.Apollo(ta, rebound="belief")
before_a = ta.loss(evx, evy)
[ta.train_step(*windows(8, 64), aop, lr=1e-2) for _ in range(25)]
after_a = ta.loss(evx, evy)
check(f"25 Apollo steps from Python lower the held-out loss ({before_a:.4f} -> {after_a:.4f})", after_a < before_a - 0.05)
aop.close()
tm.zero_grad()
check("zero_grad: gradient norm 0", tm.grad_norm() == 0.0)
tm.forward(evx, evy)
tm.backward()
gn = tm.grad_norm()
tm.clip_grad_norm(gn / 2)
check("backward gives gradients; clip_grad_norm halves the norm", gn > 0 and abs(tm.grad_norm() - gn / 2) < 1e-3 * gn,
      f"{gn} -> {tm.grad_norm()}")
tm.save("trained.safetensors")
re = mega.load("trained.safetensors")
check("save then load: the same logits", np.array_equal(re.logits(evx[:2]), tm.logits(evx[:2])))
p1, p2 = tm.parameters(), re.parameters()
check("parameters(): the official names, equal after the reload",
      "decoder.embed_tokens.weight" in p1 and p1.keys() == p2.keys() and all(np.array_equal(p1[k], p2[k]) for k in p1),
      list(p1)[:3])
opt.close()
re.close()

# a fresh model: deterministic in its seed, learns a repeated pattern
small = dict(layers=1, embed_dim=16, z_dim=8, hidden_dim=32, ffn_dim=32, chunk_size=16)
a, b = mega.create_lm(seed=7, **small), mega.create_lm({"layers": 1, "embed-dim": 16, "z-dim": 8, "hidden-dim": 32,
                                                        "ffn-dim": 32, "chunk-size": 16}, seed=7)
check("create_lm: kwargs and dict give the same model for a seed",
      all(np.array_equal(u, v) for u, v in zip(a.parameters().values(), b.parameters().values())) and
      a.config["embed-dim"] == 16 and a.num_params > 0)
pat = np.tile(np.frombuffer(b"abcabd", dtype=np.uint8).astype(np.int32), 20)
xs, ys = pat[None, :-1].repeat(4, 0), pat[None, 1:].repeat(4, 0)
o = mega.AdamW(a)
l0 = a.loss(xs, ys)
for _ in range(30):
    a.train_step(xs, ys, o, lr=1e-2)
l1 = a.loss(xs, ys)
check(f"a new model learns a pattern ({l0:.3f} -> {l1:.3f})", l1 < 0.5 * l0)

# `mega train` reproduced from Python: the same config, initialisation (seed), data order
# (text_windows from data_rng_seed), schedule (lr_schedule), dropout keys, clipping and AdamW give
# bit-identical weights
ref = mega.load("repro")
rm = mega.create_lm(ref.config, seed=9)
ro = mega.AdamW(rm)
st = mega.data_rng_seed(9)
text = cli("corpus.txt")
for step in range(12):
    tok, tgt, st = mega.text_windows(text, 4, 32, st)
    rm.train_step(tok, tgt, ro, mega.lr_schedule(step, 12, 5e-3, min_lr=1e-4, warmup=3))
pa, pb = rm.parameters(), ref.parameters()
diff = max(float(np.abs(pa[k] - pb[k]).max()) for k in pb)
check(f"12 train_steps from Python reproduce `mega train` (dropout 0.1) bit for bit (max diff {diff:g})",
      pa.keys() == pb.keys() and diff == 0.0)
raises("text_windows on a text shorter than a window: MegaError", lambda: mega.text_windows(b"abc", 1, 8, 0), "")

# ---- classifier -----------------------------------------------------------------------------------
cls = mega.load("cls")
check("load(classifier run) gives a Classifier", isinstance(cls, mega.Classifier), type(cls).__name__)
rows = [ln.split(b"\t") for ln in cli("lo/test.tsv").splitlines()[1:]]
texts = [r[0] for r in rows]
want = cli("pred.txt").decode().split()
got = cls.predict_labels(texts)
check(f"predict_labels equals `mega predict` ({len(set(want))} distinct labels)", got == want, f"{got[:8]} vs {want[:8]}")

# ---- translation: Translator.translate = `mega translate` ---------------------------------------
src = cli("src.txt").decode().splitlines()
for name, kw in (("s2s", dict(beam=3, batch=2)), ("s2s_bpe", dict(beam=1, max_len_a=0.5, max_len_b=3))):
    with mega.load(name) as tr:
        want = cli(f"tr_{name}.txt").decode().split("\n")[:-1]
        got = tr.translate(src, **kw)
        check(f"{name}: translate equals `mega translate` ({kw}): {got[:2]}", got == want and isinstance(tr, mega.Translator),
              f"{got} vs {want}")
        check(f"{name}: bytes sources translate as str ones", tr.translate([x.encode() for x in src], **kw) == got)
        raises(f"{name}: an empty source: MegaError naming it", lambda: tr.translate(["the", ""]), "source 1")
        raises(f"{name}: a source with a line break: MegaError", lambda: tr.translate(["a\nb"]), "line break")
        raises(f"{name}: a string instead of a list: MegaError", lambda: tr.translate("the cat"), "list")
lgc = cls.logits(texts)
check("classifier logits: float32 [N, C]", lgc.dtype == np.float32 and lgc.shape == (40, 10), f"{lgc.shape}")
check("encode as the ListOps loader: parentheses dropped, <pad> and unknown words are <unk>",
      cls.encode("( [SM 3 <pad> ) x ]") == [15, 5, 1, 1, 16], str(cls.encode("( [SM 3 <pad> ) x ]")))
ids = [cls.encode(t) for t in texts]
L = max(map(len, ids))
arr = np.full((40, L), cls.vocab["pad"], dtype=np.int64)
for i, s in enumerate(ids):
    arr[i, :len(s)] = s
lens = np.array([len(s) for s in ids])
check("predict on ids + lengths equals predict on texts", np.array_equal(cls.predict(arr, lengths=lens, batch=40),
                                                                          cls.predict(texts, batch=40)))
raises("classifier: lengths beyond T: MegaError", lambda: cls.predict(arr, lengths=lens + L), "lengths")
raises("classifier: token out of range: MegaError", lambda: cls.predict(np.full((1, 3), 99)), "outside the vocabulary")
ct = mega.load("cls", training=True)
labels = np.array([cls.classes.index(r[1].decode()) for r in rows])
co = mega.AdamW(ct)
cl0 = ct.forward(texts[:32], labels[:32])
for _ in range(15):
    ct.train_step(texts[:32], labels[:32], co, lr=5e-3)
cl1 = ct.forward(texts[:32], labels[:32])
check(f"classifier train_step lowers its loss on a batch ({cl0:.3f} -> {cl1:.3f})", cl1 < cl0)
ct.save("cls_trained.safetensors")

# ---- hostile arguments: threads, values beyond the C types ------------------------------------------
import threading  # noqa: E402

# two threads calling logits on one model (the library's forward runs without the GIL and keeps
# its activations in the model): each call must still give its own input's logits
xa, xb = held[None, :64].astype(np.int32), held[None, 64:128].astype(np.int32)
want_a, want_b = lm.logits(xa), lm.logits(xb)
wrong = []


def hammer(x, want):
    for _ in range(30):
        if not np.array_equal(lm.logits(x), want):
            wrong.append(1)


ths = [threading.Thread(target=hammer, args=(xa, want_a)), threading.Thread(target=hammer, args=(xb, want_b))]
for t in ths:
    t.start()
for t in ths:
    t.join()
check("two threads calling logits on one model each get their own input's logits", not wrong,
      f"{len(wrong)} of 60 calls gave another input's logits")
raises("targets below -2^31 (they would wrap into ids): MegaError", lambda: lm.loss(
    np.array([[1, 2]]), np.array([[-(2**32) + 5, 3]], dtype=np.int64)), "targets")
raises("generate: tokens beyond a C int: MegaError", lambda: lm.generate(b"a", 2**32 + 3), "tokens")
raises("generate: top_k beyond a C int: MegaError", lambda: lm.generate(b"a", 2, top_k=2**32), "top_k")
raises("set_threads beyond a C int: MegaError", lambda: mega.set_threads(2**32 + 1), "threads")
check("set_threads(2**32 + 1) changed nothing", mega.get_threads() == 1, str(mega.get_threads()))
raises("text_windows: batch beyond a C int: MegaError", lambda: mega.text_windows(b"abcdefgh" * 4, 2**32 + 1, 4, 0),
       "batch")
raises("classifier logits: batch 0: MegaError", lambda: cls.logits(["a"], batch=0), "batch")

# ---- memory: loading and freeing many times does not grow ------------------------------------------
def cycle():
    m = mega.load("lm")
    m.logits(x[:, :32])
    m.generate(b"a", 4)
    m.close()
    try:
        mega.load("truncated.safetensors")
    except mega.MegaError:
        pass


if os.environ.get("MEGA_TEST_SANITIZED"):  # ASan keeps freed memory in quarantine: RSS says nothing
    for _ in range(20):
        cycle()
    print("NOTE the RSS leak check is skipped under AddressSanitizer", flush=True)
    sys.exit(0)
for _ in range(20):
    cycle()
gc.collect()
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(200):
    cycle()
gc.collect()
r1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
check(f"200 load/logits/generate/close cycles and failed loads: max RSS grows {r1 - r0} KiB (< 4 MiB)",
      r1 - r0 < 4096)
