"""The matched controls of the ablation: the alpha-matched control's directions lie outside S and
carry S's energy, including when S is wider than the rest of the space."""

from __future__ import annotations

import numpy as np
import pytest
from decodeshare.baselines import ControlContext, build
from decodeshare.core import SharedFit, energy


def _ctx(d: int, k: int, shared: list[int], complement: bool, seed: int = 0) -> ControlContext:
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.normal(size=(d, d)))
    fit = SharedFit(Q=basis[:, :k], var_explained=np.ones(k), relvar=np.ones((2, k)),
                    shared_idx=np.asarray(shared), tasks=["a", "b"], n_per_task=8, tau=0.1, m=1,
                    complement=basis[:, k:] if complement else None)
    return ControlContext(fit=fit, states=rng.normal(size=(64, d)), seed=seed)


@pytest.mark.parametrize("d, k, shared, complement, dim", [
    (8, 6, [0, 1], True, 2),            # enough non-shared pooled directions
    (8, 4, [0, 1, 2], True, 3),         # one non-shared, two from beyond rho
    (8, 8, [0, 1, 2, 3, 4, 5], False, 2),  # S wider than the rest: every other direction
])
def test_alpha_control_lies_outside_S_and_matches_its_energy(d, k, shared, complement, dim):
    ctx = _ctx(d, k, shared, complement)
    Q, alpha = build("alpha", ctx)
    assert Q.shape == (d, dim)
    assert np.abs(ctx.fit.shared.T @ Q).max() < 1e-10
    assert alpha * alpha * energy(ctx.states, Q) == pytest.approx(ctx.target, rel=1e-6)


def test_alpha_control_refuses_when_S_spans_everything():
    with pytest.raises(ValueError, match="outside S"):
        build("alpha", _ctx(4, 4, [0, 1, 2, 3], False))
