#!/usr/bin/python3
"""The PyTorch peer of `mega bench`: the same workloads in idiomatic PyTorch.

Run with /usr/bin/python3 (Debian's torch 1.13, CPU, OpenBLAS: make bench gives it OpenBLAS's
OpenMP build through LD_LIBRARY_PATH, bench/lib.sh; alone it uses the system's libblas.so.3, and
its JSON "build" names the library either way). The Mega models are the modules
of tests/ref/mega_ref.py, our PyTorch implementation written from the Mega paper and the official
code (docs/mega.md) and checked against the official fixtures: EMA by FFT convolution, attention
as batched matmuls over the chunks, as the official code does it. `--check` re-runs those modules
on every fixture case and prints the worst error. lra-text-mha-train uses a plain PyTorch
Transformer encoder (nn.TransformerEncoderLayer, i.e. nn.MultiheadAttention with 8 heads,
post-norm, the same widths as the Mega classifier). megalodon-lm-train and megalodon-lm-decode-b1
use the official XuezheMax/megalodon modules (bench/peer/megalodon_peer.py: the mirror's sources
as tests/ref/ref_megalodon.py composes them, float32, the official incremental decode).

    peer.py [WORKLOAD...] [--json] [--threads N] [--repeat R] [--warmup W]
    peer.py --check [FIXTURE_DIR...]
    peer.py --list
    peer.py --report OURS.jsonl PEER.jsonl [--save FILE] [--cotenant OURS_CT.jsonl PEER_CT.jsonl]
                                                          (the table printed by bench/run.sh)

Method (the same as `mega bench`): each workload runs in a fresh Python process (this script with
--child NAME), so its peak resident memory (ru_maxrss of that process) is its own; torch uses
--threads intra-op threads (torch.set_num_threads, OMP_NUM_THREADS and OPENBLAS_NUM_THREADS in the
child's environment); --warmup untimed steps, then --repeat timed steps (fewer once the timed
steps add up to --budget seconds; at least one), ms/step = the median.
Training steps: zero_grad(set_to_none) + forward + cross-entropy + backward (+ clip and AdamW for
lm-train). Decode: eval mode, torch.inference_mode, the reference's incremental `step` one token at
a time with greedy argmax; one run = 512 tokens; ms/step = median run / 512.

--json prints one JSON object per line with the keys of `mega bench --json` (impl "pytorch").
"""
import argparse
import ctypes
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
REF = os.path.join(ROOT, "tests", "ref")

# name -> (kind, batch, tokens per sequence, classifier chunk, mixer); names are contracts
# (docs/performance.md)
WORKLOADS = {
    "lm-train": ("lm-train", 8, 1024, 256, "mega"),
    "lra-text-train-c128": ("cls-train", 2, 4096, 128, "mega"),
    "lra-text-train-full": ("cls-train", 2, 4096, -1, "mega"),
    "lm-decode-b1": ("lm-decode", 1, 512, 256, "mega"),
    "lm-decode-b8": ("lm-decode", 8, 512, 256, "mega"),
    "megalodon-lm-train": ("lm-train", 8, 1024, 256, "megalodon"),
    "megalodon-lm-decode-b1": ("lm-decode", 1, 512, 256, "megalodon"),
    "lra-text-mha-train": ("cls-train", 2, 4096, -1, "mha"),
    "scaling-1k": ("cls-train", 2, 1024, 128, "mega"),
    "scaling-4k": ("cls-train", 2, 4096, 128, "mega"),
    "scaling-16k": ("cls-train", 2, 16384, 128, "mega"),
}
# the Path-X shape against length (docs/performance.md, "Recomputation"): the lra-pathx preset's
# classifier at batch 4, one chunk over the sequence; run only when named (not in `all`)
PATHX = {f"pathx-train-{k}k": ("cls-train", 4, k * 1024, -1, "mega-pathx") for k in (1, 2, 4, 8, 16)}
WORKLOADS.update(PATHX)
MHA_HEADS = 8


def lm_config():
    """The lm-train model in the reference's (official) config keys."""
    return {
        "decoder_layers": 4, "decoder_embed_dim": 256, "decoder_z_dim": 64, "decoder_hidden_dim": 512,
        "decoder_n_dim": 16, "decoder_ffn_embed_dim": 512, "decoder_chunk_size": 256,
        "attention_activation_fn": "softmax", "normalization_type": "layernorm", "normalize_before": True,
        "rel_pos_bias": "simple", "truncation_length": None, "max_target_positions": 1024,
        "activation_fn": "silu", "no_scale_embedding": False, "share_decoder_input_output_embed": False,
        "no_affine_final_norm": False, "vocab_size": 257, "padding_idx": 256,
    }


