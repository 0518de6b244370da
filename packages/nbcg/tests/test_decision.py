"""Decision rules (issue 48 item 6): global / per-label / top-k, and ``auto`` chosen on dev by
2-fold cross-fitting."""

import numpy as np
import pytest
from nbcg.train import THRESHOLD_GRID, apply_decision, choose_decision, fit_decision


def _one_label_per_doc(n=300, L=8, seed=0):
    """Each document has exactly one label, its score the row's maximum but at a level that varies
    by document (so no single threshold separates it): top-1 is right, thresholds are not."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, L, n)
    Y = np.eye(L, dtype=int)[y]
    level = rng.uniform(0.05, 0.9, n)[:, None]
    S = level * rng.uniform(0.2, 0.8, (n, L))
    S[np.arange(n), y] = level[:, 0]
    return S, Y


def test_top_k_predicts_exactly_k_and_auto_finds_top_1():
    S, Y = _one_label_per_doc()
    d = fit_decision(S, Y, "top-k")
    assert d["k"] == 1 and (apply_decision(S, d).sum(1) == 1).all()
    auto = choose_decision(S, Y, "auto")
    assert auto["mode"] == "top-k" and auto["k"] == 1 and auto["cv"]["top-k"] > auto["cv"]["global"]


def test_per_label_thresholds_are_each_labels_best_and_global_is_sklearn_equal():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(1)
    Y = (rng.random((400, 5)) < [0.4, 0.2, 0.1, 0.05, 0.3]).astype(int)
    S = np.clip(Y * rng.uniform(0.05, 0.6, 5) + rng.random((400, 5)) * 0.4, 0, 1)
    d = fit_decision(S, Y, "per-label")
    for j in range(5):
        f = [f1_score(Y[:, j], S[:, j] >= t, zero_division=0) for t in THRESHOLD_GRID]
        assert d["thresholds"][j] == pytest.approx(THRESHOLD_GRID[int(np.argmax(f))])
    g = fit_decision(S, Y, "global")
    assert f1_score(Y, apply_decision(S, g), average="macro", zero_division=0) == pytest.approx(
        max(f1_score(Y, S >= t, average="macro", zero_division=0) for t in THRESHOLD_GRID))


def test_given_mode_is_kept_and_unknown_mode_refused():
    S, Y = _one_label_per_doc(60)
    assert choose_decision(S, Y, "global")["mode"] == "global"
    assert choose_decision(S, Y, "per-label")["chosen_by"] == "given"
    with pytest.raises(ValueError):
        fit_decision(S, Y, "median")


def test_estimator_threshold_mode_is_applied_and_checked():
    from nbcg import NBCGClassifier
    from sklearn.datasets import make_multilabel_classification

    from icml26_shared import UserError

    X, Y = make_multilabel_classification(n_samples=200, n_features=20, n_classes=6, random_state=0)
    est = NBCGClassifier(method="bce", epochs=2, device="cpu", threshold_mode="top-k").fit(X, Y)
    assert est.decision_["mode"] == "top-k" and (est.predict(X).sum(1) == est.decision_["k"]).all()
    with pytest.raises(UserError, match="threshold_mode"):
        NBCGClassifier(method="bce", epochs=1, device="cpu", threshold_mode="median").fit(X, Y)
