"""Tests that pin an estimate (tests/mutants.toml): each fails when one central term of the real
fit loop is switched off — the fidelity threshold, the cap at the ambient dimension, the stable
answer rule (tests/test_core.py) and the pre-training plateau."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from figuro import baselines
from figuro.core import simulate
from figuro.estimator import FiGuRO

SMALL = dict(latent_dim=8, random_state=0)


def test_noise_free_linear_views_give_the_exact_ranks():
    """(k_s, k_1, k_2) = (2, 1, 1), linear maps into R^12, no noise: the answer is exact, and
    lPCA's inclusion–exclusion (a linear rank) agrees. A rule that never sees a violation (λ = 1e9)
    lets every rank fall to 0."""
    x1, x2, _ = simulate(2, 1, 1, n=400, dim=12, noise=0.0, nonlinearity="linear", seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no reduction found" warning here
        est = FiGuRO(**{**SMALL, "latent_dim": 5}).fit([x1, x2])
    assert (est.shared_dim_, est.private_dims_) == (2, [1, 1]), est.events_
    lp = baselines.estimate("lpca", [x1, x2])
    assert abs(est.shared_dim_ - lp["shared"]) <= 1
    assert est.answer_distortion_ is not None
    assert all(d <= r + 0.05 * s for d, r, s in zip(est.answer_distortion_,
                                                    est.reference_distortion_,
                                                    est.distortion_scale_))


def test_three_dimensional_subspace_in_r10_gives_3():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 3)) @ rng.standard_normal((3, 10))
    est = FiGuRO(**SMALL).fit(x)
    assert est.dimension_ == 3, est.events_
    assert est.rank_history_[0] == {"private0": 8}
    assert est.transform(x).shape == (400, 3)
    # the same-fit ablations exist: one-shot truncation (no search) and the full-rank latent codes
    assert 0 <= est.one_shot_ranks_["private0"] <= 8 and est.latent_codes_[0].shape == (80, 8)


def _helix(n=400, seed=0):
    t = np.random.default_rng(seed).uniform(0, 4 * np.pi, n)
    return np.c_[np.cos(t), np.sin(t), t / 4]


def test_a_curve_in_r3_never_answers_above_3():
    """A 1-D helix in R^3 with L = 8: the search starts at min(L, D) = 3, so even a search cut
    short (max_rounds = 2, no reduction accepted) answers 3, with the 'no reduction' warning."""
    x = _helix()
    with pytest.warns(UserWarning, match="no reduction found"):
        est = FiGuRO(**{**SMALL, "max_rounds": 2}).fit(x)
    assert est.dimension_ <= 3 and est.k_max_ == {"private0": 3}
    assert max(max(h.values()) for h in est.rank_history_) <= 3


def test_pretraining_reaches_its_plateau_before_the_search():
    x1, x2, _ = simulate(1, 1, 1, n=300, dim=10, seed=0)
    est = FiGuRO(**{**SMALL, "latent_dim": 4, "max_rounds": 1}).fit([x1, x2])
    assert est.pretrain_plateau_ and est.pretrain_steps_ < 3000
    epochs, dist = zip(*est.pretrain_curve_)
    assert epochs[-1] == est.pretrain_steps_ and len(dist) >= 4
    assert min(dist[-3:]) > min(dist) - 3 * 0.002  # flat over the last evaluations
    assert dist[-1] < dist[0]
