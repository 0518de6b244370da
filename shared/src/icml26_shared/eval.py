"""Metrics several packages share, and a timing harness for side-by-side A/B measurements.

Metrics take NumPy-compatible arrays (torch tensors work through ``np.asarray``).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def accuracy(pred, target) -> float:
    pred, target = np.asarray(pred), np.asarray(target)
    if pred.shape != target.shape:
        raise ValueError(f"shape mismatch: {pred.shape} vs {target.shape}")
    return float((pred == target).mean()) if pred.size else float("nan")


def group_accuracies(pred, target, groups) -> dict[object, float]:
    """Accuracy within each group (task, class, demographic group...)."""
    pred, target, groups = np.asarray(pred), np.asarray(target), np.asarray(groups)
    return {g.item() if hasattr(g, "item") else g: accuracy(pred[groups == g], target[groups == g])
            for g in np.unique(groups)}


def worst_group_accuracy(pred, target, groups) -> float:
    return min(group_accuracies(pred, target, groups).values())


def normalized_accuracy(merged: Mapping[str, float], individual: Mapping[str, float]) -> float:
    """Mean over tasks of merged ÷ individual accuracy (the model-merging literature's metric)."""
    keys = list(individual)
    if set(keys) != set(merged):
        raise ValueError("merged and individual must name the same tasks")
    return float(np.mean([merged[k] / individual[k] for k in keys]))


def _ranked_relevance(ranking: Sequence, relevant: Mapping | set, k: int) -> list[float]:
    rel = relevant if isinstance(relevant, Mapping) else {d: 1 for d in relevant}
    return [float(rel.get(d, 0)) for d in list(ranking)[:k]]


def mrr_at_k(ranking: Sequence, relevant: Mapping | set, k: int = 10) -> float:
    """Reciprocal rank of the first relevant item within the top ``k`` (0 if none)."""
    for i, r in enumerate(_ranked_relevance(ranking, relevant, k)):
        if r > 0:
            return 1.0 / (i + 1)
    return 0.0


def recall_at_k(ranking: Sequence, relevant: Mapping | set, k: int = 10) -> float:
    rel = {d for d, g in (relevant.items() if isinstance(relevant, Mapping) else ((d, 1) for d in relevant)) if g > 0}
    if not rel:
        return float("nan")
    return len(rel & set(list(ranking)[:k])) / len(rel)


def ndcg_at_k(ranking: Sequence, relevant: Mapping | set, k: int = 10) -> float:
    """nDCG@k with linear gains (trec_eval's convention)."""
    gains = _ranked_relevance(ranking, relevant, k)
    rel = relevant if isinstance(relevant, Mapping) else {d: 1 for d in relevant}
    ideal = sorted((float(g) for g in rel.values() if g > 0), reverse=True)[:k]
    disc = lambda gs: sum(g / np.log2(i + 2) for i, g in enumerate(gs))  # noqa: E731
    idcg = disc(ideal)
    return disc(gains) / idcg if idcg > 0 else 0.0


# --- paired intervals --------------------------------------------------------------------------

@dataclass
class PairedInterval:
    """Mean of the paired differences ``a - b`` and its bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    n: int
    confidence: float = 0.95

    def clears(self, margin: float = 0.0, direction: str = "higher") -> bool:
        """True when the whole interval lies beyond ``margin`` in ``direction``."""
        return self.low > margin if direction == "higher" else self.high < -margin

    def __str__(self) -> str:
        return f"{self.mean:+.4g} [{self.low:+.4g}, {self.high:+.4g}]"


def paired_interval(a, b=None, *, confidence: float = 0.95, n_resamples: int = 9999,
                    seed: int = 0) -> PairedInterval:
    """Bootstrap interval (BCa, ``scipy.stats.bootstrap``) of the mean paired difference ``a - b``.

    ``a`` and ``b`` are per-seed (or per-query, per-task) values of two methods on the same units;
    with ``b=None``, ``a`` already holds the differences. With fewer than 2 pairs or zero
    variance the interval collapses to the mean; BCa falls back to the percentile method when it
    is undefined.
    """
    d = np.asarray(a, dtype=float) - (0.0 if b is None else np.asarray(b, dtype=float))
    d = d.ravel()
    if d.size == 0:
        raise ValueError("paired_interval needs at least one pair")
    mean = float(d.mean())
    if d.size < 2 or float(np.ptp(d)) == 0.0:
        return PairedInterval(mean, mean, mean, int(d.size), confidence)
    import warnings

    from scipy.stats import bootstrap

    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ci = bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                       method="BCa", random_state=rng).confidence_interval
        low, high = float(ci.low), float(ci.high)
        if not (np.isfinite(low) and np.isfinite(high)):
            ci = bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                           method="percentile", random_state=rng).confidence_interval
            low, high = float(ci.low), float(ci.high)
    return PairedInterval(mean, low, high, int(d.size), confidence)


# --- timing ------------------------------------------------------------------------------------

@dataclass
class Timing:
    median: float
    p20: float
    p80: float
    times: list[float]

    @property
    def spread(self) -> float:
        return self.p80 - self.p20


def _summarize(times: list[float]) -> Timing:
    q = np.quantile(times, [0.2, 0.8])
    return Timing(statistics.median(times), float(q[0]), float(q[1]), times)


def _sync() -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()


def time_fn(fn: Callable[[], object], *, warmup: int = 2, repeats: int = 7) -> Timing:
    """Wall-clock seconds of ``fn()`` (CUDA synchronized when torch is in use)."""
    for _ in range(warmup):
        fn()
    _sync()
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return _summarize(times)


def compare(fns: Mapping[str, Callable[[], object]], *, warmup: int = 2,
            repeats: int = 7) -> dict[str, Timing]:
    """Time several functions side by side, interleaved round by round so that machine noise hits
    them alike. Ratios between them are what reports should quote."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _sync()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            gc.collect()
            t0 = time.perf_counter()
            fn()
            _sync()
            times[name].append(time.perf_counter() - t0)
    return {k: _summarize(v) for k, v in times.items()}


def ratio(timings: Mapping[str, Timing], a: str, b: str) -> float:
    """Median time of ``a`` over ``b`` (below 1: ``a`` is faster)."""
    return timings[a].median / timings[b].median
