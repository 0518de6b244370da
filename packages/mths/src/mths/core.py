"""The maths of the four tasks and of the search, as pure functions (no I/O, no global state).

Distances follow TSPLIB95 (Reinelt 1995, section 2); costs, feasibility and the gap follow the
authors' evaluators [C]: gap = (cost - reference) / reference. The aggregate fitness and the
selection rule are reconstructed [R] (see config.SearchConfig).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# ---------------------------------------------------------------- TSPLIB distances (spec 2.x)


def _nint(x: np.ndarray) -> np.ndarray:
    return np.floor(x + 0.5)


def tsplib_distances(coords: np.ndarray, kind: str) -> np.ndarray:
    """Full distance matrix for ``EUC_2D``, ``CEIL_2D``, ``ATT`` or ``GEO`` node coordinates."""
    xy = np.asarray(coords, dtype=float)
    if kind in ("EUC_2D", "CEIL_2D", "ATT", "EXACT"):
        diff = xy[:, None, :] - xy[None, :, :]
        sq = (diff ** 2).sum(-1)
        if kind == "EUC_2D":
            return _nint(np.sqrt(sq))
        if kind == "CEIL_2D":
            return np.ceil(np.sqrt(sq))
        if kind == "EXACT":
            return np.sqrt(sq)
        r = np.sqrt(sq / 10.0)
        t = _nint(r)
        return np.where(t < r, t + 1, t)
    if kind == "GEO":
        pi = 3.141592
        deg = np.trunc(xy)
        mins = xy - deg
        rad = pi * (deg + 5.0 * mins / 3.0) / 180.0
        lat, lon = rad[:, 0], rad[:, 1]
        q1 = np.cos(lon[:, None] - lon[None, :])
        q2 = np.cos(lat[:, None] - lat[None, :])
        q3 = np.cos(lat[:, None] + lat[None, :])
        arg = np.clip(0.5 * ((1.0 + q1) * q2 - (1.0 - q1) * q3), -1.0, 1.0)
        d = np.trunc(6378.388 * np.arccos(arg) + 1.0)
        np.fill_diagonal(d, 0.0)
        return d
    raise ValueError(f"unsupported EDGE_WEIGHT_TYPE {kind}")


def explicit_matrix(values: Sequence[float], n: int, fmt: str) -> np.ndarray:
    """Symmetric matrix from a TSPLIB ``EXPLICIT`` weight section in format ``fmt``."""
    v = list(values)
    d = np.zeros((n, n))
    if fmt == "FULL_MATRIX":
        if len(v) != n * n:
            raise ValueError(f"FULL_MATRIX needs {n * n} weights, found {len(v)}")
        return np.asarray(v, dtype=float).reshape(n, n)
    pairs = {
        "UPPER_ROW": [(i, j) for i in range(n) for j in range(i + 1, n)],
        "LOWER_ROW": [(i, j) for i in range(n) for j in range(i)],
        "UPPER_DIAG_ROW": [(i, j) for i in range(n) for j in range(i, n)],
        "LOWER_DIAG_ROW": [(i, j) for i in range(n) for j in range(i + 1)],
        "UPPER_COL": [(i, j) for j in range(n) for i in range(j)],
        "LOWER_COL": [(i, j) for j in range(n) for i in range(j + 1, n)],
    }
    if fmt not in pairs:
        raise ValueError(f"unsupported EDGE_WEIGHT_FORMAT {fmt}")
    idx = pairs[fmt]
    if len(v) != len(idx):
        raise ValueError(f"{fmt} needs {len(idx)} weights for {n} nodes, found {len(v)}")
    for (i, j), w in zip(idx, v):
        d[i, j] = d[j, i] = w
    return d


# ---------------------------------------------------------------- costs


def tour_length(tour: Sequence[int], dist: np.ndarray) -> float:
    t = np.asarray(tour, dtype=int)
    return float(dist[t, np.roll(t, -1)].sum())


def cvrp_cost(routes: Sequence[Sequence[int]], dist: np.ndarray, depot: int = 0) -> float:
    total = 0.0
    for r in routes:
        if len(r):
            path = np.concatenate([[depot], np.asarray(r, dtype=int), [depot]])
            total += float(dist[path[:-1], path[1:]].sum())
    return total


def makespan(order: Sequence[int], p: np.ndarray) -> float:
    """Permutation flow shop makespan; ``p`` is jobs x machines."""
    p = np.asarray(p, dtype=float)
    c = np.zeros(p.shape[1])
    for j in order:
        c[0] += p[j, 0]
        for k in range(1, p.shape[1]):
            c[k] = max(c[k], c[k - 1]) + p[j, k]
    return float(c[-1])


def bins_used(bins: Sequence[Sequence[int]]) -> float:
    return float(sum(1 for b in bins if len(b)))


def bpp_lower_bound(weights: Sequence[float], capacity: float) -> float:
    """The trivial bound ceil(sum w / C), the BPP reference of the issue."""
    return float(math.ceil(sum(weights) / capacity - 1e-9))


def gap(cost: float, reference: float) -> float:
    """(cost - reference) / reference [C]; +inf for an infeasible (infinite) cost."""
    if not math.isfinite(cost):
        return math.inf
    return (cost - reference) / reference


# ---------------------------------------------------------------- feasibility (None = feasible)


def check_tour(tour: Sequence[int], n: int) -> str | None:
    try:
        t = [int(x) for x in tour]
    except (TypeError, ValueError):
        return "tour is not a sequence of integers"
    if sorted(t) != list(range(n)):
        return f"tour is not a permutation of 0..{n - 1}"
    return None


def check_routes(routes: Sequence[Sequence[int]], demands: np.ndarray, capacity: float,
                 depot: int = 0) -> str | None:
    try:
        rs = [[int(c) for c in r] for r in routes]
    except (TypeError, ValueError):
        return "routes are not lists of integers"
    seen = [c for r in rs for c in r]
    customers = [i for i in range(len(demands)) if i != depot]
    if sorted(seen) != customers:
        return "routes do not visit every customer exactly once"
    for r in rs:
        load = float(np.asarray(demands)[r].sum()) if r else 0.0
        if load > capacity + 1e-9:
            return f"a route carries {load:g} > capacity {capacity:g}"
    return None


def check_order(order: Sequence[int], n_jobs: int) -> str | None:
    try:
        o = [int(x) for x in order]
    except (TypeError, ValueError):
        return "job order is not a sequence of integers"
    if sorted(o) != list(range(n_jobs)):
        return f"job order is not a permutation of 0..{n_jobs - 1}"
    return None


def check_bins(bins: Sequence[Sequence[int]], weights: Sequence[float], capacity: float) -> str | None:
    try:
        bs = [[int(i) for i in b] for b in bins]
    except (TypeError, ValueError):
        return "bins are not lists of item indices"
    if sorted(i for b in bs for i in b) != list(range(len(weights))):
        return "bins do not hold every item exactly once"
    w = np.asarray(weights, dtype=float)
    for b in bs:
        if b and w[b].sum() > capacity + 1e-9:
            return f"a bin holds {w[b].sum():g} > capacity {capacity:g}"
    return None


# ---------------------------------------------------------------- search bookkeeping [R]


def task_score(gaps: Sequence[float]) -> float:
    """Per-task score, higher is better: minus the mean gap; -inf when any instance failed.
    (Reading the artifacts' task_scores -0.00086 / -0.053 / -0.135 as negated gaps is ours [R].)"""
    g = [float(x) for x in gaps]
    if not g or not all(math.isfinite(x) for x in g):
        return -math.inf
    return -float(np.mean(g))


def aggregate_fitness(scores: dict[str, float], norm: dict[str, float]) -> float:
    """[R] Mean over tasks of s_t / |s_t(reference heuristic)|: each task's score in units of the
    classic heuristic's training gap, so tasks with small gaps (TSP) are not drowned by FSSP."""
    vals = []
    for t, s in scores.items():
        if not math.isfinite(s):
            return -math.inf
        vals.append(s / max(abs(norm.get(t, 1.0)), 1e-6))
    return float(np.mean(vals)) if vals else -math.inf


def select_top(fitness: Sequence[float], n: int) -> list[int]:
    """Indices of the N best (stable on ties: earlier first). Invalid (-inf) ones are kept only
    when fewer than N are valid, so the population size stays exactly N."""
    order = sorted(range(len(fitness)), key=lambda i: (-fitness[i], i))
    return order[:n]


def update_archive(archive: dict[str, tuple[float, int]], scores: dict[str, float],
                   ident: int) -> list[str]:
    """Keep each task's best-ever (score, individual id); returns the tasks it improved."""
    improved = []
    for t, s in scores.items():
        if math.isfinite(s) and (t not in archive or s > archive[t][0]):
            archive[t] = (s, ident)
            improved.append(t)
    return improved