def cls_config(T, chunk):
    """The LRA text classifier (paper Table 8 widths) in the reference's config keys."""
    return {
        "encoder_layers": 4, "encoder_embed_dim": 128, "encoder_z_dim": 64, "encoder_hidden_dim": 256,
        "encoder_n_dim": 16, "encoder_ffn_embed_dim": 256, "encoder_chunk_size": chunk,
        "attention_activation_fn": "softmax", "normalization_type": "scalenorm", "normalize_before": False,
        "rel_pos_bias": "simple", "truncation_length": None, "max_positions": max(T, 4096),
        "activation_fn": "silu", "embedding_type": "sparse", "sen_rep_type": "mp", "classifier_layers": 1,
        "classifier_out_dim": 256, "classifier_activation_fn": "gelu", "sentence_class_num": 2,
        "vocab_size": 257, "padding_idx": 256,
    }


def pathx_config(T):
    """The lra-pathx preset (tools/task_cls.c; official mega_lra_pf128) in the reference's keys:
    real-valued pixels, batchnorm, pre-norm, laplace attention over one chunk."""
    return {
        "encoder_layers": 4, "encoder_embed_dim": 64, "encoder_z_dim": 32, "encoder_hidden_dim": 128,
        "encoder_n_dim": 16, "encoder_ffn_embed_dim": 128, "encoder_chunk_size": -1,
        "attention_activation_fn": "laplace", "normalization_type": "batchnorm", "normalize_before": True,
        "rel_pos_bias": "simple", "truncation_length": 4096, "max_positions": T,
        "activation_fn": "silu", "embedding_type": "linear", "sen_rep_type": "mp", "classifier_layers": 1,
        "classifier_out_dim": 128, "classifier_activation_fn": "gelu", "sentence_class_num": 2,
        "vocab_size": 257, "padding_idx": 256,
    }


def rss_mib(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return float(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


# ----------------------------------------------------------------------------------------------
# child: one workload in this process


def build_transformer_classifier(torch, nn, F, T):
    """Plain Transformer encoder with the classifier's widths: token embedding (no positions, as
    the Mega classifier has none outside its layers), 4 post-norm layers of 8-head
    nn.MultiheadAttention + FFN 256 (silu), final mean pooling and the same head."""

    class TransformerClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            D = 128
            self.embed = nn.Embedding(257, D, padding_idx=256)
            layer = nn.TransformerEncoderLayer(D, MHA_HEADS, dim_feedforward=256, dropout=0.0, activation=F.silu,
                                               batch_first=True, norm_first=False)
            self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
            self.head = nn.Linear(D, 256)
            self.out = nn.Linear(256, 2, bias=False)

        def forward(self, tokens, lengths):
            x = self.encoder(self.embed(tokens))
            rep = x.sum(dim=1) / lengths.to(x.dtype).unsqueeze(1)
            return self.out(F.gelu(self.head(rep))), None

    return TransformerClassifier()


def blas_loaded():
    """The BLAS library this process multiplies with (bench/lib.sh chooses it), from its maps."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                name = os.path.basename(path)
                if name.startswith(("libblas.so", "libopenblas", "libmkl_core", "libblis")):
                    libs.add(os.path.realpath(path))
    except OSError:
        return "unknown"
    return ",".join(sorted(libs)) or "none found"


def kernels():
    """The kernels this process runs: ATen's CPU capability (the vector width of torch's own
    element-wise and reduction kernels, lowered by ATEN_CPU_CAPABILITY) and OpenBLAS's core (its
    GEMM kernels, chosen from the CPU unless OPENBLAS_CORETYPE names them)."""
    import torch

    aten = "unknown"
    for line in torch.__config__.show().splitlines():  # torch 1.13 has no torch.backends.cpu
        if "CPU capability usage:" in line:
            aten = line.split(":", 1)[1].strip()
    get = getattr(torch.backends, "cpu", None)
    if get is not None and hasattr(get, "get_cpu_capability"):
        aten = get.get_cpu_capability()
    core = "not OpenBLAS"
    for path in blas_loaded().split(","):
        try:
            f = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        f.restype = ctypes.c_char_p
        core = f"OpenBLAS {f().decode()}"
        break
    ct = os.environ.get("OPENBLAS_CORETYPE")
    return f"ATen {aten}, {core} kernels" + (f" (OPENBLAS_CORETYPE={ct})" if ct else "")


def turn_fds(env):
    """The driver's two pipe ends from MEGA_BENCH_TURNS="R,W" (bench/pair.py), or None."""
    try:
        r, w = (int(x) for x in env.get("MEGA_BENCH_TURNS", "").split(","))
    except ValueError:
        return None
    return (r, w) if r >= 0 and w >= 0 else None


