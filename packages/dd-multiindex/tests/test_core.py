"""What the maths guarantees: the teacher's closed form, exact memory, planted slopes, the first
step's alignment and descent, the gradient identities gradient matching rests on."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from dd_multiindex.baselines import BASELINES, select
from dd_multiindex.config import DistillConfig
from dd_multiindex.core import (
    DistilledSet,
    MultiIndexTeacher,
    TwoStageLearner,
    alignment,
    distilled_directions,
    fit_slopes,
    memory_of,
    monte_carlo_H,
    mse,
    principal_angles,
    stage2_inputs,
)
from dd_multiindex.distill import (
    distill_labels,
    gm_loss,
    gradient_matching,
    init_from_real,
    matching_inits,
    real_gradients,
)
from dd_multiindex.sweep import search

LINKS = ("he2", "he2+cross")


@pytest.mark.parametrize("link", LINKS)
def test_monte_carlo_H_converges_like_inverse_sqrt_n(link):
    t = MultiIndexTeacher(8, 2, link=link, seed=3)
    H = t.H_exact()
    errs = []
    for n in (4_000, 64_000):
        e = [float((monte_carlo_H(*t.sample(n, seed=s)) - H).norm() / H.norm()) for s in range(4)]
        errs.append(float(np.mean(e)))
    assert errs[1] < 0.1
    assert 2.5 < errs[0] / errs[1] < 6.5  # √16 = 4


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("r", [1, 2, 3, 4, 5])
def test_H_exact_symmetric_rank_r_and_U_orthonormal(link, r):
    t = MultiIndexTeacher(12, r, link=link, seed=r)
    H = t.H_exact()
    assert torch.allclose(H, H.T, atol=1e-12)
    assert int(torch.linalg.matrix_rank(H, atol=1e-8)) == r
    assert torch.allclose(t.U.T @ t.U, torch.eye(r), atol=1e-5)
    if link == "he2":
        assert torch.allclose(H, (2 / math.sqrt(r)) * t.U.double() @ t.U.double().T, atol=1e-12)


def test_samples_deterministic_for_a_seed():
    t = MultiIndexTeacher(10, 2, seed=1)
    X1, y1 = t.sample(50, seed=7)
    X2, y2 = MultiIndexTeacher(10, 2, seed=1).sample(50, seed=7)
    assert torch.equal(X1, X2) and torch.equal(y1, y2)
    assert not torch.equal(t.sample(50, seed=8)[0], X1)
    assert not torch.equal(MultiIndexTeacher(10, 2, seed=2).U, t.U)


def test_teacher_refuses_r_above_d():
    with pytest.raises(ValueError, match="r=5 must be <= d=4"):
        MultiIndexTeacher(4, 5)


def test_memory_of_is_exact():
    ds = DistilledSet(torch.zeros(5, 7), torch.zeros(5), torch.zeros(3), seed2=11)
    assert ds.memory_stage1 == 5 * 8
    assert ds.memory_stage2 == 3 + 1
    assert memory_of(ds) == ds.memory == 44
    assert memory_of(123456789) == 1
    assert memory_of((torch.zeros(4, 3), np.zeros(4))) == 16
    assert DistilledSet(torch.zeros(2, 3), torch.zeros(2)).memory == 8


@pytest.mark.parametrize("p", [1, 2])
def test_fit_slopes_recovers_a_planted_power_law_in_two_axes(p):
    rows = [{"r": r, "d": d, "m": 3.0 * r**p * d ** (2 - p)} for r in (1, 2, 3, 4) for d in (16, 32, 64)]
    s = fit_slopes(rows, "m", ("r", "d"))
    assert abs(s["r"].exponent - p) < 1e-6 and abs(s["d"].exponent - (2 - p)) < 1e-6
    assert s["r"].ci_low <= s["r"].exponent <= s["r"].ci_high


def test_fit_slopes_ci_brackets_a_noisy_law_and_refuses_one_value():
    rng = np.random.default_rng(0)
    rows = [{"r": r, "d": d, "m": r**2 * math.exp(rng.normal(0, 0.05))} for r in (1, 2, 4, 8) for d in (8, 16)
            for _ in range(3)]
    s = fit_slopes(rows, "m", ("r", "d"))
    assert s["r"].ci_low < 2.0 < s["r"].ci_high and s["r"].ci_high - s["r"].ci_low < 0.2
    with pytest.raises(ValueError, match="fewer than 2 distinct values of L"):
        fit_slopes([{**r, "L": 64} for r in rows], "m", ("r", "L"))


def test_one_large_step_aligns_W_with_span_U_and_descends():
    d, r, L = 32, 2, 128
    t = MultiIndexTeacher(d, r, seed=0)
    X, y = t.sample(16 * d * d, seed=1)
    lrn = TwoStageLearner(L, 1.5 * math.sqrt(d), seed=2)
    W0, a = lrn.init(d)
    W1 = lrn.first_step(X, y, W0)
    assert alignment(W1, t.U) >= 0.9
    assert alignment(W0, t.U) < 0.5  # the mechanism off (no step): random directions, ~√(r/d)
    G = lrn.grad_sum(W0, a, X, y) / len(y)
    small = TwoStageLearner(L, 1e-2, seed=2)  # the learner's own update rule, at a small step
    assert lrn.loss(small.step(W0, G), a, X, y) < lrn.loss(W0, a, X, y) < lrn.loss(W0 + 1e-2 * G, a, X, y)
    Xt, yt = t.sample(2048, seed=3)
    X2, y2 = t.sample(4 * L, seed=4)
    good = mse(lrn.fit_stage2(W1, X2, y2), Xt, yt)
    flat = mse(lrn.fit_stage2(W0 + 1.5 * torch.randn(L, d, generator=torch.Generator().manual_seed(0)) / math.sqrt(d),
                              X2, y2), Xt, yt)
    assert good < 0.3 * flat  # features in span(U) beat random features


def test_closed_form_gradient_equals_autograd_to_second_order():
    t = MultiIndexTeacher(6, 2, seed=0)
    X, y = t.sample(40, seed=1)
    X, y = X.double().requires_grad_(True), y.double().requires_grad_(True)
    lrn = TwoStageLearner(10, 1.0, seed=0)
    W0s = torch.stack([lrn.init(6, seed=s)[0] for s in range(3)]).double() * 100
    a = lrn.init(6)[1].double()
    G_auto = lrn.grad_autograd(W0s, a, X, y, create_graph=True)
    G_form = lrn.grad_sum(W0s, a, X, y) / len(y)
    assert torch.allclose(G_auto, G_form, atol=1e-12)
    probe = torch.randn_like(G_auto)
    dA = torch.autograd.grad((G_auto * probe).sum(), (X, y), retain_graph=True)
    dF = torch.autograd.grad((G_form * probe).sum(), (X, y))
    assert all(torch.allclose(u, v, atol=1e-10) for u, v in zip(dA, dF, strict=True))


def test_gradient_matching_against_the_real_set_itself_is_exact():
    t = MultiIndexTeacher(8, 1, seed=0)
    X, y = t.sample(48, seed=1)
    lrn = TwoStageLearner(16, 2.0, seed=0)
    inits = matching_inits(lrn, 8, 3, seed=5)
    G_real = real_gradients(lrn, *inits, X, y)
    xs, ys = gradient_matching(lrn, X, y, len(y), DistillConfig(steps=0), 5, G_real=G_real, inits=inits,
                               start=(X, y))
    G_s = lrn.grad_sum(inits[0], inits[1], xs, ys) / len(ys)
    assert torch.equal(G_s, G_real) or torch.allclose(G_s, G_real, atol=1e-7, rtol=1e-6)
    xr = X.clone().requires_grad_(True)
    loss = gm_loss(lrn.grad_sum(inits[0], inits[1], xr, y) / len(y), G_real)
    assert float(loss.detach()) < 1e-6
    other = gm_loss(lrn.grad_sum(inits[0], inits[1], X[:24], y[:24]) / 24, G_real)
    assert float(other) > 100 * float(loss.detach()) + 1e-3


def test_gradient_matching_encodes_span_U_beyond_its_starting_point():
    d, r, L = 16, 1, 64
    t = MultiIndexTeacher(d, r, seed=0)
    X, y = t.sample(4 * d * d, seed=1)
    lrn = TwoStageLearner(L, 1.5 * math.sqrt(d), seed=9)
    cfg = DistillConfig(steps=120, lr=0.1, n_inits=2)
    xs, ys = gradient_matching(lrn, X, y, 16, cfg, seed=3)
    x0, y0 = init_from_real(X, y, 16, 3)
    W0 = lrn.init(d)[0]  # the learner's own init: never one of the matched ones
    a_gm, a_0 = alignment(lrn.first_step(xs, ys, W0), t.U), alignment(lrn.first_step(x0, y0, W0), t.U)
    assert a_gm > a_0 + 0.25 and a_gm > 0.7
    ang = principal_angles(t.U, distilled_directions(xs, ys, r))
    ang0 = principal_angles(t.U, distilled_directions(x0, y0, r))
    assert ang.max() < ang0.max()


def test_performance_matching_lowers_the_real_loss_after_the_step():
    from dd_multiindex.distill import performance_matching

    d, L = 8, 16
    t = MultiIndexTeacher(d, 1, seed=0)
    X, y = t.sample(4 * d * d, seed=1)
    lrn = TwoStageLearner(L, 1.5 * math.sqrt(d), seed=4)
    cfg = DistillConfig(steps=40, lr=0.1, n_inits=1, pm_batch=128)
    xs, ys = performance_matching(lrn, X, y, 4, cfg, seed=2)
    x0, y0 = init_from_real(X, y, 4, 2)
    X2, y2 = t.sample(4 * L, seed=5)
    Xt, yt = t.sample(1024, seed=6)

    def err(a, b):
        return mse(lrn.fit_stage2(lrn.first_step(a, b), X2, y2), Xt, yt)

    assert err(xs, ys) < 0.7 * err(x0, y0)


def test_principal_angles_of_a_subspace_with_itself_are_zero():
    t = MultiIndexTeacher(10, 3, seed=4)
    assert np.allclose(principal_angles(t.U, t.U), 0.0, atol=1e-6)
    assert np.allclose(principal_angles(t.U, t.U @ torch.linalg.qr(torch.randn(3, 3))[0]), 0.0, atol=1e-5)
    e = torch.eye(10)
    assert np.allclose(principal_angles(e[:, :2], e[:, 2:4]), math.pi / 2)


def test_label_distillation_reproduces_the_real_ridge_fit_once_m2_reaches_L():
    d, L = 8, 12
    t = MultiIndexTeacher(d, 2, seed=0)
    lrn = TwoStageLearner(L, 4.0, ridge=1e-2, seed=1)
    W1 = lrn.first_step(*t.sample(4 * d * d, seed=2))
    X2, y2 = t.sample(4 * L, seed=3)
    target = lrn.fit_stage2(W1, X2, y2).predict(X2)
    errs = {}
    for m2 in (3, L, 2 * L):
        lab = distill_labels(lrn, W1, X2, y2, m2, seed2=5)
        pred = lrn.fit_stage2(W1, stage2_inputs(5, m2, d), lab).predict(X2)
        errs[m2] = float((pred - target).norm() / target.norm())
    assert errs[L] < 1e-3 and errs[2 * L] < 1e-3
    assert errs[3] > 10 * errs[L]


def test_search_doubles_then_bisects_and_flags_its_ends():
    calls = []

    def ok(n, at=37):
        calls.append(n)
        return n >= at

    assert search(ok, 1, 256, ratio=1.0) == (37, "")
    assert search(lambda n: True, 1, 256) == (1, "floor")
    assert search(lambda n: False, 1, 256) == (None, "ceiling")
    n, _ = search(lambda n: n >= 37, 1, 256, ratio=1.25)
    assert 37 <= n <= 37 * 1.25


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baselines_pick_distinct_real_points(name):
    X, y = MultiIndexTeacher(6, 1, seed=0).sample(200, seed=1)
    idx = select(name, X, y, 17, seed=0)
    assert len(idx) == 17 and len(set(idx.tolist())) == 17


def test_kcenter_covers_better_than_random():
    X, y = MultiIndexTeacher(3, 1, seed=0).sample(400, seed=1)

    def radius(idx):
        F = torch.cat([X, (y / y.std())[:, None]], 1)
        return float(torch.cdist(F, F[idx]).min(1).values.max())

    assert radius(select("kcenter", X, y, 20, 0)) < radius(select("random", X, y, 20, 0))
