"""What MES-RET guarantees: the ablation identities, reward and knowledge invariants, the transfer
geometry, roulette frequencies, the ε schedule, the stop rule and the restart."""

from __future__ import annotations

import numpy as np
import pytest
from mesret import MESRET, MESRETConfig, TaskSpec, core, optimize
from mesret.suites import wcci20


@pytest.fixture(scope="module")
def small():
    return wcci20(3, (5, 4), "mixed", seed=3)


def test_tau0_no_allocation_is_independent_cma(small):
    a = optimize(small, "mesret", fe_per_task=400, seed=5, tau=0, allocation="none")
    b = optimize(small, "indep-cma", fe_per_task=400, seed=5)
    assert b.info["restarts"] == 0  # the identity is until the first stop (indep restarts per task)
    np.testing.assert_array_equal(a.best_f, b.best_f)
    np.testing.assert_array_equal(a.fe_used, b.fe_used)
    full = optimize(small, "mesret", fe_per_task=400, seed=5)  # the mechanism changes the run
    assert not np.array_equal(full.best_f, b.best_f)
    assert np.isfinite(full.info["transfer_survival"]).all() and full.info["extra_generations"].sum() > 0


def test_each_ablation_switches_off_one_mechanism(small):
    norwe = optimize(small, "mesret-norwe", fe_per_task=400, seed=1)
    tau0 = optimize(small, "mesret-tau0", fe_per_task=400, seed=1)
    assert norwe.info["extra_generations"].sum() == 0 and np.isfinite(norwe.info["transfer_survival"]).all()
    assert tau0.info["extra_generations"].sum() > 0 and np.isnan(tau0.info["transfer_survival"]).all()


def test_one_task_without_transfer_is_plain_cma_es(small):
    one = small[:1]
    a = optimize(one, "mesret", fe_per_task=300, seed=2, tau=0)  # roulette only re-orders its generations
    b = optimize(one, "indep-cma", fe_per_task=300, seed=2)
    np.testing.assert_array_equal(a.best_f, b.best_f)


def test_cma_es_converges_on_sphere():
    # a sign error in the mean, path or covariance update stalls far above 1e-10
    task = TaskSpec(8, lambda X: np.sum((X - 0.3) ** 2, axis=1), 0.0, 1.0, f_opt=0.0)
    r = optimize([task], "indep-cma", fe_per_task=3000, seed=0)
    assert r.best_f[0] < 1e-10
    r = optimize([task], "indep-sepcma", fe_per_task=3000, seed=0)
    assert r.best_f[0] < 1e-10


def test_constants_match_hansen_defaults():
    k = core.cma_constants(10, 10)
    w = np.log(5.5) - np.log(np.arange(1, 6))
    np.testing.assert_allclose(k.weights, w / w.sum())
    mueff = 1 / np.sum((w / w.sum()) ** 2)
    assert k.cs == pytest.approx((mueff + 2) / (10 + mueff + 5))
    assert k.c1 == pytest.approx(2 / (11.3**2 + mueff))
    assert k.damps == pytest.approx(1 + k.cs + 2 * max(np.sqrt((mueff - 1) / 11) - 1, 0))
    s = core.cma_constants(10, 10, separable=True)
    assert s.c1 + s.cmu == pytest.approx((12 / 3) * ((1 / mueff) * 2 / (10 + np.sqrt(2)) ** 2
                                                     + (1 - 1 / mueff) * min(1, (2 * mueff - 1) / (144 + mueff))))


def test_fitness_reward_invariants():
    active = np.array([True, True, True, False])
    r = core.fitness_reward([10, 5, 3, 1], [4, 5, 2, 0], [20, 20, 20, 20], active)
    assert np.all(r >= 0) and r.sum() == pytest.approx(1.0) and r[3] == 0.0
    raw = np.array([6 / 10, 0, 1 / 17])
    np.testing.assert_allclose(r[:3], raw / raw.sum())  # the improving task gets the most
    u = core.fitness_reward([1, 1, 1, 1], [1, 1, 1, 1], [2, 2, 2, 2], active)
    np.testing.assert_allclose(u, [1 / 3, 1 / 3, 1 / 3, 0])


def test_diversity_reward_invariants():
    active = np.array([True, True, False])
    r = core.diversity_reward([1, 2, 9], [3, 3, 3], [1, 2, 9], [3, 3, 3], [3, 3, 3], active)
    assert r[2] == 0 and r.sum() == pytest.approx(1.0) and r[1] > r[0]