class Turns:
    """Paired timing (bench/pair.py): the protocol of `mega bench` (tools/bench.c, step_go). With
    MEGA_BENCH_TURNS="R,W" every step after the warm-up writes "ready MS" (its last step) on W
    and waits for one line on R: "go" runs a timed step, "warm" an untimed one ("done MS" follows
    either), anything else or end of file ends the timing."""

    def __init__(self):
        self.on, self.untimed, self.last_ms = False, False, float("nan")
        fds = turn_fds(os.environ)
        if fds:
            self.r, self.w, self.on = os.fdopen(fds[0], "r"), os.fdopen(fds[1], "w"), True

    def ready(self):
        try:
            self.w.write(f"ready {self.last_ms:.6f}\n")
            self.w.flush()
            cmd = self.r.readline().strip()
        except (BrokenPipeError, OSError):
            return False
        self.untimed = cmd == "warm"
        return cmd in ("go", "warm")

    def done(self, ms):
        if self.on:
            try:
                self.w.write(f"done {ms:.6f}\n")
                self.w.flush()
            except (BrokenPipeError, OSError):
                pass


def run_child(name, threads, warmup, repeat, budget):
    base = rss_mib("VmRSS")  # before torch is imported (the interpreter alone)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    sys.path.insert(0, REF)
    import mega_ref  # noqa: E402

    kind, B, T, chunk, mixer = WORKLOADS[name]
    if mixer == "megalodon":  # the official modules (bench/peer/megalodon_peer.py)
        sys.path.insert(0, HERE)
        import megalodon_peer  # noqa: E402
        mg_mods = megalodon_peer.load_modules()
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    base_torch = rss_mib("VmRSS")
    g = torch.Generator().manual_seed(7)
    times, loss_v, extra = [], float("nan"), {}

    turns = Turns()

    def go(s):  # may step s run? warm-up steps always; timed ones within the budget or on the driver's turn
        if s < warmup:
            return True
        if turns.on:
            return turns.ready()
        return not (len(times) > 0 and sum(times) >= budget * 1e3)

    def timed(s, dt):
        turns.last_ms = dt * 1e3
        if s >= warmup:
            turns.done(dt * 1e3)
            if not turns.untimed:
                times.append(dt * 1e3)

    if kind == "lm-train":
        if mixer == "megalodon":
            mg = megalodon_peer.MegalodonLM(mg_mods).train()
            model = lambda t: (mg(t), None)  # noqa: E731
            model.parameters = mg.parameters
        else:
            model = mega_ref.build("lm", lm_config()).train()
        decay = [p for p in model.parameters() if p.dim() >= 2]
        other = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}],
                                lr=1e-3, betas=(0.9, 0.98), eps=1e-8)
        seq = torch.randint(0, 256, (B, T + 1), generator=g)
        tok, tgt = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
        for s in range(warmup + repeat):
            if not go(s):
                break
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            logits, _ = model(tok)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            timed(s, time.perf_counter() - t0)
            loss_v = float(loss)
        per_run = 1
    elif kind == "cls-train":
        if mixer == "mha":
            model = build_transformer_classifier(torch, nn, F, T).train()
        elif mixer == "mega-pathx":
            model = mega_ref.build("cls", pathx_config(T)).train()
        else:
            model = mega_ref.build("cls", cls_config(T, chunk)).train()
        if mixer == "mega-pathx":
            tok = torch.rand((B, T), generator=g)  # pixel values
        else:
            tok = torch.randint(0, 256, (B, T), generator=g)
        lengths = torch.full((B,), T, dtype=torch.long)
        y = torch.arange(B) % 2
        for s in range(warmup + repeat):
            if not go(s):
                break
            t0 = time.perf_counter()
            model.zero_grad(set_to_none=True)
            logits, _ = model(tok, lengths)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            timed(s, time.perf_counter() - t0)
            loss_v = float(loss)
        per_run = 1
    else:  # lm-decode
        if mixer == "megalodon":
            model = megalodon_peer.MegalodonLM(mg_mods).eval()
        else:
            model = mega_ref.build("lm", lm_config()).eval()
        h = 1469598103934665603
        with torch.inference_mode():
            for s in range(warmup + repeat):
                if not go(s):
                    break
                state = model.new_state(B) if mixer == "megalodon" else []
                tokens = torch.tensor([[ord("A") + b] for b in range(B)], dtype=torch.long)
                h = 1469598103934665603
                t0 = time.perf_counter()
                for _ in range(T):
                    logits = model.step(tokens, state)
                    tokens = logits[:, -1, :256].argmax(-1, keepdim=True)
                    for v in tokens[:, 0].tolist():
                        h = ((h ^ v) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
                timed(s, time.perf_counter() - t0)
        extra["tokens_digest"] = "%016x" % h
        per_run = T

    if not times:  # the driver ended the timing before the first timed step
        print(json.dumps({"workload": name, "status": "n/a", "note": "no timed step"}))
        sys.stdout.flush()
        return
    times.sort()
    n = len(times)
    med = statistics.median(times)
    tokens = B * T
    out = {
        "workload": name, "status": "ok", "note": "", "ms_per_step": med / per_run,
        "ms_min": times[0] / per_run, "ms_max": times[-1] / per_run, "tokens_per_s": tokens / (med * 1e-3),
        "steps_timed": n, "loss": loss_v if math.isfinite(loss_v) else None, "base_rss_mib": base, "torch_rss_mib": base_torch,
        "self_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "build": f"torch {torch.__version__} python {platform.python_version()} blas {blas_loaded()}",
        "kernels": kernels(),
    }
    out.update(extra)
    print(json.dumps(out))
    sys.stdout.flush()


# ----------------------------------------------------------------------------------------------
# parent: every workload in a fresh process


def spawn(name, threads, warmup, repeat, budget):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--threads", str(threads),
           "--warmup", str(warmup), "--repeat", str(repeat), "--budget", str(budget)]
    fds = turn_fds(env) or ()  # paired timing: the child gets the driver's pipe ends
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, pass_fds=fds)
    out = p.stdout.read().decode()
    p.stdout.close()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    child = None
    for line in out.splitlines():
        if line.startswith('{"workload"'):
            child = json.loads(line)
    return child, ru.ru_maxrss / 1024.0, p.returncode


