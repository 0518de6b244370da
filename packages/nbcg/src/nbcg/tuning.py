"""Choosing the SEM threshold and ``--max-coalition`` (never on a test split).

The SEM threshold is a question about the graph, so it is chosen by a graph criterion: the BIC of
the logistic SEM refitted on each candidate DAG's edges on TRAIN (``core.choose_sem_threshold``; no
classifier, no true DAG) [R]. The maximum coalition size is a question about the classifier: each
size of the grid that gives a distinct partition of the chosen DAG is trained with the arm itself
and scored by dev macro-F1 at its own dev-chosen decision threshold; the best wins (ties: the
smaller size).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .baselines import Arm
from .config import NBCGConfig
from .core import choose_sem_threshold, dag_from_adjacency, form_coalitions

SEM_THRESHOLDS = tuple(float(x) for x in np.round(np.geomspace(0.05, 2.0, 12), 3))   # the grid [R]
MAX_SIZES = (4, 8, 16)              # the grid [R]


def candidate_partitions(A: np.ndarray, counts: np.ndarray, threshold: float, sizes, method: str
                         ) -> list[tuple[int, list[list[int]]]]:
    """(max size, coalitions) for each distinct partition of the DAG at ``threshold``."""
    dag = dag_from_adjacency(A, threshold)
    out, seen = [], set()
    for m in sorted(sizes):
        coal = form_coalitions(dag, counts, m, method, weights=A)
        key = tuple(tuple(c) for c in coal)
        if key not in seen:
            seen.add(key)
            out.append((int(m), coal))
    return out


def choose_on_dev(A: np.ndarray, counts: np.ndarray, X: np.ndarray, Y: np.ndarray, Xdev: np.ndarray,
                  Ydev: np.ndarray, arm: Arm, cfg: NBCGConfig, seed: int, method: str = "components",
                  thresholds=SEM_THRESHOLDS, sizes=MAX_SIZES) -> dict:
    """``{"threshold", "max_coalition", "dag", "coalitions", "model", "log", "dev_macro_f1",
    "grid", "sem_grid"}``: the BIC-chosen SEM threshold (on TRAIN labels) and the dev-chosen
    maximum size (the winning model is returned, not retrained)."""
    from .train import THRESHOLD_GRID, macro_f1_at, predict_scores, train

    if len(thresholds) > 1:
        t, sem_grid = choose_sem_threshold(A, Y, thresholds)
    else:
        t, sem_grid = float(thresholds[0]), []
    best, grid = None, []
    for m, coal in candidate_partitions(A, counts, t, sizes, method):
        model, log = train(X, Y, coal, arm, replace(cfg, max_coalition=m), seed)
        f_all = macro_f1_at(predict_scores(model, Xdev), Ydev, THRESHOLD_GRID)
        f = float(f_all.max())
        grid.append({"threshold": t, "max_coalition": m, "n_coalitions": len(coal), "dev_macro_f1": f})
        if best is None or f > best["dev_macro_f1"]:
            best = {"threshold": t, "max_coalition": m, "dag": dag_from_adjacency(A, t), "coalitions": coal,
                    "model": model, "log": log, "dev_macro_f1": f,
                    "decision_threshold": float(THRESHOLD_GRID[int(np.argmax(f_all))])}
    assert best is not None
    best["grid"], best["sem_grid"] = grid, sem_grid
    return best
