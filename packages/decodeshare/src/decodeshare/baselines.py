"""The controls the paper ablates beside the shared basis (paper §H2/H3), behind one interface: a
registered function ``(ctx) -> (basis [d, j], alpha)``; a new control is one decorated function.

``ctx`` carries the fit on the held-in tasks (``fit``), their raw calibration decode states
(``states``), the prefill fit (``prefill_fit``) and a seed; every control is built on calibration
states only and its removed energy is reported beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .core import SharedFit, alpha_match, energy, k_match, random_basis

CONTROLS: dict[str, Callable[[ControlContext], tuple[np.ndarray, float]]] = {}


@dataclass
class ControlContext:
    fit: SharedFit
    states: np.ndarray            # [n, d] raw calibration decode states of the held-in tasks
    prefill_fit: SharedFit | None = None
    seed: int = 0

    @property
    def target(self) -> float:
        """E(Q_S): the energy the shared removal takes out (alpha = 1)."""
        return energy(self.states, self.fit.shared)


def register(name: str):
    def deco(fn):
        CONTROLS[name] = fn
        return fn
    return deco


@register("shared")
def shared(ctx: ControlContext):
    """The method: the shared basis Q^(S), alpha = 1."""
    return ctx.fit.shared, 1.0


@register("alpha")
def alpha_control(ctx: ControlContext):
    """alpha-match: |S| directions drawn from the non-shared pool (the non-shared pooled
    directions first, then those beyond rho when there are too few), alpha scaled so that
    alpha^2 E(Q_ctrl) = E(Q_S) [P]; the draw is seeded [R]. When fewer than |S| directions lie
    outside S, all of them are used (the row's ``dim`` shows it) [R]."""
    n_ns, dim = len(ctx.fit.nonshared_idx), len(ctx.fit.shared_idx)
    pool = ctx.fit.pool
    if pool.shape[1] == 0:
        raise ValueError("the alpha-matched control needs directions outside S, and S spans every direction")
    dim = min(dim, pool.shape[1])  # S wider than the rest of the space: every other direction, alpha larger
    rng = np.random.default_rng(ctx.seed)
    if n_ns >= dim:
        cols = np.sort(rng.choice(n_ns, dim, replace=False))
    else:
        cols = np.concatenate([np.arange(n_ns), n_ns + np.sort(rng.choice(pool.shape[1] - n_ns, dim - n_ns,
                                                                            replace=False))])
    Q = pool[:, cols]
    return Q, alpha_match(ctx.target, Q, ctx.states)


@register("k")
def k_control(ctx: ControlContext):
    """k-match: alpha = 1, non-shared directions added (seeded random order [R]) until the removed
    energy first reaches E(Q_S) [P]."""
    pool = ctx.fit.pool
    order = np.random.default_rng(ctx.seed + 1).permutation(pool.shape[1])
    try:
        return k_match(ctx.target, pool, ctx.states, order), 1.0
    except ValueError:  # everything outside S carries less energy than S: the whole pool, reported
        return pool, 1.0


@register("random")
def random_control(ctx: ControlContext):
    """The paper's "energy-matched random": a uniformly random |S|-dimensional subspace, alpha
    scaled so that alpha^2 E(Q_rand) = E(Q_S) [P] (0.2.x used alpha = 1: about 0.1 of the energy)."""
    Q = random_basis(ctx.fit.Q.shape[0], len(ctx.fit.shared_idx), ctx.seed + 2)
    return Q, alpha_match(ctx.target, Q, ctx.states)


@register("prefill")
def prefill_control(ctx: ControlContext):
    """The matched-rank prefill basis: the top-|S| pooled PCA directions of the prefill states
    (last prompt token) of the same prompts, alpha = 1 [P: H3, k_match]."""
    if ctx.prefill_fit is None:
        raise ValueError("the prefill control needs the prefill states")
    dim = min(len(ctx.fit.shared_idx), ctx.prefill_fit.k)
    return ctx.prefill_fit.Q[:, :dim], 1.0


@register("pooled_top")
def pooled_top(ctx: ControlContext):
    """Mechanism ablation: the top-|S| pooled PCA directions, without the sharedness filter."""
    return ctx.fit.Q[:, : len(ctx.fit.shared_idx)], 1.0


def build(name: str, ctx: ControlContext) -> tuple[np.ndarray, float]:
    if name not in CONTROLS:
        from icml26_shared import UserError

        raise UserError(f"unknown control {name!r} (choose from {', '.join(CONTROLS)})")
    return CONTROLS[name](ctx)
