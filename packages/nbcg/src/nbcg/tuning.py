"""Choosing the SEM threshold and ``--max-coalition`` on dev (never on a test split).

Every (threshold, maximum size) pair of the grid gives a DAG and a partition; pairs giving the same
partition are trained once. Each distinct partition is trained with the arm itself and scored by
dev macro-F1 at its own dev-chosen decision threshold; the best wins (ties: the earlier pair).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .baselines import Arm
from .config import NBCGConfig
from .core import dag_from_adjacency, form_coalitions

SEM_THRESHOLDS = (0.2, 0.3, 0.5)    # the grid [R]; 0.3 is NOTEARS' own threshold
MAX_SIZES = (4, 8, 16)              # the grid [R]


def candidate_partitions(A: np.ndarray, counts: np.ndarray, thresholds, sizes, method: str
                         ) -> list[tuple[float, int, np.ndarray, list[list[int]]]]:
    """(threshold, max size, DAG, coalitions) for each distinct partition of the grid."""
    out, seen = [], set()
    for t in thresholds:
        dag = dag_from_adjacency(A, t)
        for m in sizes:
            coal = form_coalitions(dag, counts, m, method, weights=A)
            key = tuple(tuple(c) for c in coal)
            if key not in seen:
                seen.add(key)
                out.append((float(t), int(m), dag, coal))
    return out


def choose_on_dev(A: np.ndarray, counts: np.ndarray, X: np.ndarray, Y: np.ndarray, Xdev: np.ndarray,
                  Ydev: np.ndarray, arm: Arm, cfg: NBCGConfig, seed: int, method: str = "components",
                  thresholds=SEM_THRESHOLDS, sizes=MAX_SIZES) -> dict:
    """The dev-chosen partition: ``{"threshold", "max_coalition", "dag", "coalitions", "model",
    "log", "dev_macro_f1", "grid"}`` (the winning model is returned, not retrained)."""
    from sklearn.metrics import f1_score

    from .train import choose_threshold, predict_scores, train

    best = None
    grid = []
    for t, m, dag, coal in candidate_partitions(A, counts, thresholds, sizes, method):
        model, log = train(X, Y, coal, arm, replace(cfg, max_coalition=m), seed)
        S = predict_scores(model, Xdev)
        thr = choose_threshold(S, Ydev)
        f = float(f1_score(Ydev, (S >= thr).astype(int), average="macro", zero_division=0))
        grid.append({"threshold": t, "max_coalition": m, "n_coalitions": len(coal), "dev_macro_f1": f})
        if best is None or f > best["dev_macro_f1"]:
            best = {"threshold": t, "max_coalition": m, "dag": dag, "coalitions": coal, "model": model,
                    "log": log, "dev_macro_f1": f, "decision_threshold": thr}
    assert best is not None
    best["grid"] = grid
    return best
