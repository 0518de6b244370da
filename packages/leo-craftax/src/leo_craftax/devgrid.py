"""Each gridworld method's lr, minibatch and input normalisation chosen on a dev map.

The grid holds our CPU value and each method's authors' value, one setting changed at a time
from ours (lr 3e-3, minibatch 256, BatchRenorm on the input). The authors' values [C]: lr 2e-4
(``leo.py``, ``pqn.py``, ``dual_leo_pqn.py``; their gridworld sweep ``sweeps/gridworld/
leo_gridworld.yaml`` keeps ``leo.py``'s), 1e-4 (PQN + HER, the README command); minibatch 512
(``leo.py``, ``dual_leo_pqn.py``), 256 (``pqn.py``: ours), 2048 (PQN + HER's README command: it
does not divide the 1024 x 3 rows of a quick update, so not in the grid); BatchRenorm on the
input (every script's ``norm_input`` default: ours; their hidden layers' LayerNorm is
``norm_type``, not this knob). Points: ours, the authors' lr, minibatch 512, BatchRenorm off (the
full 2 x 2 x 2 product is ``grid(algo, full=True)``).
Every point trains ``quick``'s budget on the dev map
(``DEV_MAP_SEED``: another wall layout of the same 10x10 size; ``quick`` runs on map 0) with
the dev seeds, and the point with the highest final success over all goals is kept
(``experiments.DEV_CHOICE`` records it; ``docs/experiments.md`` the table). The quick table's
map and seeds are never seen here. ``leo_commanded`` (LEO with its mechanism removed) takes
LEO's choice so that LEO − it changes nothing but the loss.

``python -m leo_craftax.devgrid OUT.csv [--methods leo,pqn,...] [--seeds 2]`` writes one row per
(method, point, seed, evaluation point).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import time

import numpy as np

DEV_MAP_SEED = 1  # [R] the dev map; quick's is 0
AUTHORS_LR = {"leo": 2e-4, "pqn": 2e-4, "pqn_her": 1e-4, "dual_leo_pqn": 2e-4}  # [C]
GRID_METHODS = ("leo", "pqn", "pqn_her", "dual_leo_pqn")


OURS = {"lr": 3e-3, "minibatch_size": 256, "norm": "batchrenorm"}  # [R] gridworld_cpu's


def grid(algo: str, full: bool = False) -> list[dict]:
    """The points of ``algo``'s grid: ours, then one setting changed at a time (the authors' lr,
    minibatch 512, BatchRenorm off); ``full``: every combination of the three."""
    if full:
        return [{"lr": lr, "minibatch_size": mb, "norm": norm}
                for lr, mb, norm in itertools.product((3e-3, AUTHORS_LR[algo]), (256, 512),
                                                      ("batchrenorm", "none"))]
    return [OURS, {**OURS, "lr": AUTHORS_LR[algo]}, {**OURS, "minibatch_size": 512},
            {**OURS, "norm": "none"}]


def _done(out_csv: str | None) -> list[dict]:
    """The rows of an earlier, interrupted run of the same grid (its points are not rerun)."""
    try:
        with open(out_csv or "", newline="") as f:
            return [{**r, "lr": float(r["lr"]), "minibatch_size": int(r["minibatch_size"]),
                     "seed": int(r["seed"]), "steps": int(r["steps"]),
                     "success": float(r["success"]), "cpu_s": float(r["cpu_s"])}
                    for r in csv.DictReader(f)]
    except FileNotFoundError:
        return []


def run(methods=GRID_METHODS, seeds=(100, 101), out_csv: str | None = None,
        log=print, budget: int = 1, points: tuple[int, ...] | None = None) -> list[dict]:
    """Train every grid point of ``methods`` on the dev map, point by point across the methods
    (every method's first point, then every method's second, ...), skipping the points an
    interrupted run left in ``out_csv``; one row per (method, point, seed, evaluation point):
    ``steps``, ``success`` (mean over goals), ``cpu_s`` of the point. ``budget``: multiples of
    quick's env steps (and of its evaluation points, so the curve keeps quick's spacing);
    ``points``: indices into ``grid(algo)`` to train (default all)."""
    from .config import gridworld_cpu
    from .experiments import SETTINGS
    from .train import train_seeds

    s = SETTINGS["quick"]
    rows = _done(out_csv)
    done = {(r["method"], r["lr"], r["minibatch_size"], r["norm"]) for r in rows}
    idx = range(len(grid(methods[0]))) if points is None else points
    todo = [(algo, p) for i in idx for algo in methods for p in grid(algo)[i:i + 1]]
    for algo, point in todo:
        if (algo, point["lr"], point["minibatch_size"], point["norm"]) in done:
            continue
        cfg = gridworld_cpu(algo, env_size=s["size"], env_map_seed=DEV_MAP_SEED,
                            total_timesteps=s["steps"] * budget, num_evals=s["evals"] * budget,
                            **point)
        c0 = time.process_time()
        success = np.asarray(train_seeds(cfg, list(seeds))["success"]).mean(-1)  # [S, P]
        cpu = time.process_time() - c0
        steps = np.linspace(0, cfg.num_updates * cfg.num_envs * cfg.num_steps, cfg.num_evals + 1)
        for i, seed in enumerate(seeds):
            for st, v in zip(steps, success[i], strict=True):
                rows.append({"method": algo, **point, "seed": seed, "steps": int(st),
                             "success": float(v), "cpu_s": cpu})
        log(f"{algo} {point}: final {success[:, -1].mean():.3f} "
            f"(curve {np.round(success.mean(0), 3).tolist()}), {cpu:.0f} CPU-s", flush=True)
        if out_csv:
            with open(out_csv, "w", newline="") as f:
                w = csv.DictWriter(f, list(rows[0]))
                w.writeheader()
                w.writerows(rows)
    return rows


def choose(rows: list[dict]) -> dict[str, dict]:
    """Per method, the grid point with the highest final success (mean over the dev seeds)."""
    last = max(r["steps"] for r in rows)
    best: dict[str, tuple[float, dict]] = {}
    for algo in {r["method"] for r in rows}:
        finals: dict[tuple, list[float]] = {}
        for r in rows:
            if r["method"] == algo and r["steps"] == last:
                finals.setdefault((r["lr"], r["minibatch_size"], r["norm"]), []).append(r["success"])
        key = max(finals, key=lambda k: np.mean(finals[k]))
        best[algo] = (float(np.mean(finals[key])),
                      {"lr": key[0], "minibatch_size": key[1], "norm": key[2]})
    return {a: {**p, "dev_success": v} for a, (v, p) in best.items()}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m leo_craftax.devgrid")
    ap.add_argument("out_csv")
    ap.add_argument("--methods", default=",".join(GRID_METHODS))
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--budget", type=int, default=1, help="multiples of quick's env steps")
    ap.add_argument("--points", default=None, help="grid point indices, e.g. 0,2 (default all)")
    a = ap.parse_args()
    got = run(a.methods.split(","), tuple(100 + i for i in range(a.seeds)), a.out_csv,
              budget=a.budget, points=None if a.points is None else
              tuple(int(i) for i in a.points.split(",")))
    for algo, p in sorted(choose(got).items()):
        print(algo, p)
