"""Fits that match the law m₁* ∝ r² (issue 54, item 2), with ceiling rows as censored observations.

* ``fit_floor_power``: m₁* = a + b·r^p (an additive floor a ≥ 0, then a power of r) — the separable
  log–log fit is misspecified when m₁* has a floor (flat in r at small d).
* ``fit_loglinear``: log m₁* = c + Σ coef·feature, used for the per-d r-slopes (feature log r) and
  for the two d-laws compared side by side: a power (feature log d) and a polylog (feature
  log log d), each with log r as a second feature when r varies.

Every fit is a maximum-likelihood fit with log-normal noise, log m = μ(θ) + σ·ε. A row whose search
ended at its ceiling (flag ``m1:ceiling``: no m₁ ≤ ceiling passed) is a right-censored observation
m₁* > ceiling and enters through the normal survival function (a Tobit fit), so it pulls the fit
up instead of vanishing. ``observations`` turns sweep rows into (value, censored) pairs and counts
what it could not use, so no row is dropped silently. CIs: percentile bootstrap over rows.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

CEILING_FLAG = "m1:ceiling"
_LOG_SIGMA_MIN, _LOG_SIGMA_MAX = math.log(1e-3), math.log(10.0)
_LOG_PARAM_MAX = 300.0  # |log a|, |log b| beyond this: the optimiser ran off (a bootstrap resample is skipped)


@dataclass(frozen=True)
class Observations:
    """Rows as (r, d, value, censored): for a censored row, ``value`` is its ceiling (a lower bound)."""

    r: np.ndarray
    d: np.ndarray
    value: np.ndarray
    censored: np.ndarray
    n_missing: int = 0  # rows with neither a value nor a ceiling flag (reported, not fitted)

    @property
    def n_censored(self) -> int:
        return int(self.censored.sum())

    def subset(self, idx) -> Observations:
        return Observations(self.r[idx], self.d[idx], self.value[idx], self.censored[idx], self.n_missing)


def observations(rows: list[dict], target: str = "m1_star", *, ceiling: float | None = None,
                 flag: str = CEILING_FLAG, ceiling_key: str = "m1_ceiling") -> Observations:
    """Sweep rows → observations. A row with a positive ``target`` is observed; a row flagged
    ``flag`` is censored at its ceiling (the row's ``ceiling_key``, else ``ceiling``); any other row
    without a value is counted in ``n_missing``. Raises ``ValueError`` for a ceiling row whose
    ceiling is unknown."""
    r, d, v, c, missing = [], [], [], [], 0
    for row in rows:
        val = row.get(target)
        if val is not None and np.isfinite(val) and val > 0:
            r.append(row["r"]), d.append(row["d"]), v.append(float(val)), c.append(False)
        elif flag in row.get("flags", ()):
            top = row.get(ceiling_key, ceiling)
            if top is None:
                raise ValueError(f"a row (d={row['d']}, r={row['r']}) hit its ceiling but no ceiling is known: "
                                 f"pass ceiling=")
            r.append(row["r"]), d.append(row["d"]), v.append(float(top)), c.append(True)
        else:
            missing += 1
    f = lambda x, t=float: np.asarray(x, dtype=t)  # noqa: E731
    return Observations(f(r), f(d), f(v), f(c, bool), missing)


@dataclass(frozen=True)
class LawFit:
    law: str
    params: dict[str, float]
    ci90: dict[str, tuple[float, float]] = field(default_factory=dict)
    loglik: float = float("nan")
    n_observed: int = 0
    n_censored: int = 0

    @property
    def aic(self) -> float:
        return 2 * (len(self.params) + 1) - 2 * self.loglik  # +1: the noise scale σ


def _negloglik(mu: np.ndarray, y: np.ndarray, cens: np.ndarray, log_sigma: float) -> float:
    from scipy.special import log_ndtr

    z = (y - mu) / math.exp(log_sigma)
    zo = z[~cens]
    ll = (-0.5 * (zo @ zo) - len(zo) * (log_sigma + 0.5 * math.log(2 * math.pi))
          + log_ndtr(-z[cens]).sum())
    return -float(ll)


def _mle(mean: Callable[[np.ndarray, Observations], np.ndarray], starts: list[list[float]],
         obs: Observations) -> tuple[np.ndarray, float]:
    """Censored log-normal MLE of ``mean`` (the log-scale mean) over several starting points."""
    from scipy.optimize import minimize

    y = np.log(obs.value)
    best = None
    for th0 in starts:
        x0 = np.array(list(th0) + [math.log(0.1)])

        def nll(x):
            mu = mean(x[:-1], obs)
            if not np.all(np.isfinite(mu)):
                return 1e12
            return _negloglik(mu, y, obs.censored, float(np.clip(x[-1], _LOG_SIGMA_MIN, _LOG_SIGMA_MAX)))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = minimize(nll, x0, method="L-BFGS-B")
        if best is None or res.fun < best[1]:
            best = (res.x[:-1], float(res.fun))
    return best[0], -best[1]


def _bootstrap(fit_once: Callable[..., dict[str, float]], obs: Observations, n_resamples: int,
               seed: int) -> dict[str, tuple[float, float]]:
    if n_resamples <= 0:
        return {}
    rng = np.random.default_rng(seed)
    draws: list[dict[str, float]] = []
    for _ in range(n_resamples):
        idx = rng.integers(0, len(obs.value), len(obs.value))
        try:
            draws.append(fit_once(obs.subset(idx), warm=True))
        except ValueError:
            continue
    if not draws:
        return {}
    return {k: (float(np.percentile([d[k] for d in draws], 5)), float(np.percentile([d[k] for d in draws], 95)))
            for k in draws[0]}


def _need(obs: Observations, axis: str) -> None:
    vals = getattr(obs, axis)
    if len(np.unique(vals)) < 2 or (~obs.censored).sum() < 2:
        raise ValueError(f"cannot fit over {axis}: fewer than 2 distinct values of {axis} or 2 observed rows")


def _floor_power_mean(th, obs):
    la, lb, p = th
    return np.logaddexp(la, lb + p * np.log(obs.r))


def fit_floor_power(obs: Observations, *, n_resamples: int = 200, seed: int = 0) -> LawFit:
    """m₁* = a + b·r^p with a, b > 0 (censored log-normal MLE). Params a, b, p; CI by bootstrap."""
    _need(obs, "r")

    found: list[list[float]] = []

    def once(o: Observations, warm: bool = False) -> dict[str, float]:
        _need(o, "r")
        lo = float(np.log(o.value.min()))
        starts = found if warm else [[lo - 1.0, lo - 1.0, p0] for p0 in (0.5, 1.0, 2.0, 3.0)] + [[lo + 0.5, lo - 3.0, 2.0]]
        th, ll = _mle(_floor_power_mean, starts, o)
        if not (np.all(np.isfinite(th)) and np.all(np.abs(th[:2]) < _LOG_PARAM_MAX)):
            raise ValueError("the floor-power fit diverged (a or b beyond e^±300)")  # a resample: skipped
        return dict(a=float(math.exp(th[0])), b=float(math.exp(th[1])), p=float(th[2]), _ll=ll, _th=list(th))

    point = once(obs)
    ll, found[:] = point.pop("_ll"), [point.pop("_th")]
    ci = _bootstrap(lambda o, warm: {k: v for k, v in once(o, warm).items() if k[0] != "_"}, obs, n_resamples, seed)
    return LawFit("floor_power", point, ci, ll, int((~obs.censored).sum()), obs.n_censored)


def fit_loglinear(obs: Observations, features: dict[str, Callable[[Observations], np.ndarray]], law: str,
                  *, n_resamples: int = 200, seed: int = 0) -> LawFit:
    """log m = c + Σ coef_k·feature_k(obs), censored (Tobit) MLE; params c and one per feature."""
    names = list(features)

    def once(o: Observations, warm: bool = False) -> dict[str, float]:
        F = np.column_stack([np.ones(len(o.value))] + [features[k](o) for k in names])
        if np.linalg.matrix_rank(F) < F.shape[1] or (~o.censored).sum() < 2:
            raise ValueError(f"cannot fit {law}: a feature does not vary")
        start = np.linalg.lstsq(F, np.log(o.value), rcond=None)[0]
        th, ll = _mle(lambda t, oo: F @ t, [list(start)], o)
        return dict(zip(["c"] + names, map(float, th)), _ll=ll)

    point = once(obs)
    ll = point.pop("_ll")
    ci = _bootstrap(lambda o, warm: {k: v for k, v in once(o).items() if k != "_ll"}, obs, n_resamples, seed)
    return LawFit(law, point, ci, ll, int((~obs.censored).sum()), obs.n_censored)


LOG_R = lambda o: np.log(o.r)  # noqa: E731
LOG_D = lambda o: np.log(o.d)  # noqa: E731
LOGLOG_D = lambda o: np.log(np.log(o.d))  # noqa: E731


def fit_r_slopes_per_d(obs: Observations, **kw) -> dict[int, LawFit]:
    """Per d, the censored log–log slope of m₁* in r (a d with < 2 r values or observed rows is absent)."""
    out = {}
    for d in np.unique(obs.d):
        try:
            out[int(d)] = fit_loglinear(obs.subset(obs.d == d), {"r": LOG_R}, "power_r", **kw)
        except ValueError:
            continue
    return out


def fit_d_laws(obs: Observations, **kw) -> dict[str, LawFit]:
    """The d-dependence two ways, both reported: a power (log m = c + q·log d [+ p·log r]) and a
    polylog (log m = c + k·log log d [+ p·log r]). Equal parameter counts, so the AICs compare."""
    extra = {"r": LOG_R} if len(np.unique(obs.r)) > 1 else {}
    return {"power_d": fit_loglinear(obs, {"d": LOG_D, **extra}, "power_d", **kw),
            "polylog_d": fit_loglinear(obs, {"log_d": LOGLOG_D, **extra}, "polylog_d", **kw)}


def law_fits(rows: list[dict], *, ceiling: float | None = None, n_resamples: int = 200,
             seed: int = 0) -> dict:
    """All item-2 fits of m₁* over ``rows``: floor-power in r (pooled and per d), per-d r-slopes,
    and the power vs polylog d-laws; each fit that the rows do not allow is absent. Also the counts
    of observed, censored and unusable rows."""
    obs = observations(rows, ceiling=ceiling)
    kw = dict(n_resamples=n_resamples, seed=seed)
    out: dict = dict(n_observed=int((~obs.censored).sum()), n_censored=obs.n_censored, n_missing=obs.n_missing,
                     floor_power={}, r_slope={}, d_law={})
    for d in np.unique(obs.d):
        try:
            out["floor_power"][int(d)] = fit_floor_power(obs.subset(obs.d == d), **kw)
        except ValueError:
            pass
    out["r_slope"] = fit_r_slopes_per_d(obs, **kw)
    try:
        out["d_law"] = fit_d_laws(obs, **kw)
    except ValueError:
        pass
    return out
