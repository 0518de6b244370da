"""Choosing the search settings on the *train* instances only (never on held-out ones).

``python -m mths.tuning [--seeds 100,101] [--workers 2] [--out FILE.json]`` runs every candidate
of MTHS (population x p_transfer x schedule) and of EoH (population) at the quick budget (60
grammar calls, 0.2 s / 12 steps) on the shipped quick *train* set, with tuning seeds disjoint from
the reproduction's seeds (0, 1, 2), and ranks them by the train criterion the search itself
maximises: the mean over tasks of the archive's best train score / |classic's train score|
(higher is better). The winners are what ``config.SearchConfig`` holds; the README prints the
table this produced."""

from __future__ import annotations

import argparse
import itertools
import math
from dataclasses import replace

import numpy as np

from icml26_shared.io import print_json

from .config import SCALES, SearchConfig
from .llm import GrammarLLM
from .pipeline import norm_scores, run_search
from .sandbox import Limits

MTHS_GRID = {"pop": (4, 6), "p_transfer": (0.4, 0.8),
             "schedule": (("upper", "lower", "lower", "lower"), ("upper", "lower"))}
EOH_GRID = {"eoh_pop": (4, 6)}


def criterion(archive: dict, norm: dict[str, float], tasks) -> float:
    vals = [archive[t][0] / max(abs(norm[t]), 1e-9) if t in archive else -math.inf for t in tasks]
    return float(np.mean(vals))


def tune(seeds=(100, 101), workers: int = 2, scale: str = "quick", methods=("mths", "eoh")) -> list[dict]:
    from .experiments import load_set

    sc = SCALES[scale]
    tasks = list(sc.tasks)
    train = {t: load_set(sc.instance_set, "train", t) for t in tasks}
    lim = Limits(sc.train_time, sc.train_steps)
    norm = norm_scores(tasks, train, lim, workers)
    rows = []
    for method, grid in (("mths", MTHS_GRID), ("eoh", EOH_GRID)):
        if method not in methods:
            continue
        keys = list(grid)
        for vals in itertools.product(*(grid[k] for k in keys)):
            cfg = replace(SearchConfig(), **dict(zip(keys, vals)))
            crit = []
            for s in seeds:
                search, _, _ = run_search(method, tasks, train, GrammarLLM(s), sc.calls, lim, workers, s, cfg, norm)
                crit.append(criterion(search.archive, norm, tasks))
            rows.append({"method": method, **{k: list(v) if isinstance(v, tuple) else v
                                               for k, v in zip(keys, vals)},
                         "train_criterion": float(np.mean(crit)), "per_seed": crit})
            print_json(rows[-1], indent=None, flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mths.tuning")
    ap.add_argument("--seeds", default="100,101")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("--methods", default="mths,eoh")
    a = ap.parse_args(argv)
    rows = tune(tuple(int(x) for x in a.seeds.split(",")), a.workers, methods=tuple(a.methods.split(",")))
    if a.out:
        from icml26_shared.io import write_json

        write_json(a.out, rows, indent=1)
    for m in sorted({r["method"] for r in rows}):
        best = max((r for r in rows if r["method"] == m), key=lambda r: r["train_criterion"])
        print(f"best {m}: {best}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
