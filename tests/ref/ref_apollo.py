#!/usr/bin/python3
"""Reference values of the optimizers and learning-rate schedules of src/train, from the OFFICIAL
code: class Apollo of fairseq/optim/apollo.py and the schedulers of fairseq/optim/lr_scheduler/
(linear_decay_schedule.py, inverse_square_root_schedule.py, cosine_lr_scheduler.py) of
facebookresearch/mega, and torch.optim.AdamW. Writes tests/fixtures/optim/optim.safetensors,
read by tests/t64_optim.c.

No official code is copied here: the files are read at run time from the git mirror of
facebookresearch/mega (--repo, a git directory) and executed with stubs for fairseq's
registration decorators and base classes (the classes' own code runs unchanged).

Optimizer cases (float64, torch single-threaded): a parameter set of three tensors (the first two
in the weight-decay group, the third not, as the library decays only tensors flagged "decay"),
fixed initial values, one gradient per step and one learning rate per step (a warm-up and a
decay); stored: w0.<i>, g.<s>.<i>, w.<s>.<i> (after step s) and the final state
state.<name>.<i>, under the prefix "<case>.". Schedule cases: lr.<case>[k] = step_update(k), the
rate of 0-based update k (fairseq's trainer calls step_update(num_updates) before each update).

Run with /usr/bin/python3 (torch 1.13):
  /usr/bin/python3 tests/ref/ref_apollo.py [--repo /work/.mirror/facebookresearch+mega/repo]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "optim", "optim.safetensors")
SIZES = [6, 12, 5]
DECAY = [1, 1, 0]
STEPS = 7


def official_source(repo, path):
    return subprocess.run(["git", "--git-dir", repo, "show", "HEAD:" + path], check=True, capture_output=True,
                          text=True).stdout


def load_apollo(repo):
    """class Apollo of the official file, with fairseq's registration stubbed out"""
    fq = types.ModuleType("fairseq")
    fo = types.ModuleType("fairseq.optim")
    fo.FairseqOptimizer = object
    fo.register_optimizer = lambda name: (lambda cls: cls)
    fq.optim = fo
    sys.modules["fairseq"], sys.modules["fairseq.optim"] = fq, fo
    ns = {"__name__": "official_apollo"}
    exec(compile(official_source(repo, "fairseq/optim/apollo.py"), "apollo.py", "exec"), ns)
    return ns["Apollo"]


class _Opt:
    """the stand-in for a FairseqOptimizer: the schedulers only set and get the rate"""
    lr = None

    def set_lr(self, lr):
        self.lr = lr

    def get_lr(self):
        return self.lr


def load_scheduler(repo, fname, cls):
    pkg = types.ModuleType("lrs")

    class FairseqLRScheduler:
        def __init__(self, args, optimizer):
            self.args, self.optimizer, self.best = args, optimizer, None

        def step(self, epoch, val_loss=None):
            pass

    pkg.FairseqLRScheduler = FairseqLRScheduler
    pkg.register_lr_scheduler = lambda name: (lambda c: c)
    src = official_source(repo, "fairseq/optim/lr_scheduler/" + fname).replace("from . import", "from lrs import")
    sys.modules["lrs"] = pkg
    ns = {"__name__": "official_" + cls}
    exec(compile(src, fname, "exec"), ns)
    return ns[cls]


def lrs_for(step):
    """the per-step learning rates of the optimizer cases: a warm-up, then a decay"""
    return [0.05 * min(1.0, (s + 1) / 3) * (0.8 ** max(0, s - 2)) for s in range(step)]


def run_case(make_opt, state_names, seed):
    g = torch.Generator().manual_seed(seed)
    ws = [torch.randn(n, generator=g, dtype=torch.float64) for n in SIZES]
    grads = [[torch.randn(n, generator=g, dtype=torch.float64) * (1 + s) ** 0.5 for n in SIZES] for s in range(STEPS)]
    params = [torch.nn.Parameter(w.clone()) for w in ws]
    opt = make_opt(params)
    lrs = lrs_for(STEPS)
    out = {"w0.%d" % i: w.numpy().copy() for i, w in enumerate(ws)}
    for s in range(STEPS):
        for grp in opt.param_groups:
            grp["lr"] = lrs[s]
        for i, p in enumerate(params):
            p.grad = grads[s][i].clone()
            out["g.%d.%d" % (s, i)] = grads[s][i].numpy().copy()
        opt.step()
        for i, p in enumerate(params):
            out["w.%d.%d" % (s, i)] = p.detach().numpy().copy()
    for i, p in enumerate(params):
        for sn, key in state_names:
            out["state.%s.%d" % (sn, i)] = opt.state[p][key].numpy().copy()
    return out, lrs


def groups(params, wd):
    return [{"params": [p for p, d in zip(params, DECAY) if d], "weight_decay": wd},
            {"params": [p for p, d in zip(params, DECAY) if not d], "weight_decay": 0.0}]