def record(name, child, peak, rc, threads, warmup, repeat):
    kind, B, T, chunk, mixer = WORKLOADS[name]
    ok = child is not None and child.get("status") == "ok"
    rec = {
        "impl": "pytorch", "workload": name, "status": child["status"] if child else "error",
        "note": (child or {}).get("note", "") if child else f"child exited with status {rc}",
        "threads": threads, "batch": B, "seq_len": T, "tokens_per_step": B if kind == "lm-decode" else B * T,
        "warmup": warmup, "repeat": repeat, "steps_timed": child.get("steps_timed") if ok else None,
    }
    for k in ("ms_per_step", "ms_min", "ms_max", "tokens_per_s"):
        rec[k] = child.get(k) if ok else None
    rec.update({"gflop_per_step": None, "gflops": None, "sgemm_gflops": None, "sgemm_fraction": None,
                "peak_rss_mib": peak if child else None, "base_rss_mib": (child or {}).get("base_rss_mib"),
                "loss": (child or {}).get("loss")})
    if ok and "tokens_digest" in child:
        rec["tokens_digest"] = child["tokens_digest"]
    rec["torch_rss_mib"] = (child or {}).get("torch_rss_mib")
    rec["mixer"] = {"mha": "mha (nn.TransformerEncoderLayer)",
                    "megalodon": "megalodon (official modules, bench/peer/megalodon_peer.py)"}.get(mixer, "mega (tests/ref/mega_ref.py)")
    rec["build"] = (child or {}).get("build", "")
    return rec


def run_parent(names, threads, warmup, repeat, budget, as_json):
    recs = []
    for i, name in enumerate(names):
        t0 = time.time()
        sys.stderr.write(f"peer  [{i + 1}/{len(names)}] {name:20s} ...")
        sys.stderr.flush()
        child, peak, rc = spawn(name, threads, warmup, repeat, budget)
        rec = record(name, child, peak, rc, threads, warmup, repeat)
        sys.stderr.write(f" {rec['status']} ({time.time() - t0:.1f} s)\n")
        recs.append(rec)
        if as_json:
            print(json.dumps(rec))
            sys.stdout.flush()
    if not as_json:
        print(f"{'workload':20s} {'tok/s':>11s} {'ms/step':>10s} {'peak MiB':>9s}")
        for r in recs:
            if r["status"] != "ok":
                print(f"{r['workload']:20s} {r['status']} ({r['note']})")
                continue
            print(f"{r['workload']:20s} {r['tokens_per_s']:11.0f} {r['ms_per_step']:10.3f} {r['peak_rss_mib']:9.0f}")
    return 0 if all(r["status"] != "error" for r in recs) else 1


# ----------------------------------------------------------------------------------------------
# --check: the peer's modules on the fixture cases


