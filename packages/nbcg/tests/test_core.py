"""What the reconstructed method guarantees: NOTEARS, coalitions, Nash weights, Nash-MTL, metrics,
the generator."""

import numpy as np
import pytest
import torch
from nbcg.config import NBCGConfig, SEMConfig, SynthConfig
from nbcg.core import (
    NashBargaining,
    choose_sem_threshold,
    dag_from_adjacency,
    edge_scores,
    fit_label_sem,
    form_coalitions,
    is_acyclic,
    multilabel_scores,
    nash_mtl_alpha,
    nash_weights,
    notears_h,
    rare_labels,
)
from nbcg.synth import make_world, sample


def test_notears_zero_on_dag_positive_on_cycle():
    rng = np.random.default_rng(0)
    dag = np.triu(rng.normal(size=(6, 6)), 1)
    perm = rng.permutation(6)
    dag = dag[perm][:, perm]  # any DAG, not only upper-triangular
    assert abs(float(notears_h(torch.tensor(dag)))) < 1e-9
    cyc = dag.copy()
    cyc[perm[5], perm[0]] = 0.7  # closes a cycle with the path perm[0] → ... → perm[5]
    assert not is_acyclic(cyc != 0)
    assert float(notears_h(torch.tensor(cyc))) > 1e-3


def test_sem_finds_planted_edge_and_is_acyclic():
    rng = np.random.default_rng(1)
    n = 3000
    a = rng.random(n) < 0.4
    b = np.where(a, rng.random(n) < 0.8, rng.random(n) < 0.02)
    c = rng.random(n) < 0.3  # independent
    Y = np.stack([a, b, c], 1).astype(int)
    A = fit_label_sem(Y, SEMConfig(outer_iters=3, inner_steps=60))
    dag = dag_from_adjacency(A, 0.3)
    assert is_acyclic(dag)
    assert dag[0, 1] or dag[1, 0]          # the dependent pair is linked
    assert not (dag[0, 2] or dag[2, 0] or dag[1, 2] or dag[2, 1])  # the independent label is not
    assert abs(float(notears_h(torch.tensor(A)))) < 1e-2


def test_bic_threshold_keeps_the_planted_edge_and_drops_noise():
    rng = np.random.default_rng(2)
    n = 3000
    a = rng.random(n) < 0.4
    b = np.where(a, rng.random(n) < 0.8, rng.random(n) < 0.02)
    c = rng.random(n) < 0.3
    Y = np.stack([a, b, c], 1).astype(int)
    A = np.array([[0, 2.5, 0.04], [0, 0, 0.0], [0, 0.02, 0]])   # one real edge, two noise edges
    t, rows = choose_sem_threshold(A, Y, (0.01, 0.03, 0.1, 3.0))
    assert [r["edges"] for r in rows] == [3, 2, 1, 0]
    assert t == 0.1 and min(rows, key=lambda r: r["bic"])["threshold"] == t
    # the planted edge explains the data: the empty graph's BIC is far worse
    assert rows[-1]["bic"] - rows[2]["bic"] > 100


def test_dag_threshold_breaks_cycles():
    A = np.array([[0, 0.9, 0], [0, 0, 0.8], [0.5, 0, 0]])
    dag = dag_from_adjacency(A, 0.3)
    assert is_acyclic(dag) and dag.sum() == 2 and not dag[2, 0]  # the weakest edge went


@pytest.mark.parametrize("method", ["components", "ancestors", "spectral"])
@pytest.mark.parametrize("max_size", [1, 2, 3, 5])
def test_coalitions_partition_and_respect_max_size(max_size, method):
    world = make_world(SynthConfig(n_labels=16), seed=3)
    freq = np.arange(16, 0, -1).astype(float)
    groups = form_coalitions(world.dag, freq, max_size, method, weights=world.dag.astype(float))
    flat = sorted(i for g in groups for i in g)
    assert flat == list(range(16))
    assert all(1 <= len(g) <= max_size for g in groups)
    if max_size > 1:
        assert len(groups) > 1 and max(map(len, groups)) > 1


@pytest.mark.parametrize("method", ["components", "ancestors", "spectral"])
def test_rare_child_joins_its_parent(method):
    dag = np.zeros((5, 5), bool)
    dag[0, 4] = True  # 4 is a rare child of 0
    freq = np.array([100, 90, 80, 70, 3.0])
    groups = form_coalitions(dag, freq, 2, method, weights=dag.astype(float))
    assert [0, 4] in groups


def test_ancestor_groups_follow_the_most_frequent_parent_and_spectral_cuts_weak_links():
    # 0 -> 2 <- 1 (2's most frequent parent is 0), 1 -> 3: components put all four together,
    # ancestor groups split them by root: {0, 2} and {1, 3}
    dag = np.zeros((4, 4), bool)
    dag[0, 2] = dag[1, 2] = dag[1, 3] = True
    freq = np.array([50.0, 40.0, 10.0, 5.0])
    assert form_coalitions(dag, freq, 8, "components") == [[0, 1, 2, 3]]
    assert sorted(form_coalitions(dag, freq, 8, "ancestors")) == [[0, 2], [1, 3]]
    # two strong 3-cliques joined by one weak edge: spectral with max size 3 cuts the weak edge
    W = np.zeros((6, 6))
    for a, b in ((0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5)):
        W[a, b] = 1.0
    W[2, 3] = 0.05
    got = form_coalitions(W > 0, np.ones(6), 3, "spectral", weights=W)
    assert sorted(got) == [[0, 1, 2], [3, 4, 5]]


