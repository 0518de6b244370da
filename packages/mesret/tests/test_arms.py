"""Every arm counts each point it evaluates and stays inside the budget; the semantic layout."""

from __future__ import annotations

import numpy as np
import pytest
from mesret import ALGOS, SemanticLayout, TaskSpec, optimize
from mesret.policy import ENVS, policy_suite
from mesret.suites import wcci20


class Counted:
    def __init__(self, fn):
        self.fn, self.n = fn, 0

    def __call__(self, X):
        self.n += len(X)
        return self.fn(X)


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_budget_and_counting(algo):
    base = wcci20(4, (4, 6), "low", seed=9)
    tasks = [TaskSpec(t.dim, Counted(t.fn), t.lower, t.upper, t.f_opt, t.name) for t in base]
    fe = 250
    r = optimize(tasks, algo, fe_per_task=fe, seed=0)
    counted = np.array([t.fn.n for t in tasks])
    np.testing.assert_array_equal(r.fe_used, counted)
    total, T = int(r.fe_used.sum()), len(tasks)
    assert total <= fe * T
    gen = {"mfea": 20 * T, "openai-es": 9 + 1}.get(algo, 8)  # one generation of the arm (λ = 8 at D = 6)
    if algo in ("indep-cma", "indep-sepcma", "openai-es", "mesret-norwe"):
        assert np.all(r.fe_used <= fe) and np.all(r.fe_used > fe - gen)  # even split, per task
    else:
        assert total > fe * T - gen
    assert np.all(np.isfinite(r.best_f))
    for t, x in zip(tasks, r.best_x, strict=True):  # best_x is real and reproduces best_f
        assert x.shape == (t.dim,)
    np.testing.assert_allclose([t.fn.fn(x[None])[0] for t, x in zip(tasks, r.best_x, strict=True)], r.best_f)


def test_reward_weighted_evaluation_moves_budget():
    tasks = wcci20(6, (5,), "mixed", seed=2)
    r = optimize(tasks, "mesret", fe_per_task=600, seed=0)
    assert r.fe_used.max() > r.fe_used.min() + 8  # uneven: tasks earn extra generations


def test_semantic_layout_round_trip_and_shared_coordinates():
    h = 5
    lays = [SemanticLayout(ENVS[e][0], ENVS[e][1], h) for e in ENVS]
    rng = np.random.default_rng(0)
    shared = rng.standard_normal(h + h * h + h)
    for lay in lays:
        theta = rng.standard_normal((3, lay.dim))
        np.testing.assert_array_equal(lay.pack(lay.unpack(theta)), theta)
        theta[:, : shared.size] = shared
        p = lay.unpack(theta)
        np.testing.assert_array_equal(p["b1"][0], shared[:h])
        np.testing.assert_array_equal(p["W2"][0].ravel(), shared[h:h + h * h])
        np.testing.assert_array_equal(p["b2"][0], shared[h + h * h:])
    naive = SemanticLayout(4, 2, h, "naive")
    theta = np.arange(naive.dim, dtype=float)[None]
    assert naive.unpack(theta)["W1"].ravel()[0] == 0.0  # naive starts with W1: coordinates differ per task


def test_policy_tasks_score_returns():
    tasks = policy_suite(("CartPole-v1", "Pendulum-v1"), "semantic", hidden=3, horizon=20)
    X = np.zeros((2, tasks[0].dim))
    f = tasks[0].fn(X)
    assert f.shape == (2,) and np.all(-f >= 1) and np.all(-f <= 20)  # CartPole: +1 per step alive
    assert np.all(tasks[1].fn(np.zeros((2, tasks[1].dim))) > 0)  # Pendulum returns are negative costs
