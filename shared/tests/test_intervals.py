"""Intervals that are intervals: t for few seeds, BCa for many units, none under 3, and a two-level
bootstrap for units nested in seeds."""

import math
import time

import numpy as np
import pytest
from scipy import stats

from icml26_shared.eval import PairedInterval, paired_interval, paired_interval_clustered


def test_three_values_give_the_student_t_interval():
    a, b = np.array([0.71, 0.64, 0.69]), np.array([0.60, 0.62, 0.55])
    d = a - b
    iv = paired_interval(a, b)
    low, high = stats.t.interval(0.95, len(d) - 1, loc=np.mean(d), scale=stats.sem(d))
    assert iv.method == "t" and iv.defined and iv.n == 3
    assert (iv.low, iv.high) == (low, high)
    assert iv.mean == pytest.approx(np.mean(d))
    assert "t, n=3" in str(iv)
    # wider than the range of the data: a bootstrap would stop at the worst of the three
    assert iv.low < d.min() and iv.high > d.max()
    iv90 = paired_interval(d, confidence=0.9)
    assert (iv90.low, iv90.high) == stats.t.interval(0.9, 2, loc=np.mean(d), scale=stats.sem(d))


def test_t_up_to_19_then_bca_from_20():
    rng = np.random.default_rng(3)
    assert paired_interval(rng.normal(size=19)).method == "t"
    assert paired_interval(rng.normal(size=20)).method == "bca"


def test_thirty_values_give_scipys_bca_with_the_same_seed():
    d = np.random.default_rng(1).normal(0.2, 1.0, 30)
    iv = paired_interval(d, seed=5)
    ref = stats.bootstrap((d,), np.mean, confidence_level=0.95, n_resamples=9999, method="BCa",
                          random_state=np.random.default_rng(5)).confidence_interval
    assert iv.method == "bca" and iv.n == 30
    assert (iv.low, iv.high) == (float(ref.low), float(ref.high))


def test_two_values_give_no_interval():
    iv = paired_interval([0.8, 0.7], [0.5, 0.6])
    assert iv.method == "none" and not iv.defined
    assert math.isnan(iv.low) and math.isnan(iv.high)
    assert iv.mean == pytest.approx(0.2)
    assert not iv.clears(0.0) and not iv.clears(0.0, "lower")
    assert "n<3: no interval" in str(iv)
    assert paired_interval([1.0]).method == "none"
    with pytest.raises(ValueError):
        paired_interval([])


def test_zero_variance_collapses_with_the_method_of_its_size():
    small = paired_interval([0.5] * 3)
    large = paired_interval([0.5] * 25)
    assert (small.low, small.high, small.method) == (0.5, 0.5, "t")
    assert (large.low, large.high, large.method) == (0.5, 0.5, "bca")


def test_positional_construction_still_works():
    iv = PairedInterval(0.1, 0.05, 0.15, 10, 0.95)
    assert iv.method == "bca" and iv.defined and iv.clears(0.0)
    assert not PairedInterval(0.1, math.nan, math.nan, 2).clears(0.0)


def _two_level(rng, k, n, tau, sigma=1.0, mu=0.3):
    x = mu + rng.normal(0, tau, k)[:, None] + rng.normal(0, sigma, (k, n))
    return x.ravel(), np.repeat(np.arange(k), n)


def test_clustered_is_wider_than_the_unit_bootstrap_when_seeds_differ_and_is_deterministic():
    x, c = _two_level(np.random.default_rng(0), k=3, n=200, tau=1.0)
    t0 = time.perf_counter()
    iv = paired_interval_clustered(x, c, seed=4)
    took = time.perf_counter() - t0
    naive = paired_interval(x, seed=4)  # 600 units as if independent: BCa
    assert iv.method == "cluster" and iv.n == 600 and iv.n_clusters == 3 and iv.defined
    assert iv.mean == pytest.approx(np.mean([x[c == j].mean() for j in range(3)]))
    assert iv.low < iv.mean < iv.high
    assert iv.high - iv.low > 3 * (naive.high - naive.low)
    assert paired_interval_clustered(x, c, seed=4) == iv
    assert paired_interval_clustered(x, c, seed=5) != iv
    assert "3 clusters" in str(iv)
    assert took < 1.0


def test_clustered_point_estimate_weights_each_cluster_equally_and_b_is_subtracted():
    a = np.array([1.0, 1.0, 1.0, 1.0, 3.0, 3.5])
    c = np.array(["s0", "s0", "s0", "s0", "s1", "s1"])
    iv = paired_interval_clustered(a + 1.0, c, np.full(6, 1.0), n_resamples=999)
    assert iv.mean == pytest.approx((1.0 + 3.25) / 2)
    with pytest.raises(ValueError):
        paired_interval_clustered(a, c[:5])
    with pytest.raises(ValueError):
        paired_interval_clustered([], [])
    assert paired_interval_clustered([0.2, 0.3], [0, 1]).method == "none"


def test_one_cluster_is_the_plain_unit_percentile_bootstrap():
    x = np.random.default_rng(2).normal(0.1, 1.0, 50)
    iv = paired_interval_clustered(x, np.zeros(50, int), seed=0, n_resamples=4999)
    rng = np.random.default_rng(0)
    rng.integers(0, 1, size=(4999, 1))  # the cluster draw, trivial with one cluster
    boot = x[rng.integers(0, 50, size=(4999, 50))].mean(axis=1)
    assert (iv.low, iv.high) == tuple(np.quantile(boot, [0.025, 0.975]))
    assert iv.n_clusters == 1 and iv.method == "cluster"


@pytest.mark.slow
def test_clustered_covers_a_planted_two_level_truth_at_about_95_percent():
    rng = np.random.default_rng(2026)
    hits = 0
    sims = 200
    for s in range(sims):
        x, c = _two_level(rng, k=5, n=50, tau=0.5)
        iv = paired_interval_clustered(x, c, seed=s, n_resamples=1999)
        hits += iv.low <= 0.3 <= iv.high
    assert 0.88 <= hits / sims <= 0.99