def run_check(dirs):
    import torch

    sys.path.insert(0, REF)
    import check_shared  # noqa: E402

    torch.set_num_threads(1)
    if not dirs:
        # the official cases and our generated ones
        dirs = [os.path.join(ROOT, "tests", "fixtures", "official"), os.path.join(ROOT, "tests", "fixtures", "generated")]
    worst = {}
    ok_all, n_cases = True, 0
    for d in dirs:
        names = sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n, "case.json")))
        print(f"== {d} ({len(names)} cases)")
        for n in names:
            case, io, ours = check_shared.compute(os.path.join(d, n))
            rows, w, wn, missing = check_shared.compare(case, io, ours)
            lim = check_shared.LIMIT[case["dtype"]]
            ok = w[1] <= lim and not missing and (wn is None or wn[1] <= check_shared.NOISE_LIMIT)
            ok_all &= ok
            n_cases += 1
            dt = case["dtype"]
            if dt not in worst or w[1] > worst[dt][0]:
                worst[dt] = (w[1], f"{n}: {w[0]}")
            print(f"{'ok  ' if ok else 'FAIL'} {n:62s} {dt:8s} worst {w[1]:.2e} ({w[0]})"
                  + (f"  NOT RECOMPUTED {missing}" if missing else ""))
    for dt, (e, where) in sorted(worst.items()):
        print(f"worst {dt} error over {n_cases} cases: {e:.2e} (limit {check_shared.LIMIT[dt]:.0e}) at {where}")
    print("peer check: ALL OK" if ok_all else "peer check: SOME CASES FAILED")
    return 0 if ok_all else 1


# ----------------------------------------------------------------------------------------------
# --report: the combined table and the performance targets (docs/performance.md)


