"""The shared-subspace maths: k, planted shared directions, the nulls, energy matching, steering."""

from __future__ import annotations

import numpy as np
import pytest
from decodeshare.core import (
    alpha_match,
    choose_k,
    energy,
    fit_shared,
    k_match,
    null_perm,
    null_scramble,
    principal_angles,
    random_basis,
    rank_quality,
    repair,
    steering_overlap,
)


def planted(T=4, d=40, n=300, n_shared=2, n_own=4, seed=0, offsets=None):
    """Tasks sharing ``n_shared`` coordinate directions, each with ``n_own`` private ones; every
    state is shifted by 5, plus ``offsets[t]`` [d] for task t when given."""
    rng = np.random.default_rng(seed)
    states = {}
    for t in range(T):
        z = rng.standard_normal((n, d))
        z, _ = np.linalg.qr(z - z.mean(0))  # centred, exactly uncorrelated columns
        scale = np.full(d, 1e-4)
        scale[:n_shared] = np.array([2.0, 2.2])[:n_shared] + 0.01 * t  # no exact ties across tasks
        own = np.arange(n_shared + t * n_own, n_shared + (t + 1) * n_own)
        scale[own] = 1.0 + 0.03 * own  # distinct variances: no eigenvalue ties across tasks
        states[f"t{t}"] = np.sqrt(n) * z * scale + 5.0  # an offset centring must remove
        if offsets is not None:
            states[f"t{t}"] = states[f"t{t}"] + offsets[t]
    return states


def test_k_is_the_smallest_index_reaching_rho():
    s2 = np.sort(np.random.default_rng(1).exponential(size=50))[::-1]
    for rho in (0.5, 0.8, 0.95, 0.99):
        k = choose_k(s2, rho)
        assert s2[:k].sum() / s2.sum() >= rho
        assert s2[: k - 1].sum() / s2.sum() < rho


def test_planted_shared_directions_are_recovered_exactly():
    fit = fit_shared(planted(), var=0.999, tau=1e-3, m="all")
    assert fit.k == 2 + 4 * 4
    assert len(fit.shared_idx) == 2
    truth = np.eye(40)[:, :2]
    assert principal_angles(fit.shared, truth).max() < 1e-3
    # with m = 1 every direction any task uses is "shared": the m rule is what selects
    assert len(fit_shared(planted(), var=0.999, tau=1e-3, m=1).shared_idx) == fit.k


def test_each_task_is_centred_by_its_own_mean():
    """Step 3 centres every task by its own mean: tasks whose states sit at different places (a
    per-task offset, as real tasks' prompts put them) still give exactly the planted shared set.
    Centring by the pooled mean instead turns the offsets into T - 1 spurious between-task
    directions, which enter the pooled basis and the shared set."""
    from decodeshare.core import subsample_center

    rng = np.random.default_rng(7)
    offsets = 3.0 * rng.standard_normal((4, 40))
    states = planted(offsets=offsets)
    _, blocks = subsample_center(states)
    for b in blocks:
        np.testing.assert_allclose(b.mean(0), 0.0, atol=1e-9)
    fit = fit_shared(states, var=0.999, tau=1e-3, m="all")
    assert fit.k == 2 + 4 * 4 and len(fit.shared_idx) == 2
    assert principal_angles(fit.shared, np.eye(40)[:, :2]).max() < 1e-3


def test_tau_on_the_stringency_scale():
    """tau_k sets tau = tau_k / k at the fitted k: a direction some task uses at relative variance
    between 1e-3 and tau_k / k is shared at the literal tau = 1e-3 but not at the paper's
    stringency."""
    states = planted()
    literal = fit_shared(states, var=0.999, tau=1e-3, m="all")
    strict = fit_shared(states, var=0.999, tau=1e-3, m="all", tau_k=2.8)
    assert strict.k == literal.k and strict.tau == pytest.approx(2.8 / strict.k)
    assert strict.tau * strict.k == pytest.approx(2.8)
    # the private directions: every task's relvar there is ~0 (< 1e-3) except its owner's
    assert set(strict.shared_idx) <= set(literal.shared_idx)
    weak = {t: x.copy() for t, x in states.items()}
    for i, t in enumerate(weak):  # a weak direction all tasks use a little (relvar ~ 0.02 < 2.8 / 18)
        weak[t][:, 30] = 5.0 + 0.5 * np.random.default_rng(i).standard_normal(len(weak[t]))
    lit = fit_shared(weak, var=0.9999, tau=1e-3, m="all")
    st = fit_shared(weak, var=0.9999, tau=1e-3, m="all", tau_k=2.8)
    assert len(lit.shared_idx) == len(st.shared_idx) + 1
    assert len(null_scramble(weak, 0.9999, 1e-3, "all", 5, tau_k=2.8)[2]) == 5


def test_nulls_reject_planted_and_accept_structureless_data():
    states = planted()
    fit = fit_shared(states, var=0.999)
    p, obs, null = null_perm(fit.relvar, fit.tau, fit.m, 200, seed=0)
    assert obs == 2 and p <= 0.05 and p >= 1 / 200
    rng = np.random.default_rng(3)
    flat = {f"t{t}": rng.standard_normal((200, 16)) for t in range(3)}
    p_s, _, _ = null_scramble(flat, 0.95, 1e-3, "all", 50, seed=0)
    assert p_s >= 1 / 50 and p_s > 0.05
    p_s2, _, _ = null_scramble(planted(T=4, d=60, n=200, n_own=3), 0.999, 1e-3, "all", 50, seed=0)
    assert p_s2 == pytest.approx(1 / 50)  # floored at 1/B, never 0


def test_energy_matching():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 30)) * np.linspace(3, 0.1, 30)
    Q = random_basis(30, 30, 1)
    S, pool = Q[:, :3], Q[:, 3:]
    target = energy(X, S)
    a = alpha_match(target, pool[:, :3], X)
    assert a * a * energy(X, pool[:, :3]) == pytest.approx(target, rel=1e-6)
    chosen = k_match(target, pool, X)
    j = chosen.shape[1]
    assert energy(X, chosen) >= target > energy(X, chosen[:, : j - 1])
    with pytest.raises(ValueError):
        k_match(1e9, pool, X)


def test_steering_overlap_repair_and_angles():
    rng = np.random.default_rng(0)
    Q = random_basis(20, 4, 0)
    for _ in range(20):
        v = rng.standard_normal(20)
        assert 0.0 <= steering_overlap(v, Q) <= 1.0 + 1e-12
        assert np.linalg.norm(Q.T @ repair(v, Q, 1.0)) < 1e-10
        half = repair(v, Q, 0.5)
        assert steering_overlap(half, Q) < steering_overlap(v, Q)
    assert steering_overlap(Q[:, 0], Q) == pytest.approx(1.0)
    assert principal_angles(Q, Q).max() < 1e-6
    assert principal_angles(Q, random_basis(20, 4, 5)).max() > 0.1


def test_rank_quality():
    u = np.array([0.3, -0.2, 0.1, 0.0])
    good = rank_quality(u * 2 + 1, u)
    assert good["spearman"] == pytest.approx(1.0) and good["regret1"] == 0.0 and good["flip"] == 0.0
    bad = rank_quality(-u, u)
    assert bad["spearman"] == pytest.approx(-1.0) and bad["regret1"] == pytest.approx(0.5)
    assert bad["flip"] == 1.0  # its top pick helps on validation (0.2 > 0) and hurts held out
