#!/usr/bin/python3
"""The PyTorch peer of `make bench-ttq` (time to quality): trains the byte-level GCIDE language
model for a wall-clock budget of training seconds, then scores held-out bytes.

Run with /usr/bin/python3 (Debian's torch 1.13, CPU). The model is the Mega LM of
tests/ref/mega_ref.py, built from the lm-train config of bench/peer/peer.py (imported, with the
widths of `mega train`'s defaults: 4 layers, embed 128, z 64, hidden 256, ffn 256, n 16, chunk
128, softmax attention, simple relative bias, pre-norm layernorm, untied output projection).

    ttq.py --train FILE --valid FILE --budget SECONDS [--threads N] [--eval-bytes N] [--json]
    ttq.py --report RESULTS.jsonl        (the table printed by bench/ttq.sh)

Training, as `mega train --time-budget` does it: batches of 16 random windows of 256 + 1 bytes,
cross-entropy over the 257-way output, gradient norm clipped to 1, AdamW (betas 0.9/0.98, eps
1e-8, decoupled weight decay 0.01 on matrices and embeddings only: the `.weight` tensors of two or
more dimensions, as `mega train` decays its MEGA_P_DECAY tensors; norms, biases, EMA and
relative-bias parameters are not decayed). The learning rate warms up linearly over --warmup
steps, then follows a cosine from --lr to --min-lr as a function of the training seconds spent /
the budget; training stops once they reach the budget. The clock counts the steps only (batch
drawing included); the final evaluation is outside it.

Evaluation, as `mega eval --lengths 256` does it: the first --eval-bytes bytes of --valid, cut into
non-overlapping windows of 256 inputs whose targets are the next bytes (window w: inputs
[256w, 256w+256), targets [256w+1, 256w+257); (n-1)//256 windows), 16 windows per forward pass,
mean cross-entropy over every target in bits.
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peer  # noqa: E402  (the lm-train model config and the path of the reference modules)

B, T = 16, 256


def model_config():
    """peer.py's lm-train config with the widths of `mega train`'s defaults."""
    cfg = peer.lm_config()
    cfg.update({"decoder_layers": 4, "decoder_embed_dim": 128, "decoder_z_dim": 64, "decoder_hidden_dim": 256,
                "decoder_n_dim": 16, "decoder_ffn_embed_dim": 256, "decoder_chunk_size": 128,
                "max_target_positions": 1024})
    return cfg


def lr_at(step, trained, a):
    """The rate of `mega train --time-budget`: warm-up in steps, then a cosine over the seconds."""
    if a.warmup > 0 and step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    p = min(1.0, max(0.0, trained / a.budget))
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * p))


def read_bytes(path, limit=0):
    with open(path, "rb") as f:
        return f.read(limit) if limit > 0 else f.read()


def evaluate(torch, F, model, data):
    """Mean bits per target byte over non-overlapping windows of T (mega eval --lengths T)."""
    n = len(data)
    nwin = (n - 1) // T
    txt = torch.frombuffer(bytearray(data[: nwin * T + 1]), dtype=torch.uint8).long()
    tot, cnt = 0.0, 0
    model.eval()
    with torch.no_grad():
        for w0 in range(0, nwin, B):
            nb = min(B, nwin - w0)
            idx = (torch.arange(nb) + w0).unsqueeze(1) * T + torch.arange(T).unsqueeze(0)
            logits, _ = model(txt[idx])
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), txt[idx + 1].reshape(-1), reduction="sum")
            tot += float(loss)
            cnt += nb * T
    model.train()
    return tot / cnt / math.log(2), cnt


def run(a):
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, peer.REF)
    import mega_ref  # noqa: E402

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = mega_ref.build("lm", model_config()).train()
    named = list(model.named_parameters())
    decay = [p for n, p in named if n.endswith(".weight") and p.dim() >= 2]
    other = [p for n, p in named if not (n.endswith(".weight") and p.dim() >= 2)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.98), eps=1e-8)
    train = torch.frombuffer(bytearray(read_bytes(a.train)), dtype=torch.uint8)
    g = torch.Generator().manual_seed(a.seed)
    span = torch.arange(T + 1)
    trained, step, lr, loss_v = 0.0, 0, a.lr, float("nan")
    next_note = a.budget / 10
    while trained < a.budget and step < a.max_steps:
        t0 = time.perf_counter()
        off = torch.randint(0, len(train) - T - 1, (B, 1), generator=g)
        seq = train[off + span].long()
        opt.zero_grad(set_to_none=True)
        logits, _ = model(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), seq[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        # the clock after this step's gradients sets its rate, as in mega train
        lr = lr_at(step, trained + (time.perf_counter() - t0), a)
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        loss_v = float(loss)
        trained += time.perf_counter() - t0
        step += 1
        if not a.json and trained >= next_note:
            sys.stderr.write(f"peer: step {step} | loss {loss_v:.4f} | lr {lr:.2e} | {trained:.0f}/{a.budget:g} s\n")
            next_note += a.budget / 10
    te = time.perf_counter()
    bpb, cnt = evaluate(torch, F, model, read_bytes(a.valid, a.eval_bytes))
    rec = {"impl": "pytorch", "torch": torch.__version__, "budget": a.budget, "threads": a.threads, "steps": step,
           "train_seconds": round(trained, 3), "tokens_per_s": round(step * B * T / trained, 1) if trained > 0 else None,
           "final_lr": lr, "final_loss": loss_v, "bpb": round(bpb, 6), "eval_bytes": cnt,
           "eval_seconds": round(time.perf_counter() - te, 3)}
    print(json.dumps(rec) if a.json else
          f"peer: {step} steps in {trained:.1f} s of training ({rec['tokens_per_s']:.0f} tok/s), "
          f"held-out {bpb:.4f} bits per byte over {cnt} bytes")
    return 0


def report(path):
    """One row per budget: both sides' bpb, steps and tokens/s, then the targets."""
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                rows.setdefault(r["budget"], {})[r["impl"]] = r

    def f(v, fmt):
        return "-" if v is None else fmt.format(v)

    print(f"{'budget s':>8s} {'ours bpb':>9s} {'peer bpb':>9s} {'ours steps':>10s} {'peer steps':>10s} "
          f"{'ours tok/s':>10s} {'peer tok/s':>10s}")
    ahead = []
    for b in sorted(rows):
        o, p = rows[b].get("mega", {}), rows[b].get("pytorch", {})
        print(f"{b:8g} {f(o.get('bpb'), '{:.4f}'):>9s} {f(p.get('bpb'), '{:.4f}'):>9s} {f(o.get('steps'), '{:d}'):>10s} "
              f"{f(p.get('steps'), '{:d}'):>10s} {f(o.get('tokens_per_s'), '{:.0f}'):>10s} "
              f"{f(p.get('tokens_per_s'), '{:.0f}'):>10s}")
        if o.get("bpb") is not None and p.get("bpb") is not None:
            ahead.append(o["bpb"] < p["bpb"])
        else:
            ahead.append(None)
    print()
    o300 = rows.get(300, rows.get(300.0, {})).get("mega", {}).get("bpb")
    t1 = "not measured (no 300 s budget)" if o300 is None else ("met" if o300 <= 1.9 else "not met") + f" ({o300:.4f})"
    t2 = "not measured" if not ahead or None in ahead else ("met" if all(ahead) else "not met")
    print(f"target: ours <= 1.9 bpb at 300 s: {t1}")
    print(f"target: ours ahead of the peer at every budget: {t2}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", default=os.path.join(peer.ROOT, "data", "gcide.train"))
    ap.add_argument("--valid", default=os.path.join(peer.ROOT, "data", "gcide.valid"))
    ap.add_argument("--budget", type=float, default=300.0, help="seconds of training")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--eval-bytes", type=int, default=262144, help="held-out bytes scored (the first N of --valid)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr", type=float, default=2e-4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=10 ** 9)
    ap.add_argument("--json", action="store_true", help="print one JSON record")
    ap.add_argument("--report", metavar="RESULTS", help="print the table of a results file (JSON lines of both sides)")
    a = ap.parse_args(argv)
    if a.report:
        return report(a.report)
    if not (a.budget > 0 and math.isfinite(a.budget)):
        ap.error(f"--budget must be a positive number of seconds, got {a.budget}")
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
