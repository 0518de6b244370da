"""Choosing the SEM threshold and ``--max-coalition`` (never on a test split).

The SEM threshold is a question about the graph, so it is chosen by a graph criterion: the BIC of
the logistic SEM refitted on each candidate DAG's edges on TRAIN (``core.choose_sem_threshold``; no
classifier, no true DAG) [R]. The maximum coalition size is a question about the classifier: each
size of the grid that gives a distinct partition of the chosen DAG is trained with the arm itself
and scored by dev macro-F1 at its own dev-chosen decision threshold; the best wins (ties: the
smaller size). For NBCG the coalition loss L* is chosen the same way among bce, asl and db.
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
                  thresholds=SEM_THRESHOLDS, sizes=MAX_SIZES, device: str = "cpu",
                  lrs: dict[str, float] | None = None, patience: int = 2) -> dict:
    """``{"threshold", "max_coalition", "loss", "arm", "dag", "coalitions", "model", "log",
    "dev_macro_f1", "grid", "sem_grid", "per_loss"}``: the BIC-chosen SEM threshold (on TRAIN
    labels), and the dev-chosen maximum size and, for an ``"auto"`` loss (NBCG), the dev-chosen
    coalition loss L* among ``NBCG_LOSSES`` (the winning model is returned, not retrained).
    ``per_loss[L]`` is the best (size) of each loss tried. ``lrs`` (arm name → learning rate, from
    ``nbcg tune``) trains loss L at ``lrs["nbcg-L"]`` (else ``cfg.lr``); ``patience`` is early
    stopping's."""
    from .baselines import NBCG_LOSSES
    from .train import THRESHOLD_GRID, macro_f1_at, predict_scores, train

    if len(thresholds) > 1:
        t, sem_grid = choose_sem_threshold(A, Y, thresholds)
    else:
        t, sem_grid = float(thresholds[0]), []
    losses = NBCG_LOSSES if arm.loss == "auto" else (arm.loss,)
    best, grid, per_loss = None, [], {}
    parts = candidate_partitions(A, counts, t, sizes, method)
    for loss in losses:
        a = replace(arm, loss=loss)
        lr = float((lrs or {}).get(f"nbcg-{loss}", cfg.lr))
        for m, coal in parts:
            model, log = train(X, Y, coal, a, replace(cfg, max_coalition=m, lr=lr), seed, device=device,
                               dev=(Xdev, Ydev), patience=patience)
            f_all = macro_f1_at(predict_scores(model, Xdev), Ydev, THRESHOLD_GRID)
            f = float(f_all.max())
            grid.append({"loss": loss, "threshold": t, "max_coalition": m, "n_coalitions": len(coal),
                         "lr": lr, "dev_macro_f1": f})
            if loss not in per_loss or f > per_loss[loss]["dev_macro_f1"]:
                per_loss[loss] = {"threshold": t, "max_coalition": m, "loss": loss, "arm": a,
                                  "dag": dag_from_adjacency(A, t), "coalitions": coal, "model": model,
                                  "log": log, "dev_macro_f1": f, "lr": lr,
                                  "decision_threshold": float(THRESHOLD_GRID[int(np.argmax(f_all))])}
            if best is None or f > best["dev_macro_f1"]:
                best = per_loss[loss]
    assert best is not None
    best = dict(best)
    best["grid"], best["sem_grid"], best["per_loss"] = grid, sem_grid, per_loss
    return best