def optimizer_cases(Apollo):
    cases = []
    ap_state = [("exp_avg_grad", "exp_avg_grad"), ("approx_hessian", "approx_hessian"), ("update", "update")]
    seed = 11
    for rebound in ["constant", "belief"]:
        for wdt in [None, "L2", "decoupled", "stable"]:
            for wd in ([0.0, 0.1] if wdt is None else [0.1]):
                hp = dict(beta=0.9, eps=1e-4, rebound=rebound, weight_decay=wd, weight_decay_type=wdt)
                name = "apollo_%s_%s_wd%g" % (rebound, wdt or "auto", wd)
                mk = lambda ps, hp=hp: Apollo(groups(ps, hp["weight_decay"]), lr=1.0, **{k: v for k, v in hp.items() if k != "weight_decay"})
                out, lrs = run_case(mk, ap_state, seed)
                cases.append((name, dict(optimizer="apollo", apollo_beta=0.9, apollo_eps=1e-4, rebound=rebound,
                                         weight_decay_type=wdt or "auto", weight_decay=wd, lrs=lrs), out))
                seed += 1
    hp = dict(beta=0.8, eps=1e-3, rebound="belief", weight_decay=0.05, weight_decay_type="stable")
    mk = lambda ps: Apollo(groups(ps, 0.05), lr=1.0, beta=0.8, eps=1e-3, rebound="belief", weight_decay_type="stable")
    out, lrs = run_case(mk, ap_state, seed)
    cases.append(("apollo_belief_stable_beta08", dict(optimizer="apollo", apollo_beta=0.8, apollo_eps=1e-3, rebound="belief",
                                                      weight_decay_type="stable", weight_decay=0.05, lrs=lrs), out))
    for wd in [0.0, 0.1]:
        mk = lambda ps, wd=wd: torch.optim.AdamW(groups(ps, wd), lr=1.0, betas=(0.9, 0.98), eps=1e-8, foreach=False)
        out, lrs = run_case(mk, [("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq")], 100 + int(wd * 10))
        cases.append(("adamw_wd%g" % wd, dict(optimizer="adamw", beta1=0.9, beta2=0.98, eps=1e-8, weight_decay=wd, lrs=lrs), out))
    return cases


def schedule_cases(repo):
    LD = load_scheduler(repo, "linear_decay_schedule.py", "LinearDecaySchedule")
    IS = load_scheduler(repo, "inverse_square_root_schedule.py", "InverseSquareRootSchedule")
    CO = load_scheduler(repo, "cosine_lr_scheduler.py", "CosineSchedule")
    N = 40
    specs = [  # name, class, kind, lr, min_lr, warmup, steps, warmup_init_lr, end_lr
        ("linear_decay_w8", LD, "linear_decay", 3e-3, 0.0, 8, 30, -1, 0.0),
        ("linear_decay_w8_init_end", LD, "linear_decay", 3e-3, 0.0, 8, 30, 1e-5, 2e-4),
        ("linear_decay_w0", LD, "linear_decay", 1e-3, 0.0, 0, 25, -1, 1e-5),
        ("inverse_sqrt_w10", IS, "inverse_sqrt", 5e-4, 0.0, 10, 30, -1, 0.0),
        ("inverse_sqrt_w7_init", IS, "inverse_sqrt", 2e-3, 0.0, 7, 30, 1e-6, 0.0),
        ("cosine_fairseq_w5", CO, "cosine_fairseq", 2e-3, 1e-5, 5, 30, -1, 0.0),
        ("cosine_fairseq_w0", CO, "cosine_fairseq", 1e-3, 0.0, 0, 20, -1, 0.0),
        ("cosine_fairseq_w6_init", CO, "cosine_fairseq", 1e-3, 1e-4, 6, 33, 0.0, 0.0),
    ]
    cases = []
    for name, cls, kind, lr, min_lr, warmup, steps, init, end in specs:
        args = argparse.Namespace(lr=[lr], warmup_updates=warmup, warmup_init_lr=init, warmup_power=1,
                                  end_learning_rate=end, total_num_update=steps, min_lr=min_lr, t_mult=1,
                                  lr_period_updates=-1, lr_shrink=0.1, max_update=steps)
        sch = cls(args, _Opt())
        vals = [sch.step_update(k) for k in range(N)]
        cases.append((name, dict(kind=kind, lr=lr, min_lr=min_lr, warmup=warmup, steps=steps, warmup_init_lr=init,
                                 end_lr=end, n=N), np.array(vals, dtype=np.float64)))
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", default="/work/.mirror/facebookresearch+mega/repo", help="git directory of facebookresearch/mega")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()
    torch.set_num_threads(1)
    Apollo = load_apollo(a.repo)
    tensors, meta_opt, meta_sched = {}, [], []
    for name, hp, out in optimizer_cases(Apollo):
        hp["name"] = name
        meta_opt.append(hp)
        for k, v in out.items():
            tensors["%s.%s" % (name, k)] = v
    for name, sp, vals in schedule_cases(a.repo):
        sp["name"] = name
        meta_sched.append(sp)
        tensors["lr.%s" % name] = vals
    meta = {"optimizers": json.dumps(meta_opt), "schedules": json.dumps(meta_sched), "sizes": json.dumps(SIZES),
            "decay": json.dumps(DECAY), "steps": str(STEPS), "torch_version": torch.__version__,
            "generator": "tests/ref/ref_apollo.py"}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    st.save(a.out, tensors, meta)
    print("wrote %s: %d optimizer cases, %d schedule cases, %d tensors" % (a.out, len(meta_opt), len(meta_sched), len(tensors)))


if __name__ == "__main__":
    main()