def _f(v, fmt):
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def load_jsonl(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                o = json.loads(line)
                out[o["workload"]] = o
    return out


def paired(*recs):
    """The records' per-round timed steps (bench/pair.py "step_ms"), one tuple per round, when
    every record has them for the same rounds; None otherwise (a record from an unpaired run)."""
    lists = [r.get("step_ms") if r is not None and r.get("status") == "ok" else None for r in recs]
    if any(not isinstance(x, list) or not x for x in lists) or len({len(x) for x in lists}) != 1:
        return None
    if any(v is None or v <= 0 for x in lists for v in x):
        return None
    return list(zip(*lists))


def report(ours_path, peer_path, save, meta_kv, cotenant=None):
    ours, peer = load_jsonl(ours_path), load_jsonl(peer_path)
    ours_ct, peer_ct = (load_jsonl(cotenant[0]), load_jsonl(cotenant[1])) if cotenant else ({}, {})
    sg = ours.get("sgemm", {})
    sgemm = sg.get("gflops")
    order = [w for w in WORKLOADS if w in ours or w in peer]
    ok = lambda r: r is not None and r.get("status") == "ok"  # noqa: E731

    def num(r, k):
        return r.get(k) if ok(r) else None

    def ratio(a, b):
        return a / b if a is not None and b not in (None, 0) else None

    def speed(w):
        """ours over the peer: the median of the per-round ratios when the two were timed in
        turns (bench/pair.py), the ratio of the two medians otherwise"""
        rounds = paired(ours.get(w), peer.get(w))
        if rounds:
            return statistics.median([p / o for o, p in rounds])
        return ratio(num(ours.get(w), "tokens_per_s"), num(peer.get(w), "tokens_per_s"))

    hdr = ("workload", "ours tok/s", "peer tok/s", "speedup", "ours ms/step", "peer ms/step",
           "ours GFLOP/s (% sgemm)", "ours peak MiB", "peer peak MiB", "memory ratio")
    rows, notes = [], []
    for w in order:
        o, p = ours.get(w), peer.get(w)
        for side, r in (("ours", o), ("peer", p)):
            if r is not None and r.get("status") != "ok":
                notes.append(f"{w} ({side}): {r.get('status')}: {r.get('note')}")
        if o is not None and o.get("status") != "ok":
            ot, oms, ogf, omem = o.get("status"), None, None, None
        else:
            ot, oms, ogf, omem = num(o, "tokens_per_s"), num(o, "ms_per_step"), num(o, "gflops"), num(o, "peak_rss_mib")
        pt, pms, pmem = num(p, "tokens_per_s"), num(p, "ms_per_step"), num(p, "peak_rss_mib")
        gf = None
        if ogf is not None:
            fr = o.get("sgemm_fraction")
            if fr is None and sgemm:
                fr = ogf / sgemm
            gf = f"{ogf:.1f} ({100 * fr:.0f}%)" if fr is not None else f"{ogf:.1f}"
        rows.append((w, ot if isinstance(ot, str) else _f(ot, "{:.0f}"), _f(pt, "{:.0f}"),
                     _f(speed(w) if not isinstance(ot, str) else None, "{:.2f}x"),
                     _f(oms, "{:.3f}"), _f(pms, "{:.3f}"), gf or "-", _f(omem, "{:.0f}"), _f(pmem, "{:.0f}"),
                     _f(ratio(omem, pmem), "{:.2f}x")))
    widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
    lines = []
    lines.append("| " + " | ".join(h.ljust(widths[i]) for i, h in enumerate(hdr)) + " |")
    lines.append("|" + "|".join("-" * (widths[i] + 2) for i in range(len(hdr))) + "|")
    for r in rows:
        lines.append("| " + " | ".join(str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
                                       for i, c in enumerate(r)) + " |")
    lines.extend(notes)
    npair = [len(paired(ours.get(w), peer.get(w)) or []) for w in order if w != "sgemm"]
    if any(npair):
        lines.append(f"timed in turns (bench/pair.py), {min(npair)}-{max(npair)} rounds: tok/s and ms/step are each "
                     "side's median step, the speedup the median of the per-round ratios")
    if sgemm:
        shapes = ", ".join(f"{s['m']}x{s['n']}x{s['k']} {s['gflops']:.1f} GFLOP/s" for s in sg.get("shapes", []))
        lines.append(f"sgemm (OpenBLAS, {sg.get('threads')} threads): {shapes}")
    else:
        lines.append(f"sgemm: {sg.get('note', 'not measured')}")

    # the performance targets (docs/performance.md)
    t = []

    def target(label, cond, text):
        mark = "n/a" if cond is None else ("met" if cond else "NOT met")
        t.append(f"  [{mark:7s}] {label}: {text}")

    def mem(w):
        return ratio(num(ours.get(w), "peak_rss_mib"), num(peer.get(w), "peak_rss_mib"))

    s = speed("lm-train")
    target("lm-train >= 3x peer tok/s", None if s is None else s >= 3, f"{_f(s, '{:.2f}x')}")
    fr = num(ours.get("lm-train"), "gflops")
    fr = fr / sgemm if fr is not None and sgemm else None
    target("lm-train >= 50% of sgemm", None if fr is None else fr >= 0.5,
           f"{_f(None if fr is None else 100 * fr, '{:.0f}%')} of {_f(sgemm, '{:.1f}')} GFLOP/s")
    for w in ("lra-text-train-c128", "lra-text-train-full"):
        s = speed(w)
        target(f"{w} >= 5x peer tok/s", None if s is None else s >= 5, _f(s, "{:.2f}x"))
    s = speed("lm-decode-b1")
    target("lm-decode-b1 >= 10x peer tok/s", None if s is None else s >= 10, _f(s, "{:.2f}x"))
    for w in ("lm-train", "lra-text-train-c128", "lra-text-train-full", "scaling-1k", "scaling-4k", "scaling-16k"):
        m = mem(w)
        o, p = ours.get(w), peer.get(w)
        # the same ratio without each process's fixed baseline (our binary; Python + torch)
        ob, pb = num(o, "base_rss_mib"), num(p, "torch_rss_mib")
        om, pm = num(o, "peak_rss_mib"), num(p, "peak_rss_mib")
        net = ratio(om - ob, pm - pb) if None not in (ob, pb, om, pm) else None
        target(f"{w} peak memory <= 0.5x peer", None if m is None else m <= 0.5,
               f"{_f(m, '{:.2f}x')} ({_f(om, '{:.0f}')} vs {_f(pm, '{:.0f}')} MiB; "
               f"above the process baseline {_f(net, '{:.2f}x')})")
    o16, o4 = ours.get("scaling-16k"), ours.get("scaling-4k")
    tr = ratio(num(o16, "ms_per_step"), num(o4, "ms_per_step"))
    mr = ratio(num(o16, "peak_rss_mib"), num(o4, "peak_rss_mib"))
    trmin = ratio(num(o16, "ms_min"), num(o4, "ms_min"))
    target("scaling 16K/4K time <= 4.4x", None if tr is None else tr <= 4.4,
           f"{_f(tr, '{:.2f}x')} (medians; fastest steps: {_f(trmin, '{:.2f}x')}; tokens 4x)")
    target("scaling 16K/4K memory <= 4.4x", None if mr is None else mr <= 4.4, _f(mr, "{:.2f}x"))
    om, oc = ours.get("lra-text-mha-train"), ours.get("lra-text-train-c128")
    sp = ratio(num(om, "ms_per_step"), num(oc, "ms_per_step"))
    mm = ratio(num(oc, "peak_rss_mib"), num(om, "peak_rss_mib"))
    why = "" if ok(om) else f" ({(om or {}).get('note', 'not run')})"
    target("Mega-chunk >= 5.5x faster than our mha at 4K", None if sp is None else sp >= 5.5, _f(sp, "{:.2f}x") + why)
    target("Mega-chunk <= 0.13x the memory of our mha at 4K", None if mm is None else mm <= 0.13, _f(mm, "{:.2f}x") + why)
    pm, pc = peer.get("lra-text-mha-train"), peer.get("lra-text-train-c128")
    psp = ratio(num(pm, "ms_per_step"), num(pc, "ms_per_step"))
    pmm = ratio(num(pc, "peak_rss_mib"), num(pm, "peak_rss_mib"))
    t.append(f"  (for reference, in the peer: Mega-chunk is {_f(psp, '{:.2f}x')} faster than nn.MultiheadAttention "
             f"and uses {_f(pmm, '{:.2f}x')} its memory at 4K)")
    # the second round of targets: each a same-run ratio, so that it holds on any machine
    t.append("  second round:")
    s = speed("lm-train")
    fr = num(ours.get("lm-train"), "gflops")
    fr = fr / sgemm if fr is not None and sgemm else None
    target("lm-train >= 70% of sgemm", None if fr is None else fr >= 0.7,
           f"{_f(None if fr is None else 100 * fr, '{:.0f}%')} of {_f(sgemm, '{:.1f}')} GFLOP/s")
    target("lm-train >= 2.5x peer tok/s", None if s is None else s >= 2.5, _f(s, "{:.2f}x"))
    for w, sp_t, sg_t in (("lra-text-train-c128", 5, 0.5), ("lra-text-train-full", 5, None),
                          ("lra-text-mha-train", 4, 0.4)):
        s = speed(w)
        target(f"{w} >= {sp_t}x peer tok/s", None if s is None else s >= sp_t, _f(s, "{:.2f}x"))
        if sg_t is not None:
            g = num(ours.get(w), "gflops")
            g = g / sgemm if g is not None and sgemm else None
            target(f"{w} >= {100 * sg_t:.0f}% of sgemm", None if g is None else g >= sg_t,
                   _f(None if g is None else 100 * g, "{:.0f}%"))
    for w in ("lm-decode-b1", "lm-decode-b8"):
        s = speed(w)
        target(f"{w} >= 10x peer tok/s", None if s is None else s >= 10, _f(s, "{:.2f}x"))
    # Megalodon against the official modules (bench/peer/megalodon_peer.py): Mega's margins
    s = speed("megalodon-lm-train")
    target("megalodon-lm-train >= 2x peer tok/s", None if s is None else s >= 2, _f(s, "{:.2f}x"))
    s = speed("megalodon-lm-decode-b1")
    target("megalodon-lm-decode-b1 >= 10x peer tok/s", None if s is None else s >= 10, _f(s, "{:.2f}x"))
    if cotenant:
        lines.extend(cotenant_table(ours, peer, ours_ct, peer_ct, order, num, ratio, target))
    else:
        t.append("  (the co-tenant targets need `sh bench/run.sh --cotenant`)")
    lines.append("")
    lines.append("targets (docs/performance.md):")
    lines.extend(t)
    text = "\n".join(lines)
    print(text)
    if save:
        os.makedirs(os.path.dirname(os.path.abspath(save)), exist_ok=True)
        doc = dict(meta_kv)
        doc.update({"ours": list(ours.values()), "peer": list(peer.values()), "table": text})
        if cotenant:
            doc.update({"ours_cotenant": list(ours_ct.values()), "peer_cotenant": list(peer_ct.values())})
        tmp = save + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, save)
        print(f"\nraw results: {save}")
    return 0


