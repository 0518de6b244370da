"""The paper's maths as pure functions (no I/O, no state): CMA-ES constants and update, rewards,
reward-weighted knowledge extraction, the two transfer samplers, ranking with the ε-constraint and
the boundary penalty, roulette allocation and the stop rule. All from ``MES_RET.m`` / ``sMES_RET.m``
[C]; the array conventions (rows = samples) are ours."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CMAConstants:
    n: int
    lam: int
    mu: int
    weights: np.ndarray
    mueff: float
    chiN: float
    hth: float
    cs: float
    damps: float
    cc: float
    c1: float  # full: rank-one rate; separable: c_cov / mueff
    cmu: float  # full: rank-mu rate; separable: c_cov·(1 − 1/mueff)
    separable: bool


def cma_constants(n: int, lam: int, separable: bool = False) -> CMAConstants:
    """``InitCMA`` of MES_RET.m (full) / sMES_RET.m (separable), constant for constant [C]."""
    mu = int(math.floor(lam / 2 + 0.5))  # MATLAB round(λ/2)
    w = np.log(mu + 0.5) - np.log(np.arange(1, mu + 1))
    w = w / w.sum()
    mueff = float(1.0 / np.sum(w**2))
    chiN = math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n**2))
    hth = (1.4 + 2 / (n + 1)) * chiN
    if separable:
        cs = (mueff + 2) / (n + mueff + 3)
        cc = 4 / (4 + n)
        ccov = (1 / mueff) * (2 / (n + math.sqrt(2)) ** 2) + (1 - 1 / mueff) * min(
            1.0, (2 * mueff - 1) / ((n + 2) ** 2 + mueff))
        ccov = (n + 2) / 3 * ccov
        c1, cmu = ccov / mueff, ccov * (1 - 1 / mueff)
    else:
        cs = (mueff + 2) / (n + mueff + 5)
        cc = (4 + mueff / n) / (4 + n + 2 * mueff / n)
        c1 = 2 / ((n + 1.3) ** 2 + mueff)
        cmu = min(1 - c1, 2 * (mueff - 2 + 1 / mueff) / ((n + 2) ** 2 + 2 * mueff / 2))
    damps = 1 + cs + 2 * max(math.sqrt((mueff - 1) / (n + 1)) - 1, 0)
    return CMAConstants(n, lam, mu, w, mueff, chiN, hth, cs, damps, cc, c1, cmu, separable)


def cma_update(k: CMAConstants, m, sigma, C, ps, pc, B, D, X_sorted, gen: int):
    """One CMA-ES update from the samples sorted best first (``ParameterUpdate`` [C]).

    ``C`` is n×n (full) or the diagonal vector (separable); ``B, D`` are the eigenbasis and the
    standard deviations used to whiten the mean shift (full only). ``gen`` is the task's generation
    count since its (re)start, used in the h_σ test. Returns ``(m, sigma, C, ps, pc)``."""
    old = m
    sel = X_sorted[: k.mu]
    m = k.weights @ sel
    dm = (m - old) / sigma
    if k.separable:
        ps = (1 - k.cs) * ps + math.sqrt(k.cs * (2 - k.cs) * k.mueff) * dm / np.sqrt(C)
    else:
        ps = (1 - k.cs) * ps + math.sqrt(k.cs * (2 - k.cs) * k.mueff) * (inv_sqrt_cov(B, D) @ dm)
    hsig = np.linalg.norm(ps) / math.sqrt(1 - (1 - k.cs) ** (2 * (gen + 1))) < k.hth
    pc = (1 - k.cc) * pc + hsig * math.sqrt(k.cc * (2 - k.cc) * k.mueff) * dm
    art = (sel - old) / sigma
    delta = (1 - hsig) * k.cc * (2 - k.cc)
    if k.separable:  # c1 + cmu = c_cov, so both variants share one form [C]
        C = (1 - k.c1 - k.cmu) * C + k.c1 * (pc**2 + delta * C) + k.cmu * (k.weights @ art**2)
    else:
        C = ((1 - k.c1 - k.cmu) * C + k.c1 * (np.outer(pc, pc) + delta * C)
             + k.cmu * (art.T * k.weights) @ art)
    sigma = sigma * math.exp(k.cs / k.damps * (np.linalg.norm(ps) / k.chiN - 1))
    return m, sigma, C, ps, pc


def eigen(C):
    """``(B, D, ok)``: symmetrised eigenbasis and standard deviations; ``ok`` False when C has
    NaN/Inf or a negative eigenvalue (the task then stops) [C]. The basis is used only through
    :func:`sqrt_cov` and :func:`inv_sqrt_cov`, which do not depend on which basis LAPACK returns."""
    if not np.all(np.isfinite(C)):
        return None, None, False
    vals, B = np.linalg.eigh(C, UPLO="U")  # = MATLAB's triu(C) + triu(C, 1)' symmetrisation
    if vals.min() < 0:
        return None, None, False
    return B, np.sqrt(vals), True


def sqrt_cov(B, D):
    """C^½ = B·diag(D)·Bᵀ: the symmetric square root, the same matrix for every valid eigenbasis
    (any signs, any rotation inside a repeated eigenvalue's subspace) [R]. MATLAB's ``B·(D.*z)``
    samples the same distribution, but its draws depend on the basis LAPACK picks, which for
    repeated eigenvalues differs between OpenBLAS kernels (issue 53)."""
    return (B * D) @ B.T


def inv_sqrt_cov(B, D):
    """C^−½ = B·diag(1/D)·Bᵀ (basis-free, as :func:`sqrt_cov`) [C: ``B*(D.^-1.*(B'*dm))``]."""
    return (B / D) @ B.T


def sample_normal(m, sigma, B, D, Z, separable: bool, C=None):
    """x = m + σ·C^½ z for each row z of ``Z`` (separable: m + σ·sqrt(C) ⊙ z). Same distribution
    as the authors' m + σ·B(D ⊙ z) [C]; C^½ makes the draws independent of the eigenbasis [R]."""
    if separable:
        return m + sigma * np.sqrt(C) * Z
    return m + sigma * Z @ sqrt_cov(B, D)  # C^½ is symmetric: (C^½ z)ᵀ = zᵀ C^½


def phenotypic_samples(m, sigma, B, D, Z, m_bar, step: float, separable: bool, C=None):
    """u = (m̄ − m) + σ·C^½ z; x = m + step·u/‖u‖: exactly ``step`` away from m [C].
    Dimensions where m̄ is NaN (no active task owns them) contribute no pull [R]."""
    pull = np.where(np.isnan(m_bar), 0.0, m_bar - m)
    u = pull + sample_normal(0.0, sigma, B, D, Z, separable, C)
    norm = np.linalg.norm(u, axis=1, keepdims=True)
    return m + step * u / np.maximum(norm, 1e-300)


def genotypic_samples(m, sigma, C, Z, sigma_ratio_bar: float, std_ratio_bar, separable: bool):
    """x = m + (r̄_σ·r̄_std) ⊙ σ ⊙ sqrt(diag C) ⊙ z [C] (NaN ratios count as 1 [R])."""
    v = sigma_ratio_bar * np.where(np.isnan(std_ratio_bar), 1.0, std_ratio_bar)
    std = np.sqrt(C if separable else np.diag(C))
    return m + v * sigma * std * Z


def _normalise(score, active):
    score = np.where(active, np.maximum(score, 0.0), 0.0)
    total = score.sum()
    if not np.isfinite(total) or total < 1e-12:
        n = active.sum()
        return np.where(active, 1.0 / max(n, 1), 0.0)  # uniform over active tasks [R: MATLAB 1/T]
    return score / total


def fitness_reward(prev_best, new_best, init_best, active):
    """r_t = max(0, f_prev − f_new)/(f_init − f_prev + 1e-12), normalised over active tasks [C]."""
    prev_best, new_best, init_best = (np.asarray(a, float) for a in (prev_best, new_best, init_best))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.maximum(0.0, prev_best - new_best) / (init_best - prev_best + 1e-12)
    return _normalise(np.where(np.isinf(r), np.nan, r), np.asarray(active, bool))


def diversity_reward(prev_sigma, prev_trace, sigma, trace, dims, active):
    """d_t = σ_prev·tr(C_prev)/D_t + σ_t·tr(C_t)/D_t, min–max normalised, then sum-normalised [C]."""
    active = np.asarray(active, bool)
    dims = np.asarray(dims, float)
    d = (np.asarray(prev_sigma) * np.asarray(prev_trace) + np.asarray(sigma) * np.asarray(trace)) / dims
    d = np.where(active, d, 0.0)  # MATLAB sets stopped tasks to 0 before min–max
    d = (d - d.min()) / (d.max() - d.min() + 1e-12)
    return _normalise(d, active)


def extract_knowledge(reward, sigma_ratio, std_ratio, mdec, active):
    """Reward-weighted r̄_σ, and per dimension j r̄_std(j), m̄(j) over the active tasks that own j
    (NaN in ``std_ratio``/``mdec`` = not owned); plain means when the weights vanish [C]."""
    reward, active = np.asarray(reward, float), np.asarray(active, bool)
    w = np.where(active, reward, 0.0)
    if w.sum() < 1e-12:
        sig = float(np.mean(sigma_ratio[active])) if active.any() else 1.0
    else:
        sig = float(np.sum(w * sigma_ratio) / w.sum())
    own = active[:, None] & ~np.isnan(std_ratio) & ~np.isnan(mdec)
    W = np.where(own, w[:, None], 0.0)
    wsum = W.sum(axis=0)
    cnt = own.sum(axis=0)
    plain = wsum < 1e-12
    W = np.where(plain[None, :], own.astype(float), W)
    denom = np.where(plain, cnt, wsum)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(own, std_ratio, 0.0)
        md = np.where(own, mdec, 0.0)
        std_bar = np.where(cnt > 0, (W * s).sum(axis=0) / denom, np.nan)
        m_bar = np.where(cnt > 0, (W * md).sum(axis=0) / denom, np.nan)
    return sig, std_bar, m_bar


def epsilon_level(fe: float, max_fe: float, cv_max: float, fraction: float = 0.3, power: float = 8.0) -> float:
    """ε = cv_max·(1 − FE/(0.3·maxFE))^8 for FE < 0.3·maxFE, else 0 [C]."""
    if cv_max <= 0 or fe >= fraction * max_fe:
        return 0.0
    return float(cv_max * (1 - fe / (fraction * max_fe)) ** power)


def rank_samples(X, obj, cv, eps: float, low: float = -0.05, high: float = 1.05):
    """Indices best first by (relaxed CV + boundary penalty, objective) [C]: CVs below ε count as 0;
    a sample outside [low, high] gets its squared excess plus the largest CV, so it ranks after
    every in-bound sample."""
    cv = np.where(np.asarray(cv, float) < eps, 0.0, np.asarray(cv, float))
    bound = np.sum((X - np.clip(X, low, high)) ** 2, axis=1)
    bound = np.where(bound > 0, bound + cv.max(initial=0.0), 0.0)
    return np.lexsort((np.asarray(obj, float), cv + bound))


def roulette(reward, rng, size: int):
    """``size`` task indices drawn proportionally to ``reward`` (``RouletteSelection`` [C])."""
    p = np.asarray(reward, float)
    return rng.choice(len(p), size=size, p=p / p.sum())


def should_stop(sigma: float, pc, C, separable: bool, tol: float = 1e-12) -> bool:
    """σ·max(|p_c|, sqrt(diag C)) < tol in every coordinate [C]."""
    std = np.sqrt(np.abs(C if separable else np.diag(C)))
    return bool(np.all(sigma * np.maximum(np.abs(pc), std) < tol))
