"""The τ sweep (``unisparse.sweep``): each method's own knob, the density needed for a recall."""

from __future__ import annotations

import numpy as np
import torch
from unisparse.sweep import needed_density, summarize, sweep_unit

BS = 16


def planted(t=512, d=32, needle=(208, 224), late=400):
    """As in test_selection: weak random attention plus one far key block (the needle) that
    every late query (the question) attends to strongly."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, t, d, generator=g) * 0.1
    k = torch.randn(1, 2, t, d, generator=g) * 0.1
    direction = torch.randn(d, generator=torch.Generator().manual_seed(9))
    k[:, :, needle[0]:needle[1]] += 3 * direction
    q[:, :, late:] += 3 * direction
    return q, k


def test_needed_density_reads_the_first_knob_that_reaches_the_target():
    dens = np.array([[0.1, 0.2], [0.3, 0.4], [1.0, 1.0]])
    rec = np.array([[0.5, 0.95], [0.9, 0.97], [1.0, 1.0]])
    assert needed_density(dens, rec, 0.9).tolist() == [0.3, 0.2]
    assert np.isnan(needed_density(dens[:2], rec[:2] * 0.5, 0.9)).all()


def test_sweep_on_planted_data_is_monotone_and_the_oracle_needs_least():
    q, k = planted()
    res = sweep_unit(q, k, BS, ("oracle", "oracle_tau", "unisparse", "xattention", "ashape"))
    for arm, (_grid, dens, rec) in res.items():
        assert (np.diff(dens, axis=0) >= -1e-6).all(), arm  # more knob, more blocks
        assert np.allclose(dens[-1], 1.0) and np.allclose(rec[-1], 1.0), arm  # the dense end
    grid, dens, rec = res["oracle_tau"]
    assert (rec >= np.array(grid)[:, None] - 1e-5).all()  # top-p on the true mass: recall ≥ τ
    summ = summarize([(0, 0, res)], targets=(0.9,))
    need = {arm: summ[arm][0.9]["mean"] for arm in res}
    # the same row rule on the true mass never needs more than UniSparse's estimate
    assert (res["oracle"][2] >= res["unisparse"][2] - 1e-6).all()
    assert need["oracle"] <= need["unisparse"] + 1e-6
    # the question attends to a far needle block: the row oracle keeps it with a small budget,
    # A-shape's window must widen to it (a sweep that read the last knob would fail)
    assert need["oracle"] < 0.2 and need["oracle_tau"] <= need["xattention"] + 1e-6
    assert need["ashape"] > need["oracle"] + 0.3