def test_knowledge_uses_only_tasks_owning_the_dimension():
    std = np.array([[2.0, 2.0, np.nan, np.nan], [1.0, 1.0, 1.5, 0.5]])
    md = np.array([[0.9, 0.9, np.nan, np.nan], [0.1, 0.1, 0.3, 0.7]])
    active = np.array([True, True])
    _, s_bar, m_bar = core.extract_knowledge(np.array([0.9, 0.1]), np.ones(2), std, md, active)
    np.testing.assert_allclose(m_bar[2:], [0.3, 0.7])  # only task 2 owns dims 3–4
    np.testing.assert_allclose(m_bar[:2], 0.9 * 0.9 + 0.1 * 0.1)
    md2 = md.copy()
    md2[0, :2] = 0.0
    _, _, m_bar2 = core.extract_knowledge(np.array([0.9, 0.1]), np.ones(2), std, md2, active)
    np.testing.assert_allclose(m_bar2[2:], m_bar[2:])
    assert not np.allclose(m_bar2[:2], m_bar[:2])
    sig, _, m_plain = core.extract_knowledge(np.zeros(2), np.array([1.0, 3.0]), std, md, active)
    assert sig == pytest.approx(2.0) and m_plain[0] == pytest.approx(0.5)  # plain means


def test_phenotypic_samples_lie_at_mstep_and_point_to_the_mean():
    rng = np.random.default_rng(0)
    m, m_bar = np.full(6, 0.5), np.full(6, 0.8)
    B, D = np.eye(6), np.ones(6)
    X = core.phenotypic_samples(m, 0.3, B, D, rng.standard_normal((50, 6)), m_bar, 0.25, False)
    np.testing.assert_allclose(np.linalg.norm(X - m, axis=1), 0.25, rtol=1e-12)
    X = core.phenotypic_samples(m, 1e-9, B, D, rng.standard_normal((5, 6)), m_bar, 0.25, False)
    np.testing.assert_allclose(X - m, 0.25 / np.sqrt(6), rtol=1e-6)  # toward m̄, not away


def test_genotypic_samples_rescale_the_spread():
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((20000, 3))
    X = core.genotypic_samples(np.zeros(3), 0.5, np.eye(3) * 4.0, Z, 2.0, np.array([1.0, 0.5, np.nan]), False)
    np.testing.assert_allclose(X.std(axis=0), [2.0, 1.0, 2.0], rtol=0.03)


def test_roulette_counts_match_rewards():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    n = 20000
    counts = np.bincount(core.roulette(p, np.random.default_rng(4), n), minlength=4)
    assert counts[3] == 0
    assert np.all(np.abs(counts - n * p) <= 4 * np.sqrt(n * p * (1 - p)) + 1e-9)


def test_epsilon_schedule():
    assert core.epsilon_level(0, 1000, 7.0) == 7.0
    assert core.epsilon_level(150, 1000, 7.0) == pytest.approx(7.0 * 0.5**8)
    assert core.epsilon_level(300, 1000, 7.0) == 0.0 and core.epsilon_level(900, 1000, 7.0) == 0.0


def test_ranking_penalises_out_of_bounds_and_relaxes_small_violations():
    X = np.array([[0.5, 0.5], [1.2, 0.5], [0.5, 0.5], [0.5, 0.5]])
    order = core.rank_samples(X, [3.0, -100.0, 2.0, 1.0], [0.0, 0.0, 0.05, 0.5], eps=0.1)
    assert list(order) == [2, 0, 3, 1]  # cv 0.05 < ε counts as feasible; the outside point is last


def test_stop_rule_and_restart_doubles_lambda(small):
    C = np.eye(3)
    assert core.should_stop(1e-13, np.zeros(3), C, False)
    assert not core.should_stop(1e-11, np.zeros(3), C, False)
    assert not core.should_stop(1e-13, np.array([0, 0, 100.0]), C, False)
    opt = MESRET(small, MESRETConfig(stop_tol=1e9), seed=0, max_fe=2000)
    lam = opt.N
    res = opt.run()
    assert res.info["restarts"] >= 1 and opt.es[0].lam >= 2 * lam


def test_transfer_waits_for_2NT_evaluations(small):
    opt = MESRET(small, seed=0, max_fe=5000)
    opt._initial_round()
    assert not opt.transfer_on()
    while opt.fe <= 2 * opt.N * opt.T:
        opt.generation(0)
    assert opt.transfer_on()
    assert opt.ask(0).shape == (opt.N, small[0].dim) and opt._pending[0] == 1
