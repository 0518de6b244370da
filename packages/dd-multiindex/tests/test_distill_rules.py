"""The distiller's contract (issue 54, items 5 and 8): m₁ above the real points is refused, the set's
gradient is the mean over the points that come back, and Adam runs until the plateau rule fires."""

from __future__ import annotations

import math

import pytest
import torch
from dd_multiindex.cli import main
from dd_multiindex.config import DistillConfig
from dd_multiindex.core import MultiIndexTeacher, TwoStageLearner
from dd_multiindex.distill import (
    gm_loss,
    gradient_matching,
    init_from_real,
    matching_inits,
    performance_matching,
    plateau_reached,
    real_gradients,
)


def _problem(d=8, r=1, L=16, n=None):
    t = MultiIndexTeacher(d, r, seed=0)
    X, y = t.sample(n or 4 * d * d, seed=1)
    return t, X, y, TwoStageLearner(L, 1.5 * math.sqrt(d), seed=9)


@pytest.mark.parametrize("fn", [gradient_matching, performance_matching])
def test_m1_above_the_real_points_is_refused_by_the_api(fn):
    _, X, y, lrn = _problem(d=4, n=64)
    with pytest.raises(ValueError, match="m1=100000"):
        fn(lrn, X, y, 100000, DistillConfig(steps=1, n_inits=1, pm_batch=8), 0)
    with pytest.raises(ValueError):
        init_from_real(X, y, 65, 0)
    assert len(init_from_real(X, y, 64, 0)[0]) == 64


def test_the_cli_refuses_m1_above_4d2_in_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "s.safetensors"
    assert main(["distill", "--d", "4", "--r", "1", "--L", "4", "--m1", "100000", "--teacher-seed", "0",
                 "--steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--m1 100000" in err[0] and "64" in err[0], err
    assert not out.exists()


def test_the_distilled_gradient_is_the_mean_over_the_points_that_come_back():
    """With a start of 16 points the set is those 16 (m₁ = 64 is not what divides the gradient)."""
    d = 8
    _, X, y, lrn = _problem(d=d)
    cfg = DistillConfig(steps=1, n_inits=2)
    W0s, a = matching_inits(lrn, d, 2, 5)
    G_d = real_gradients(lrn, W0s, a, X, y)
    xs, ys = init_from_real(X, y, 16, 3)
    log: dict = {}
    gradient_matching(lrn, X, y, 64, cfg, 3, G_real=G_d, inits=(W0s, a), start=(xs, ys), log=log)
    want = float(gm_loss(lrn.grad_sum(W0s, a, xs, ys) / 16, G_d, cfg.cos_weight))
    assert log["loss"][0] == pytest.approx(want, rel=1e-5)
    assert float(gm_loss(lrn.grad_sum(W0s, a, xs, ys) / 64, G_d, cfg.cos_weight)) != pytest.approx(want, rel=1e-3)


def test_plateau_rule_on_planted_curves():
    assert not plateau_reached([1.0, 0.5, 0.25, 0.12, 0.06], 2, 1e-3)
    assert plateau_reached([1.0, 0.5, 0.4999, 0.49995], 2, 1e-3)
    assert not plateau_reached([1.0, 1.0, 1.0], 0, 1e-3)  # patience 0: the rule is off


def test_the_distiller_stops_at_the_plateau_not_at_a_cap():
    """Adam runs until the matching loss plateaus: the curve that comes back meets the rule at its end
    (a distiller cut short at 10 steps does not)."""
    _, X, y, lrn = _problem(d=8, L=16)
    cfg = DistillConfig(steps=3000, lr=0.05, n_inits=2)
    log: dict = {}
    gradient_matching(lrn, X, y, 8, cfg, 3, log=log)
    assert log["stopped"] == "plateau", log["steps"]
    assert plateau_reached(log["loss"], cfg.plateau_patience, cfg.plateau_tol)
    assert log["steps"] > cfg.plateau_patience + 10
    assert min(log["loss"]) < 0.5 * log["loss"][0]
    assert all(math.isfinite(v) for v in log["loss"]) and torch.is_grad_enabled()