def cotenant_table(ours, peer, ours_ct, peer_ct, order, num, ratio, target):
    """The speedups measured quiet and with a co-tenant (one busy process on one core, both sides
    alike), and the robustness targets: the speedup drops by at most 25% under the co-tenant,
    decode b1/b8 stay >= 10x. Timed in turns (bench/pair.py), every round has the four steps
    (ours and the peer, quiet and with the co-tenant) and each figure is the median over the
    rounds of that round's ratio; otherwise the ratios of the medians."""
    hdr = ("workload", "quiet: ours / peer tok/s", "speedup", "co-tenant: ours / peer tok/s", "speedup",
           "speedup change", "ours slowed", "peer slowed")
    rows = []
    for w in order:
        if w == "sgemm":
            continue
        oq, pq = num(ours.get(w), "tokens_per_s"), num(peer.get(w), "tokens_per_s")
        oc, pc = num(ours_ct.get(w), "tokens_per_s"), num(peer_ct.get(w), "tokens_per_s")
        rounds = paired(ours.get(w), peer.get(w), ours_ct.get(w), peer_ct.get(w))
        if rounds:  # (ours, peer, ours with the co-tenant, peer with it): step times of one round
            sq = statistics.median([p / o for o, p, _, _ in rounds])
            sc = statistics.median([p / o for _, _, o, p in rounds])
            ch = statistics.median([(pc_ / oc_) / (pq_ / oq_) for oq_, pq_, oc_, pc_ in rounds])
            oslow, pslow = statistics.median([c / q for q, _, c, _ in rounds]), statistics.median([c / q for _, q, _, c in rounds])
        else:
            sq, sc = ratio(oq, pq), ratio(oc, pc)
            ch = ratio(sc, sq)
            oslow, pslow = ratio(oq, oc), ratio(pq, pc)
        rows.append((w, f"{_f(oq, '{:.0f}')} / {_f(pq, '{:.0f}')}", _f(sq, "{:.2f}x"),
                     f"{_f(oc, '{:.0f}')} / {_f(pc, '{:.0f}')}", _f(sc, "{:.2f}x"),
                     _f(None if ch is None else 100 * (ch - 1), "{:+.0f}%"),
                     _f(oslow, "{:.2f}x"), _f(pslow, "{:.2f}x")))
        target(f"{w}: speedup drops <= 25% with a co-tenant", None if ch is None else ch >= 0.75,
               f"{_f(sq, '{:.2f}x')} quiet, {_f(sc, '{:.2f}x')} with the co-tenant")
        if w in ("lm-decode-b1", "lm-decode-b8"):
            target(f"{w} >= 10x peer tok/s with a co-tenant", None if sc is None else sc >= 10, _f(sc, "{:.2f}x"))
    widths = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
    out = ["", "with a co-tenant (one busy process, a plain spin loop at normal priority, running during both sides):"]
    out.append("| " + " | ".join(h.ljust(widths[i]) for i, h in enumerate(hdr)) + " |")
    out.append("|" + "|".join("-" * (widths[i] + 2) for i in range(len(hdr))) + "|")
    for r in rows:
        out.append("| " + " | ".join(str(c).ljust(widths[i]) if i == 0 else str(c).rjust(widths[i])
                                     for i, c in enumerate(r)) + " |")
    return out


