"""The estimator: chunked = in-memory, out-of-sample coding, determinism, fairness mechanism,
memory, and scikit-learn's API checks."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from fair_cdal import CDAL, metrics
from fair_cdal.config import SyntheticConfig
from fair_cdal.synthetic import make_fair_multiview
from sklearn.utils.estimator_checks import check_estimator


def test_chunked_memmap_fit_equals_in_memory(small, tmp_path):
    views, y, g = small
    mm = []
    for i, v in enumerate(views):
        np.save(tmp_path / f"v{i}.npy", v)
        mm.append(np.load(tmp_path / f"v{i}.npy", mmap_mode="r"))
    kw = dict(n_clusters=3, alpha=0.05, max_iter=6, tol=0.0, random_state=0)
    a = CDAL(**kw).fit(views, sensitive_features=g)
    b = CDAL(chunk_size=37, **kw).fit(mm, sensitive_features=g)
    assert np.abs(a.semantic_graph_ - b.semantic_graph_).max() < 1e-8
    assert np.abs(a.sensitive_graph_ - b.sensitive_graph_).max() < 1e-8
    assert np.allclose(a.objective_, b.objective_, rtol=1e-10)
    assert (a.labels_ == b.labels_).all()


def test_predict_on_training_views_reproduces_embedding(small):
    views, y, g = small
    est = CDAL(n_clusters=3, alpha=0.0, gamma=0.0, max_iter=30, random_state=0).fit(views)
    from fair_cdal import core

    train = core.embed(est.semantic_graph_, est.embedding_basis_)
    assert np.abs(est.transform(views) - train).max() < 0.05
    assert np.mean(est.predict(views) == est.labels_) >= 0.97


def test_one_seed_one_result(small):
    views, y, g = small
    a = CDAL(n_clusters=3, max_iter=5, random_state=7).fit(views, sensitive_features=g)
    b = CDAL(n_clusters=3, max_iter=5, random_state=7).fit(views, sensitive_features=g)
    assert (a.labels_ == b.labels_).all() and np.array_equal(a.objective_, b.objective_)


def test_fairness_mechanism_raises_balance(small):
    """With the α term on (authors' k-means final step), clusters mix the groups that the data's shift separates; with the
    mechanism off (α = β = γ = 0) they follow the groups (fails if α's update were dropped)."""
    views, y, g = small
    off = CDAL(n_clusters=3, alpha=0.0, beta=0.0, gamma=0.0, max_iter=20, random_state=0, assign="kmeans")
    on = CDAL(n_clusters=3, alpha=3.0, max_iter=20, random_state=0, assign="kmeans")
    b_off = metrics.balance(off.fit_predict(views, sensitive_features=g), g)
    b_on = metrics.balance(on.fit_predict(views, sensitive_features=g), g)
    assert on.fairness_terms_active_ == {"alpha": True, "beta": True, "gamma": True}
    assert b_on > b_off + 0.1


def test_intersectional_groups_and_one_array_with_view_sizes(small):
    views, y, g = small
    S = np.c_[g, np.arange(len(g)) % 2]
    est = CDAL(n_clusters=3, view_sizes=[5, 7], max_iter=3, random_state=0)
    est.fit(np.hstack(views), sensitive_features=S)
    assert est.n_groups_ == 4 and est.W_.shape == (6, 4)
    with pytest.raises(ValueError, match="rows"):
        est.fit(np.hstack(views), sensitive_features=g[:-1])


def test_memory_of_an_iteration_at_20000_is_far_below_dense():
    """One CDAL iteration at n = 20,000 traced (the slow test below traces a whole fit)."""
    from fair_cdal.config import SolverConfig
    from fair_cdal.solver import CDALSolver, Views

    views, y, g = make_fair_multiview(SyntheticConfig(n=20000, k=3, dims=(4, 4)), seed=0)
    solver = CDALSolver(Views(views), g, 2, 6, SolverConfig(alpha=1e-3, kmeans_n_init=1, qp_max_iter=10),
                        seed=0)
    tracemalloc.start()
    solver.step()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 0.01 * 20000**2 * 8  # O(n·m) buffers only: far below 1% of one n×n matrix


@pytest.mark.slow
def test_memory_of_a_fit_at_20000_is_far_below_dense():
    views, y, g = make_fair_multiview(SyntheticConfig(n=20000, k=3, dims=(4, 4)), seed=0)
    tracemalloc.start()
    CDAL(n_clusters=3, max_iter=1, random_state=0).fit(views, sensitive_features=g)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 0.05 * 20000**2 * 8


def test_sklearn_api_checks_fast():
    """A subset of check_estimator at max_iter = 2 (the full suite is the slow test below)."""
    results = check_estimator(CDAL(max_iter=2), on_fail=None, legacy=False)
    failed = [r["check_name"] for r in results if r["status"] == "failed"]
    assert not failed, failed


@pytest.mark.slow
def test_check_estimator_default():
    results = check_estimator(CDAL(), on_fail=None)
    failed = [r["check_name"] for r in results if r["status"] == "failed"]
    assert not failed, failed