def test_nash_weights_inverse_gap_and_under_served_first():
    u = np.array([0.5, 0.2, 0.3])
    d = np.array([0.1, 0.15, 0.0])
    w = nash_weights(u, d)
    gap = u - d
    np.testing.assert_allclose(w / w.sum(), (1 / gap) / (1 / gap).sum())
    assert np.argmax(w) == np.argmin(gap) == 1
    with pytest.raises(ValueError):
        nash_weights(u, u)


@pytest.mark.parametrize("mode", ["ema", "min", "solo"])
def test_bargaining_keeps_d_below_u_and_is_scale_free(mode):
    rng = np.random.default_rng(0)
    cfg = NBCGConfig(disagreement=mode)
    a, b = NashBargaining(cfg), NashBargaining(cfg)
    base = np.array([1.0, 0.5, 2.0])
    a.set_reference(base)
    b.set_reference(base * 1e3)
    for t in range(30):
        losses = base * (1 - 0.02 * t * np.array([1.0, 0.1, 0.5])) * (1 + 0.05 * rng.random(3))
        wa, ua = a.step(losses)
        wb, _ = b.step(losses * 1e3)
        assert np.all(ua - a.d >= cfg.eps - 1e-12)
        np.testing.assert_allclose(wa, wb, rtol=1e-9)
    # the coalition that improved least (index 1) is the one bargaining favours
    assert np.argmax(wa) == 1


def test_nash_mtl_solution_and_invariances():
    rng = np.random.default_rng(0)
    G = rng.normal(size=(40, 4)) * np.array([1.0, 3.0, 0.2, 1.5])
    alpha = nash_mtl_alpha(G)
    M = G.T @ G
    np.testing.assert_allclose(M @ alpha, 1 / alpha, rtol=1e-6, atol=1e-6)
    assert np.all(alpha > 0)
    np.testing.assert_allclose(nash_mtl_alpha(G * 7.0), alpha / 7.0, rtol=1e-6)
    Q, _ = np.linalg.qr(rng.normal(size=(40, 3)))
    a_orth = nash_mtl_alpha(Q * 2.0)
    np.testing.assert_allclose(a_orth, np.full(3, 0.5), rtol=1e-6)  # ‖g‖=2 → α = 1/‖g‖


def test_nash_mtl_published_step():
    """α unnormalised: α_i (Kα)_i = 1 with K = GᵀG, so ‖Gα‖ = √K before the clip, ≤ 1 after, and
    gradients × 10 leave the clipped update unchanged."""
    from nbcg.core import nash_mtl_step

    rng = np.random.default_rng(1)
    G = rng.normal(size=(30, 5)) * np.array([0.5, 4.0, 1.0, 0.1, 2.0])
    alpha, raw, step = nash_mtl_step(G)
    np.testing.assert_allclose(alpha * (G.T @ G @ alpha), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(raw), np.sqrt(5), rtol=1e-6)
    assert np.linalg.norm(step) <= 1.0 + 1e-12
    np.testing.assert_allclose(nash_mtl_step(G * 10.0)[2], step, rtol=1e-6, atol=1e-9)


def test_metrics_perfect_and_rare_subset():
    rng = np.random.default_rng(0)
    Y = (rng.random((50, 10)) < 0.3).astype(int)
    Y[0] = 1
    s = multilabel_scores(Y, Y, Y.astype(float), Y.sum(0))
    assert s["micro_f1"] == s["macro_f1"] == s["rare_f1"] == 1.0
    counts = np.array([50, 40, 30, 20, 10, 9, 8, 7, 2, 1])
    assert sorted(rare_labels(counts, 0.3)) == [7, 8, 9]
    P = Y.copy()
    P[:, [7, 8, 9]] = 0       # wrong only on the rare labels
    assert multilabel_scores(Y, P, P, counts)["rare_f1"] == 0.0
    P = Y.copy()
    P[:, [0, 1]] = 1 - P[:, [0, 1]]   # wrong only on head labels
    assert multilabel_scores(Y, P, P, counts)["rare_f1"] == 1.0


def test_generator_dag_acyclic_and_spurious_tie_flips():
    world = make_world(seed=0)
    assert is_acyclic(world.dag)
    _, Ytr = sample(world, 3000, seed=1)
    _, Ysh = sample(world, 3000, seed=2, shift=True)
    tails = np.flatnonzero(world.partner >= 0)
    assert len(tails) > 0
    for j in tails:
        h = world.partner[j]
        on_tr, on_sh = Ytr[:, j] == 1, Ysh[:, j] == 1
        assert Ytr[on_tr, h].mean() > 0.8       # tied in train
        assert Ysh[on_sh, h].sum() == 0         # never together under shift


def test_edge_scores():
    T = np.zeros((3, 3), bool)
    T[0, 1] = True
    assert edge_scores(T, T)["f1"] == 1.0
    assert edge_scores(T.T, T)["f1"] == 1.0 and edge_scores(T.T, T, directed=True)["f1"] == 0.0
