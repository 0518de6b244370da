"""The offline real data sets (issue 55 §8): read by path from installed wheels, never imported."""

from __future__ import annotations

import numpy as np
import pytest
from fair_cdal import io, metrics
from fair_cdal.baselines import concat_kmeans

from icml26_shared import UserError


@pytest.mark.parametrize("name, n, k, groups", [("nutrimouse", 40, 5, 2), ("penguins", 333, 3, 2),
                                                 ("arrests", 5226, 2, 2), ("german", 1000, 2, 2)])
def test_real_data_loaders_read_the_installed_files(name, n, k, groups):
    loader, k_, _ = io.REAL_DATA[name]
    views, y, g = loader()
    assert k_ == k and len(views) == 2
    assert all(v.shape[0] == n and np.isfinite(v).all() for v in views)
    assert len(np.unique(y)) == k and len(np.unique(g)) == groups and len(y) == len(g) == n


def test_penguins_kmeans_matches_the_issue_figures():
    views, y, g = io.load_penguins()
    lab = concat_kmeans(views, g, 3, 0)
    assert abs(metrics.acc(y, lab) - 0.919) < 0.005 and abs(metrics.balance(lab, g) - 0.518) < 0.005
    assert abs(metrics.balance(y, g) - 0.951) < 0.001  # the species' own Balance


def test_a_missing_data_package_is_one_clear_line():
    with pytest.raises(UserError, match="not installed"):
        io.package_data_dir("no_such_pkg_fair_cdal", "data", "no-such-pkg==1")


def test_kmeans_cost_is_the_unexplained_variance_fraction(rng):
    X = rng.normal(size=(200, 3))
    assert metrics.kmeans_cost(X, np.zeros(200, int)) == pytest.approx(1.0)
    assert metrics.kmeans_cost(X, np.arange(200)) == pytest.approx(0.0)
