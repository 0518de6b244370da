"""Clustering and fairness metrics, all fractions in [0, 1].

ACC (Hungarian matching), NMI, purity and pairwise F follow the authors' ``Clustering8Measure``
[S]; Balance and MNCE follow the notes' definitions [R] (the authors' ``eval_fair`` was not
readable): both Balance variants are offered and named.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import normalized_mutual_info_score, pair_confusion_matrix
from sklearn.metrics.cluster import contingency_matrix


def acc(labels, pred) -> float:
    """Best one-to-one matching of clusters to classes (Hungarian), as a fraction."""
    C = contingency_matrix(labels, pred)
    r, c = linear_sum_assignment(-C)
    return float(C[r, c].sum() / C.sum())


def nmi(labels, pred) -> float:
    return float(normalized_mutual_info_score(labels, pred))


def purity(labels, pred) -> float:
    C = contingency_matrix(labels, pred)
    return float(C.max(axis=0).sum() / C.sum())


def pairwise_f(labels, pred) -> float:
    """F-score over pairs of samples (same class vs same cluster)."""
    (tn, fp), (fn, tp) = pair_confusion_matrix(labels, pred)
    return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0


def _table(pred, groups) -> np.ndarray:
    """clusters × groups counts (every group present in the data is a column)."""
    return contingency_matrix(pred, groups).astype(float)


def balance(pred, groups, kind: str = "ratio") -> float:
    """``ratio``: min over clusters of min_g |C∩G_g| / max_g |C∩G_g| (within-cluster ratio);
    ``proportion``: min over clusters and groups of min(r, 1/r), r = (|C∩G_g|/|C|) / (|G_g|/n),
    the cluster's group share relative to the data's (Chierichetti-style). Both are 1 for clusters
    mirroring the data's composition when groups are equal-sized, 0 when a cluster misses a group."""
    T = _table(pred, groups)
    if T.shape[1] < 2:
        return 1.0
    if kind == "ratio":
        return float((T.min(axis=1) / T.max(axis=1)).min())
    if kind == "proportion":
        share = T / T.sum(axis=1, keepdims=True)
        base = T.sum(axis=0) / T.sum()
        r = share / base
        with np.errstate(divide="ignore"):
            return float(np.minimum(r, np.where(r > 0, 1.0 / r, 0.0)).min())
    raise ValueError(f"unknown balance kind {kind!r} (ratio or proportion)")


def mnce(pred, groups) -> float:
    """Minimal normalised conditional entropy: min over clusters of H(g | C_j) / H(g)."""
    T = _table(pred, groups)
    if T.shape[1] < 2:
        return 1.0
    base = T.sum(axis=0) / T.sum()
    Hg = -np.sum(base * np.log(base))
    P = T / T.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        H = -np.nansum(np.where(P > 0, P * np.log(P), 0.0), axis=1)
    return float(H.min() / Hg)


def evaluate(labels, pred, groups) -> dict[str, float]:
    """The CLI's ``eval`` keys."""
    return {"acc": acc(labels, pred), "nmi": nmi(labels, pred), "purity": purity(labels, pred),
            "f": pairwise_f(labels, pred), "balance_ratio": balance(pred, groups, "ratio"),
            "balance_proportion": balance(pred, groups, "proportion"), "mnce": mnce(pred, groups)}


def kmeans_cost(X, pred) -> float:
    """Within-cluster sum of squares of ``X`` over its total sum of squares (the k-means cost as a
    fraction of the variance; lower is better): the utility where the labels are a weak reference."""
    X = np.asarray(X, float)
    pred = np.asarray(pred)
    within = sum(((X[pred == j] - X[pred == j].mean(0)) ** 2).sum() for j in np.unique(pred))
    total = ((X - X.mean(0)) ** 2).sum()
    return float(within / total) if total > 0 else 0.0


def hypervolume(points) -> float:
    """Area dominated by (acc, balance) points with respect to (0, 0) (both maximised)."""
    pts = sorted({(float(a), float(b)) for a, b in points}, key=lambda p: (-p[0], -p[1]))
    area, best_b = 0.0, 0.0
    for i, (a, b) in enumerate(pts):
        nxt = pts[i + 1][0] if i + 1 < len(pts) else 0.0
        best_b = max(best_b, b)
        area += (a - nxt) * best_b
    return area
