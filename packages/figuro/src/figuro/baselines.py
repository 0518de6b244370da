"""Baselines behind one interface: ``estimate(name, views, seed) -> {"shared", "private"}``
(or ``{"dimension"}`` for one view). A new estimator is one decorated function.

- Classical ID estimators from scikit-dimension (TwoNN, MLE, DANCo, lPCA), each wrapped for one
  view and, for paired views, combined by inclusion–exclusion k̂_s = ID(x1) + ID(x2) − ID(x1, x2).
- AJIVE joint / individual ranks (Feng et al. 2018), our own implementation on ``scipy.linalg``:
  initial signal ranks by the Gavish–Donoho hard threshold, joint rank by the random-direction
  bound on the principal angles between the views' score subspaces.
- ARR-style: one latent per input with its rank reduced by the same fidelity rule (the FiGuRO
  autoencoder without the shared/private split), combined by inclusion–exclusion.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from .core import inclusion_exclusion

#: rows each classical estimator sees at most (subsampled with the seed; DANCo is O(n² D)) [R]
MAX_ROWS = {"twonn": 2000, "mle": 2000, "danco": 400, "lpca": 2000}
_UNI: dict[str, Callable] = {}


def register(name: str):
    def deco(fn):
        _UNI[name] = fn
        return fn
    return deco


def names() -> list[str]:
    return [*_UNI, "ajive"]


def _sub(x: np.ndarray, name: str, seed: int) -> np.ndarray:
    cap = MAX_ROWS.get(name, len(x))
    if len(x) <= cap:
        return x
    return x[np.random.default_rng(seed).choice(len(x), cap, replace=False)]


def _skdim(cls_name: str, x: np.ndarray, **kw) -> float:
    import skdim

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = getattr(skdim.id, cls_name)(**kw).fit(np.asarray(x, dtype=np.float64))
    return float(est.dimension_)


#: hyperparameter candidates per classical estimator, chosen on the dev simulations (never on the
#: reported grid or manifolds; ``figuro.experiments.dev_baseline_choice``). The first entry is
#: skdim's default. TwoNN has no k: its discarded fraction of largest ratios is the knob; MLE's
#: neighbourhood size K; lPCA's eigenvalue threshold rule; DANCo stays at k = 10 (its cost) [R].
CANDIDATES: dict[str, tuple[dict, ...]] = {
    "twonn": ({"discard_fraction": 0.1}, {"discard_fraction": 0.05}, {"discard_fraction": 0.2}),
    "mle": ({"K": 5}, {"K": 10}, {"K": 20}),
    "lpca": ({"ver": "FO"}, {"ver": "ratio"}, {"ver": "maxgap"}, {"ver": "Kaiser"},
             {"ver": "broken_stick"}),
    "danco": ({"k": 10},),
}


@register("twonn")
def twonn(x, seed=0, **kw):
    return _skdim("TwoNN", _sub(x, "twonn", seed), **kw)


@register("mle")
def mle(x, seed=0, **kw):
    return _skdim("MLE", _sub(x, "mle", seed), **kw)


@register("danco")
def danco(x, seed=0, **kw):
    return _skdim("DANCo", _sub(x, "danco", seed), random_state=seed, **kw)


@register("lpca")
def lpca(x, seed=0, **kw):
    return _skdim("lPCA", _sub(x, "lpca", seed), **kw)


def unimodal(name: str, x: np.ndarray, seed: int = 0, params: dict | None = None) -> float:
    """One classical estimate; ``params`` are skdim keyword arguments (e.g. a dev choice)."""
    if name not in _UNI:
        raise KeyError(f"unknown estimator {name!r} (choose from {', '.join(names())})")
    return _UNI[name](np.asarray(x, dtype=np.float64), seed, **(params or {}))


def _standardise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return (x - x.mean(0)) / (x.std(0) + 1e-12)


def estimate(name: str, views: list[np.ndarray], seed: int = 0, params: dict | None = None) -> dict:
    """One estimator on one view (``{"dimension"}``) or on paired views (``{"shared",
    "private"}``; inclusion–exclusion for the classical estimators)."""
    if name == "ajive":
        return ajive(views)
    if len(views) == 1:
        return {"dimension": unimodal(name, views[0], seed, params)}
    if len(views) != 2:
        raise ValueError("inclusion–exclusion is defined for two views")
    x1, x2 = (_standardise(v) for v in views)
    id1, id2 = unimodal(name, x1, seed, params), unimodal(name, x2, seed, params)
    id12 = unimodal(name, np.concatenate([x1, x2], 1), seed, params)
    out = inclusion_exclusion(id1, id2, id12)
    out["ids"] = [id1, id2, id12]
    return out


# --- AJIVE -----------------------------------------------------------------------------------

def _gavish_donoho_rank(x: np.ndarray) -> int:
    """Optimal hard threshold for unknown noise: σ > ω(β)·median(σ) (Gavish & Donoho 2014)."""
    n, d = x.shape
    beta = min(n, d) / max(n, d)
    omega = 0.56 * beta**3 - 0.95 * beta**2 + 1.82 * beta + 1.43
    s = np.linalg.svd(x, compute_uv=False)
    return max(int((s > max(omega * np.median(s), 1e-8 * s[0])).sum()), 1)


def ajive(views: list[np.ndarray], ranks: list[int] | None = None, n_random: int = 200,
          seed: int = 0) -> dict:
    """AJIVE ranks: joint rank = number of singular values² of [U_1, ..., U_M] (the views' score
    subspaces) above the 95th percentile of the largest one under random subspaces of the same
    ranks; individual rank_m = r_m − joint."""
    from scipy import linalg

    xs = [_standardise(v) for v in views]
    n = xs[0].shape[0]
    ranks = ranks or [_gavish_donoho_rank(x) for x in xs]
    us = [linalg.svd(x, full_matrices=False)[0][:, :r] for x, r in zip(xs, ranks)]
    s = linalg.svd(np.concatenate(us, 1), compute_uv=False)
    rng = np.random.default_rng(seed)
    bound = []
    for _ in range(n_random):
        rand = [linalg.qr(rng.standard_normal((n, r)), mode="economic")[0] for r in ranks]
        bound.append(linalg.svd(np.concatenate(rand, 1), compute_uv=False)[0] ** 2)
    thr = float(np.percentile(bound, 95))
    joint = int((s**2 > thr).sum())
    joint = min(joint, min(ranks))
    return {"shared": float(joint), "private": [float(r - joint) for r in ranks],
            "initial_ranks": ranks}


# --- ARR-style (ablation: one latent, no shared/private split) ---------------------------------

def arr(views: list[np.ndarray], seed: int = 0, **config) -> dict:
    """The FiGuRO autoencoder with one latent per input (no shared/private split) on x1, x2 and
    [x1, x2]; shared = inclusion–exclusion of the three ranks."""
    from .estimator import FiGuRO

    def fit(x):
        return FiGuRO(random_state=seed, **config).fit(x)

    if len(views) == 1:
        e = fit(views[0])
        return {"dimension": float(e.dimension_), "history": e.rank_history_}
    x1, x2 = (np.asarray(v, dtype=np.float32) for v in views)
    ests = [fit(x1), fit(x2), fit(np.concatenate([x1, x2], 1))]
    out = inclusion_exclusion(*(float(e.dimension_) for e in ests))
    out["ids"] = [e.dimension_ for e in ests]
    out["max_rounds_hit"] = any(e.stopped_by_max_rounds_ for e in ests)
    return out
