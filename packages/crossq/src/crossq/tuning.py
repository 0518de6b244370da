"""Training budget and learning rate of the CrossQ family, chosen on dev (issue 59, item 1).

For ``crossq``, ``tokenwise`` (no document context) and ``crossq-recon`` (reconstruction only)
separately, every ``(steps, lr, queries per step)`` of a grid is trained from the same residual
k-means start (one seed, one budget) and scored on the **dev** queries only; the best dev MRR@10
wins. The soft-to-hard schedule is a function of the total steps, so each total is its own run
(a point on a longer run's curve is not a shorter run). Each run records learning curves every
``every`` steps: training loss, dev MRR@10 (the reproduction's pool re-ranking), dev listwise KL
to the full-precision teacher and the share of codes that differ from the greedy-RQ start.

    python -m crossq.tuning --scale quick --budget 4 --out /tmp/crossq-tune

writes ``results.json`` (curves, every run's final dev metrics, the choice per method). Nothing
here reads the test queries. ``python -m crossq.tuning --summarize RESULTS...`` prints finished
sweeps' curves as one table and each method's choice on the grid every method ran.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from icml26_shared import Results, UserError
from icml26_shared.errors import cli_entry
from icml26_shared.registry import package_version

from .config import SCALES, CrossQConfig

#: the CrossQ family's trained members and what each changes from CrossQ's defaults
TUNED = {"crossq": {}, "tokenwise": {"context": False}, "crossq-recon": {"w_kl": 0.0, "w_margin": 0.0}}


def prepare(scale: str) -> dict:
    """The reproduction's task at ``scale`` (same corpus, encoder head, splits and training set),
    with the dev queries' candidate pools and teacher lists."""
    from .corpus import build_task
    from .experiments import _embed, choose_projection, pool_gathers, split_queries
    from .indexer import offsets_of
    from .projection import project
    from .train import build_training_set

    rc = SCALES[scale]
    task = build_task(rc.n_docs, rc.n_docs, seed=0)
    Hd, Hq, W_pca, _ = _embed(task, rc)
    pos_of = {d: i for i, d in enumerate(task.doc_ids)}
    positives = np.array([pos_of[next(iter(task.qrels[q]))] for q in task.query_ids])
    split = split_queries(len(Hq), rc)
    scratch = Results(package="crossq", version=package_version("crossq"), scale=scale, seed=0)
    W, _, S = choose_projection(scratch, Hd, Hq, W_pca, split, positives, rc)
    n_dev = len(split["dev"])
    docs = project(Hd, W)
    X, off = np.concatenate(docs), offsets_of(docs)
    Xt, offt = torch.from_numpy(X), torch.from_numpy(off)
    Q = [torch.from_numpy(q) for q in project(Hq, W)]
    pools = S[:n_dev].topk(min(rc.pool, S.shape[1]), dim=1).indices.numpy()  # dev rows of S come first
    dev_q = [Q[i] for i in split["dev"]]
    return {"rc": rc, "X": X, "off": off, "Xt": Xt, "dev_q": dev_q, "pools": pools,
            "gathers": pool_gathers(off, pools), "dev_pos": positives[split["dev"]],
            "training": build_training_set([Q[i] for i in split["train"]], Xt, offt, rc.n_candidates,
                                           positives[split["train"]].tolist()),
            "dev_set": build_training_set(dev_q, Xt, offt, rc.n_candidates,
                                          positives[split["dev"]].tolist())}


def dev_point(ctx: dict, model, start_codes: np.ndarray) -> dict[str, float]:
    """Dev MRR@10 (pool re-ranking), dev listwise KL and the code flip rate vs the greedy start."""
    from .experiments import pool_scores, pooled_metrics
    from .metrics import code_flip_rate
    from .train import ranking_kl

    with torch.no_grad():
        codes, x_hat = model.encode(ctx["Xt"], torch.from_numpy(ctx["off"]))
    S = pool_scores(ctx["dev_q"], x_hat, ctx["off"], ctx["pools"], ctx["gathers"])
    mrr = float(pooled_metrics(S, ctx["pools"], ctx["dev_pos"], None)["mrr@10"].mean())
    return {"dev mrr@10": mrr, "dev listwise KL": ranking_kl(model, ctx["Xt"], ctx["off"], ctx["dev_set"]),
            "code flip rate": code_flip_rate(codes.numpy(), start_codes)["code"]}