# ----------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", help="workload names (default: all); with --check: fixture dirs")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = all cores)")
    ap.add_argument("--repeat", type=int, default=3, help="timed steps (decode: timed 512-token runs)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before timing")
    ap.add_argument("--budget", type=float, default=12.0,
                    help="seconds: stop timing a workload early once its timed steps add up to this")
    ap.add_argument("--check", action="store_true", help="run the peer's modules on the fixture cases")
    ap.add_argument("--list", action="store_true", help="list the workloads")
    ap.add_argument("--kernels", action="store_true", help="print the kernels torch and its BLAS run here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--report", nargs=2, metavar=("OURS", "PEER"), help="print the combined table of two JSONL files")
    ap.add_argument("--save", help="with --report: write both sides' raw JSON here")
    ap.add_argument("--cotenant", nargs=2, metavar=("OURS", "PEER"),
                    help="with --report: the same workloads measured with a co-tenant (bench/run.sh --cotenant)")
    ap.add_argument("--meta", action="append", default=[], help="with --report --save: KEY=VALUE stored in the file")
    a = ap.parse_args(argv)
    threads = a.threads if a.threads > 0 else (os.cpu_count() or 1)
    if a.check:
        return run_check(a.workloads)
    if a.report:
        return report(a.report[0], a.report[1], a.save, [kv.split("=", 1) for kv in a.meta if "=" in kv],
                      a.cotenant)
    if a.kernels:
        import torch

        torch.mm(torch.ones(64, 64), torch.ones(64, 64))  # the BLAS is mapped by now
        print(kernels())
        return 0
    if a.list:
        for n, (kind, B, T, chunk, mixer) in WORKLOADS.items():
            print(f"{n:22s} {kind:10s} batch {B} x {T}" + (f", chunk {chunk}" if kind == "cls-train" else "")
                  + (f", mixer {mixer}" if mixer != "mega" else ""))
        return 0
    if a.child:
        run_child(a.child, threads, a.warmup, a.repeat, a.budget)
        return 0
    names = []
    for n in a.workloads or [w for w in WORKLOADS if w not in PATHX]:
        if n == "all":
            names += [w for w in WORKLOADS if w not in names and w not in PATHX]
        elif n == "sgemm":
            continue  # measured by `mega bench` only
        elif n not in WORKLOADS:
            ap.error(f"unknown workload {n!r} (see --list)")
        elif n not in names:
            names.append(n)
    return run_parent(names, threads, a.warmup, a.repeat, a.budget, a.json)


if __name__ == "__main__":
    sys.exit(main())
