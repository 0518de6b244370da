"""Issue 60, item 5: one-thread CPU cost of a training epoch (ml-100k, eta = 1 uniform noise,
d = 32, L = 2, batch 8192 = 7 steps), an earlier gcib (a git revision, imported as ``gcib_before``)
and the working tree's side by side in one process, with each method's loss and gradients checked
equal on one batch. CPU seconds (``time.process_time``), median of ``--reps`` epochs, the two
versions' epochs alternating.

    uv run --no-sync python packages/gcib/scripts/epoch_cost.py --before 31248ac --reps 5

``--profile METHOD`` prints torch.profiler's table of one epoch of METHOD (working tree).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _import_before(rev: str):
    root = Path(subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip())
    tmp = Path(tempfile.mkdtemp()) / "gcib_before"
    tmp.mkdir()
    names = subprocess.check_output(["git", "ls-tree", "--name-only", f"{rev}:packages/gcib/src/gcib"],
                                    text=True, cwd=root).split()
    for n in names:
        if n.endswith(".py"):
            (tmp / n).write_text(subprocess.check_output(["git", "show", f"{rev}:packages/gcib/src/gcib/{n}"],
                                                         text=True, cwd=root))
    sys.path.insert(0, str(tmp.parent))
    import gcib_before.baselines as bb
    import gcib_before.config as cb
    import gcib_before.model as mb
    return mb, bb, cb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="31248ac", help="git revision of the earlier gcib (default: 0.1.3)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--methods", default="lightgcn,lightgcn-merged,mbgcn,cml,gcib-no-gib,gcib")
    ap.add_argument("--profile", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    from gcib import baselines as ba
    from gcib import config as ca
    from gcib import inject_noise, leave_one_out, load_ml100k
    from gcib import model as ma

    data = inject_noise(load_ml100k(), 1.0, "uniform", seed=1000)
    split = leave_one_out(data)
    tu, ti = split.train[data.target]
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(tu))
    batches = [tuple(torch.as_tensor(x) for x in (tu[b], ti[b], rng.integers(0, data.n_items, len(b))))
               for b in (perm[s:s + 8192] for s in range(0, len(perm), 8192))]

    def epoch(m, mdl, opt, seed):
        gen = torch.Generator().manual_seed(seed)
        for u, i, j in batches:
            opt.zero_grad()
            m._losses(mdl, u, i, j, gen).backward()
            opt.step()

    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        mdl = ma.GCIBModel(split, ba.method_config(a.profile, ca.TrainConfig(dim=32, layers=2)))
        opt = torch.optim.Adam(mdl.parameters(), lr=1e-2)
        epoch(ma, mdl, opt, 0)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            epoch(ma, mdl, opt, 1)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
        return
    versions = (("before", *_import_before(a.before)), ("after", ma, ba, ca))
    print("| method | before CPU-s/epoch | × LightGCN | after CPU-s/epoch | × LightGCN | loss diff | max grad diff |")
    print("|---|---|---|---|---|---|---|")
    base = {}
    for name in a.methods.split(","):
        res, runs = {}, {}
        for tag, m, b, c in versions:
            mdl = m.GCIBModel(split, b.method_config(name, c.TrainConfig(dim=32, layers=2)))
            opt = torch.optim.Adam(mdl.parameters(), lr=1e-2)
            u, i, j = batches[0]
            mdl.zero_grad()
            loss = m._losses(mdl, u, i, j, torch.Generator().manual_seed(5))
            loss.backward()
            res[tag + "_check"] = (float(loss), [p.grad.detach().clone() for p in mdl.parameters() if p.grad is not None])
            epoch(m, mdl, opt, 0)  # warm-up
            runs[tag] = (m, mdl, opt)
        ts = {tag: [] for tag in runs}
        for r in range(a.reps):  # before and after alternate, so load drift hits both alike
            for tag, (m, mdl, opt) in runs.items():
                t = time.process_time()
                epoch(m, mdl, opt, r + 1)
                ts[tag].append(time.process_time() - t)
        res.update({tag: float(np.median(v)) for tag, v in ts.items()})
        (la, ga), (lb, gb) = res["after_check"], res["before_check"]
        gd = max(float((x - y).abs().max()) for x, y in zip(ga, gb, strict=True))
        base.setdefault("before", res["before"])
        base.setdefault("after", res["after"])
        print(f"| {name} | {res['before']:.3f} | {res['before'] / base['before']:.2f}× | {res['after']:.3f} | "
              f"{res['after'] / base['after']:.2f}× | {abs(la - lb):.1e} | {gd:.1e} |", flush=True)

if __name__ == "__main__":
    main()