def run(ctx: dict, method: str, budget: int, steps: int, lr: float, qps: int, every: int,
        init: np.ndarray, start_codes: np.ndarray, seed: int = 0) -> dict[str, list[float]]:
    """One training run with its curves: ``{"step", "train loss", "dev mrr@10", ...}``."""
    from .train import fit_crossq

    cfg = replace(CrossQConfig(bytes_per_token=budget, candidates=ctx["rc"].n_candidates),
                  steps=steps, lr=lr, queries_per_step=qps, **TUNED[method])
    curve: dict[str, list[float]] = {"step": [], "train loss": []}

    def checkpoint(step, model, loss):
        curve["step"].append(step)
        curve["train loss"].append(loss)
        for k, v in dev_point(ctx, model, start_codes).items():
            curve.setdefault(k, []).append(v)
        model.train()

    fit_crossq(ctx["X"], ctx["off"], ctx["training"], cfg, seed, init=init, every=every,
               checkpoint=checkpoint)
    return curve


def tune(scale: str, budget: int, methods: list[str], steps: list[int], lrs: list[float],
         qps: list[int], every: int, seed: int = 0, log: bool = True,
         out: Path | None = None) -> Results:
    """The sweep; with ``out``, ``out/results.json`` is rewritten after every run (a stopped
    sweep keeps what it finished)."""
    from icml26_shared.io import write_json

    from .core import residual_kmeans
    from .metrics import greedy_start_codes
    from .train import init_quantizer

    ctx = prepare(scale)
    res = Results(package="crossq", version=package_version("crossq"), scale=scale, seed=seed)
    from .experiments import train_sample

    S, _ = train_sample(ctx["X"], ctx["rc"])  # the reproduction's start: k-means on its fixed sample
    init = residual_kmeans(S, budget, 256, 20, seed, points_per_centroid=-(-len(S) // 256))
    start = init_quantizer(ctx["X"], CrossQConfig(bytes_per_token=budget), seed, init)
    start_codes = greedy_start_codes(start, ctx["X"], ctx["off"], init)
    exp = f"tuning at {budget} B/token (seed {seed}, dev)"
    for method in methods:
        best = None
        for n in steps:
            for lr in lrs:
                for q in qps:
                    t0 = time.process_time()
                    c = run(ctx, method, budget, n, lr, q, min(every, n), init, start_codes, seed)
                    cpu = time.process_time() - t0
                    name = f"{method} steps={n} lr={lr:g} qps={q}"
                    for metric, direction in (("dev mrr@10", "higher"), ("dev listwise KL", "lower"),
                                              ("train loss", "lower"), ("code flip rate", "higher")):
                        pts = [(s, v) for s, v in zip(c["step"], c[metric], strict=True) if np.isfinite(v)]
                        res.add_curve(exp, name, metric, [p[0] for p in pts], [p[1] for p in pts],
                                      "dev" if metric.startswith("dev") else "train", seed=seed,
                                      direction=direction, budget=n)
                    final = {k: c[k][-1] for k in ("dev mrr@10", "dev listwise KL", "code flip rate")}
                    for k, v in final.items():
                        res.add(exp, name, k, v, split="dev", steps=n, lr=lr, queries_per_step=q)
                    res.add(exp, name, "cpu_s", cpu, unit="s")
                    if log:
                        print(f"  {name:<40} dev MRR@10 {final['dev mrr@10']:.4f} (start "
                              f"{c['dev mrr@10'][0]:.4f})  KL {final['dev listwise KL']:.4f}  flips "
                              f"{final['code flip rate']:.3f}  {cpu:.0f} CPU-s", file=sys.stderr, flush=True)
                    if out is not None:
                        write_json(Path(out) / "results.json", res.to_dict())
                    if best is None or final["dev mrr@10"] > best[0]:
                        best = (final["dev mrr@10"], n, lr, q)
        res.add(exp, method, "chosen on dev", best[0], split="dev", steps=best[1], lr=best[2],
                queries_per_step=best[3], start_dev_mrr=c["dev mrr@10"][0])
    res.notes.append(f"{scale} task, {budget} B/token, seed {seed}: every run from the same residual "
                     f"k-means start; grid steps {steps}, lr {lrs}, queries per step {qps}; dev only.")
    return res


CURVE_METRICS = ("dev mrr@10", "dev listwise KL", "code flip rate", "train loss")


def _runs(results: list[Results]) -> dict[tuple[str, int, float, int], dict[str, dict[float, float]]]:
    """``{(method, steps, lr, queries per step): {metric: {step: value}}}`` from sweeps' results."""
    runs: dict = {}
    for res in results:
        for c in res.curves:
            method, *kv = c.method.split()
            if not kv or not c.experiment.startswith("tuning at"):
                continue
            f = dict(x.split("=") for x in kv)
            key = (method, int(f["steps"]), float(f["lr"]), int(f["qps"]))
            runs.setdefault(key, {})[c.metric] = dict(zip(c.steps, c.values, strict=True))
    return runs


def _load(path: Path) -> Results:
    try:
        return Results.from_json(path)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise UserError(f"{path}: not a readable results.json of `python -m crossq.tuning` ({e})") from None


def summarize(results: list[Results]) -> str:
    """Every run's curves as one markdown table, and each method's dev choice on the grid that
    every method ran: by the final point and by the best checkpoint (step > 0) of any run."""
    runs = _runs(results)
    if not runs:
        raise UserError("no tuning curves in the given results (files of `python -m crossq.tuning`)")
    lines = ["| method | steps | lr | q/step | checkpoint | dev MRR@10 | dev listwise KL | code flip rate "
             "| train loss |", "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(runs):
        r = runs[key]
        for step in sorted(r["dev mrr@10"]):
            cells = [f"{r[m].get(step, float('nan')):.4f}" for m in CURVE_METRICS]
            lines.append(f"| {key[0]} | {key[1]} | {key[2]:g} | {key[3]} | {step:g} | " + " | ".join(cells) + " |")
    methods = sorted({k[0] for k in runs})
    grid = set.intersection(*({k[1:] for k in runs if k[0] == m} for m in methods))
    lines += ["", f"Grid every method ran (steps, lr, queries per step): {sorted(grid)}", "",
              "| method | start | by final point | by best checkpoint |", "|---|---|---|---|"]
    for m in methods:
        mine = {k: runs[k]["dev mrr@10"] for k in runs if k[0] == m and k[1:] in grid}
        start = next(iter(mine.values()))[0.0]
        final = max(mine, key=lambda k: mine[k][max(mine[k])])
        ckpt = max(((k, s) for k in mine for s in mine[k] if s > 0), key=lambda ks: mine[ks[0]][ks[1]])
        lines.append(f"| {m} | {start:.4f} | {mine[final][max(mine[final])]:.4f} (steps {final[1]}, lr "
                     f"{final[2]:g}; {mine[final][max(mine[final])] - start:+.4f}) | "
                     f"{mine[ckpt[0]][ckpt[1]]:.4f} (step {ckpt[1]:g} of {ckpt[0][1]}, lr {ckpt[0][2]:g}; "
                     f"{mine[ckpt[0]][ckpt[1]] - start:+.4f}) |")
    return "\n".join(lines)


@cli_entry("python -m crossq.tuning")
def main(argv: list[str] | None = None) -> int:
    from icml26_shared.cli import ArgumentParser, nonneg_int, positive_int
    from icml26_shared.io import write_json

    p = ArgumentParser(prog="python -m crossq.tuning", description=__doc__.splitlines()[0])
    p.add_argument("--scale", default="quick", choices=sorted(SCALES))
    p.add_argument("--budget", type=positive_int, default=4)
    p.add_argument("--methods", nargs="+", default=list(TUNED), choices=list(TUNED))
    p.add_argument("--steps", nargs="+", type=positive_int, default=[300, 1000, 3000])
    p.add_argument("--lr", nargs="+", type=float, default=[5e-4, 2e-3])
    p.add_argument("--queries-per-step", nargs="+", type=positive_int, default=[4])
    p.add_argument("--every", type=positive_int, default=250)
    p.add_argument("--seed", type=nonneg_int, default=0)
    p.add_argument("--out", type=Path)
    p.add_argument("--summarize", nargs="+", type=Path, metavar="RESULTS",
                   help="print the curves and dev choices of finished sweeps' results.json; runs nothing")

    args = p.parse_args(argv)
    if args.summarize:
        print(summarize([_load(f) for f in args.summarize]))
        return 0
    if args.out is None:
        p.error("--out is required (or --summarize RESULTS...)")
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    res = tune(args.scale, args.budget, args.methods, args.steps, args.lr, args.queries_per_step,
               args.every, args.seed, out=args.out)
    write_json(args.out / "results.json", res.to_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
