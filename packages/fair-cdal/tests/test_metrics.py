import numpy as np
import pytest
from fair_cdal import metrics


def test_balanced_clusters_score_one_and_single_group_zero():
    pred = np.repeat([0, 1, 2], 4)
    g = np.tile([0, 1], 6)
    assert metrics.balance(pred, g, "ratio") == 1.0
    assert metrics.balance(pred, g, "proportion") == pytest.approx(1.0)
    assert metrics.mnce(pred, g) == pytest.approx(1.0)
    g2 = g.copy()
    g2[pred == 2] = 0  # cluster 2 holds one group only
    assert metrics.balance(pred, g2, "ratio") == 0.0
    assert metrics.balance(pred, g2, "proportion") == 0.0
    assert metrics.mnce(pred, g2) == pytest.approx(0.0, abs=1e-12)


def test_acc_is_permutation_invariant_and_hungarian():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 100)
    pred = y.copy()
    pred[:10] = (pred[:10] + 1) % 4
    perm = np.array([2, 0, 3, 1])
    assert metrics.acc(y, pred) == pytest.approx(0.9)
    assert metrics.acc(y, perm[pred]) == metrics.acc(y, pred)
    assert metrics.nmi(y, perm[pred]) == pytest.approx(metrics.nmi(y, pred))
    assert metrics.pairwise_f(y, y) == 1.0 and metrics.purity(y, perm[y]) == 1.0


def test_hypervolume():
    assert metrics.hypervolume([(0.5, 0.5)]) == pytest.approx(0.25)
    assert metrics.hypervolume([(1.0, 0.2), (0.5, 0.6)]) == pytest.approx(0.5 * 0.2 + 0.5 * 0.6)
    assert metrics.hypervolume([(1.0, 0.2), (0.5, 0.1)]) == pytest.approx(0.2)  # dominated point
