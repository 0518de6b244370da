"""The notes' synthetic fair multi-view data (§6.1, [R]): x_v = P_v μ_y + Q_v ν_g + ε, with the
group correlated with the cluster (p(g | y) = skew / 1 − skew, alternating) and a group shift
strong enough that plain anchor clustering follows the group."""

from __future__ import annotations

import numpy as np

from .config import SyntheticConfig


def make_fair_multiview(cfg: SyntheticConfig | None = None, seed: int = 0,
                        n: int | None = None, structure_seed: int = 0):
    """``(views, y, g)``: a list of n×d_v float arrays, cluster labels and group labels.

    The population (μ, ν, P_v, Q_v) is drawn from ``structure_seed``, the samples from ``seed``:
    two seeds are two independent draws of one population (dev and test draws, see experiments)."""
    cfg = SyntheticConfig() if cfg is None else cfg
    srng = np.random.default_rng(structure_seed)
    rng = np.random.default_rng([structure_seed, seed])
    n = cfg.n if n is None else int(n)
    mu = srng.normal(size=(cfg.k, cfg.latent)) * cfg.cluster_sep
    nu = srng.normal(size=(cfg.c, cfg.latent)) * cfg.group_shift
    proj = [(srng.normal(size=(cfg.latent, d)) / np.sqrt(cfg.latent),
             srng.normal(size=(cfg.latent, d)) / np.sqrt(cfg.latent)) for d in cfg.dims]
    y = rng.integers(0, cfg.k, size=n)
    probs = np.full((cfg.k, cfg.c), (1 - cfg.skew) / max(cfg.c - 1, 1))
    probs[np.arange(cfg.k), np.arange(cfg.k) % cfg.c] = cfg.skew
    u = rng.random(n)
    g = (u[:, None] > np.cumsum(probs[y], axis=1)).sum(axis=1)
    views = []
    for (P, Qm), d in zip(proj, cfg.dims):
        views.append(mu[y] @ P + nu[g] @ Qm + cfg.noise * rng.normal(size=(n, d)))
    return views, y, g
