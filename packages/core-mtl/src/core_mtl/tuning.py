"""Dev-only tuning on seeds apart from the reported ones (issue 49, item 4): each arm's learning
rate from ``LRS`` and the epoch budget from EW's and CORE's dev curves at ``BUDGETS``.

Runs are compared by the *anchored dev loss*: the mean over tasks of (dev loss / the dev loss of a
trivial predictor) -- majority-class segmentation, the mean training depth, the plane normal
(0, 0, 1). It is comparable across arms, learning rates and budgets (the trainer's own selection
score is relative to its first epoch, which is not), and 1.0 means "no better than the anchor".
Nothing here reads test or test_ood.

``python -m core_mtl.tuning [--budgets 4,8,16,32] [--lrs 1e-3,3e-3,1e-2] [--seed 1000]`` prints the
markdown table (for ``docs/experiments.md``) and writes ``--out`` JSON with every curve.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from .config import TaskSpec, TrainConfig
from .train import Batch, train

LRS = (1e-3, 3e-3, 1e-2)  # the grid
BUDGETS = (4, 8, 16, 32)  # epochs, for EW and CORE (the cosine schedule spans each budget)
TUNE_SEED = 1000  # reproduce() reports seeds 0, 1, 2 (default): the tuning data never overlap


def anchor_losses(tasks: tuple[TaskSpec, ...], train_b: Batch, dev: Batch) -> np.ndarray:
    """Dev task losses of the trivial predictors fitted on train: segmentation = the training
    class frequencies as a constant softmax (cross-entropy = their cross-entropy with dev's),
    depth = the mean training depth, normal = (0, 0, 1) everywhere."""
    out = []
    for t in tasks:
        y, yd = train_b.targets[t.name], dev.targets[t.name]
        if t.kind == "segmentation":
            freq = torch.bincount(y[y >= 0].long().reshape(-1), minlength=t.classes).double() + 1.0
            logp = (freq / freq.sum()).log()
            out.append(float(-logp[yd[yd >= 0].long()].mean()))
        elif t.kind == "depth":
            mu = y[y > 0].double().mean()
            out.append(float((yd[yd > 0].double() - mu).abs().mean()))
        elif t.kind == "normal":
            mask = yd.abs().sum(1) > 0
            n = torch.nn.functional.normalize(yd.double(), dim=1)[:, 2]  # cos with (0, 0, 1)
            out.append(float((1 - n)[mask].mean()))
        else:
            p = y.double().mean(0).clamp(1e-6, 1 - 1e-6)
            out.append(float(-(yd * p.log() + (1 - yd) * (1 - p).log()).mean()))
    return np.asarray(out)


def anchored(dev_loss_curve, anchors: np.ndarray) -> list[float]:
    """Per epoch: mean over tasks of dev loss / anchor dev loss."""
    return [float(np.mean(np.asarray(dl) / anchors)) for dl in dev_loss_curve]


def run_arm(name: str, kw: dict, tasks, train_b: Batch, dev: Batch, anchors, epochs: int, lr: float,
            seed: int, batch_size: int) -> dict:
    """One arm (``single`` trains one network per task) -> its anchored dev curve, best epoch and
    best value, per-task train / dev losses per epoch."""
    base = TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
    if name == "single":
        curves = []
        for i, t in enumerate(tasks):
            one = lambda b, n=t.name: Batch(b.image, {n: b.targets[n]})  # noqa: E731
            h = train(base.with_(method="single"), (t,), one(train_b), one(dev)).history
            curves.append([dl[0] / anchors[i] for dl in h["dev_loss"]])
        curve = np.mean(curves, 0).tolist()
        hist = {}
    else:
        kw = {"method": "core" if name.startswith("core") else name, **kw}
        hist = train(base.with_(**kw), tasks, train_b, dev).history
        curve = anchored(hist["dev_loss"], anchors)
    best = int(np.argmin(curve))
    return {"arm": name, "lr": lr, "epochs": epochs, "dev_anchored": curve, "best_epoch": best + 1,
            "best": curve[best], "train_loss": hist.get("train_loss"), "dev_loss": hist.get("dev_loss")}


def plateau_budget(results: list[dict], tol: float = 0.02) -> int:
    """Per arm, the smallest budget whose best anchored dev loss (over learning rates) is within
    ``tol`` (relative) of that arm's best budget -- more epochs buy < 2%; the largest over arms."""
    budgets = sorted({r["epochs"] for r in results})
    out = []
    for a in sorted({r["arm"] for r in results}):
        per = {b: min(r["best"] for r in results if r["epochs"] == b and r["arm"] == a) for b in budgets}
        best = min(per.values())
        out.append(next(b for b in budgets if per[b] <= best * (1 + tol)))
    return max(out)


def tune(arms: dict, *, lrs=LRS, budgets=BUDGETS, budget_arms=("ew", "core"), budget_lrs=None,
         lr_budget: int | None = None, seed: int = TUNE_SEED, size: int = 32, n_train: int = 600,
         n_dev: int = 120, batch_size: int = 32, log=None, on_run=None) -> dict:
    """Step 1: ``budget_arms`` at each of ``budget_lrs`` (default ``lrs``) and every budget -> the
    plateau budget. Step 2: every arm at every lr at ``lr_budget`` (default: the plateau budget)
    -> its lr (lowest anchored dev loss). Returns every run."""
    from .experiments import TASKS, to_batch
    from .synthetic import make_split

    full = make_split(n_train, size, seed, split="train")
    n_tr = n_train - n_dev
    train_b = to_batch({k: v[:n_tr] for k, v in full.items()})
    dev = to_batch({k: v[n_tr:] for k, v in full.items()})
    anchors = anchor_losses(TASKS, train_b, dev)
    runs = []

    def go(name, epochs, lr):
        t0 = time.process_time()
        r = run_arm(name, arms[name], TASKS, train_b, dev, anchors, epochs, lr, seed, batch_size)
        r["cpu_seconds"] = time.process_time() - t0
        runs.append(r)
        if log:
            log(f"{name} lr={lr:g} epochs={epochs}: best {r['best']:.4f} at epoch {r['best_epoch']} "
                f"({r['cpu_seconds']:.0f} CPU s)")
        if on_run:
            on_run({"seed": seed, "anchors": anchors.tolist(), "runs": runs})
        return r

    for b in budgets:
        for a in budget_arms:
            for lr in budget_lrs or lrs:
                go(a, b, lr)
    budget = plateau_budget([r for r in runs if r["arm"] in budget_arms])
    at = lr_budget or budget
    chosen = {}
    for a in arms:
        cand = [r for r in runs if r["arm"] == a and r["epochs"] == at]
        for lr in lrs:
            if not any(r["lr"] == lr for r in cand):
                cand.append(go(a, at, lr))
        chosen[a] = min(cand, key=lambda r: r["best"])["lr"]
    return {"seed": seed, "anchors": anchors.tolist(), "budget": budget, "lr_budget": at, "lr": chosen,
            "runs": runs,
            "grid": {"lrs": list(lrs), "budgets": list(budgets), "budget_arms": list(budget_arms)}}


def table(res: dict) -> str:
    """Markdown: the budget pass and each arm's lr pass (anchored dev loss at the best epoch)."""
    lines = [f"Tuning seed {res['seed']} (reported seeds are 0-2); anchored dev loss = mean over tasks "
             "of dev loss / trivial-predictor dev loss (anchors: " + ", ".join(
                 f"{n} {v:.3f}" for n, v in zip(("seg CE", "depth L1", "normal 1-cos"), res["anchors"]))
             + "); lower is better, 1.0 = the anchor.", "",
             "| arm | lr | epochs | best dev (anchored) | best epoch | CPU s |", "|---|---|---|---|---|---|"]
    for r in sorted(res["runs"], key=lambda r: (r["arm"], r["epochs"], r["lr"])):
        lines.append(f"| {r['arm']} | {r['lr']:g} | {r['epochs']} | {r['best']:.4f} | {r['best_epoch']} | "
                     f"{r['cpu_seconds']:.0f} |")
    lines += ["", f"Plateau budget: {res['budget']} epochs (within 2% of the best budget's anchored dev "
              f"loss); lr chosen at {res['lr_budget']} epochs: "
              + ", ".join(f"{a} {lr:g}" for a, lr in res["lr"].items())]
    return "\n".join(lines)


def main(argv=None) -> int:
    from .experiments import ARMS

    p = argparse.ArgumentParser(prog="python -m core_mtl.tuning", description=__doc__.split("\n\n")[0])
    floats = lambda s: tuple(float(x) for x in s.split(","))  # noqa: E731
    ints = lambda s: tuple(int(x) for x in s.split(","))  # noqa: E731
    p.add_argument("--lrs", type=floats, default=LRS)
    p.add_argument("--budgets", type=ints, default=BUDGETS)
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms for the lr pass")
    p.add_argument("--budget-arms", default="ew,core", help="arms of the budget pass")
    p.add_argument("--budget-lrs", type=floats, default=None, help="lrs of the budget pass (default --lrs)")
    p.add_argument("--lr-budget", type=int, default=None, help="epochs of the lr pass (default: the plateau)")
    p.add_argument("--seed", type=int, default=TUNE_SEED)
    p.add_argument("--out", default=None, help="JSON with every run and curve")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    arms = {n: ARMS[n] for n in a.arms.split(",")}
    from icml26_shared.io import write_json

    save = (lambda r: write_json(a.out, r, indent=None)) if a.out else None  # after every run
    res = tune(arms, lrs=a.lrs, budgets=a.budgets, budget_arms=tuple(a.budget_arms.split(",")),
               budget_lrs=a.budget_lrs, lr_budget=a.lr_budget, seed=a.seed,
               log=lambda m: print(m, file=sys.stderr, flush=True), on_run=save)
    if save:
        save(res)
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
