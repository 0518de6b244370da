import math

import numpy as np
import pytest

from icml26_shared import eval as ev


def test_accuracy_and_groups():
    pred, tgt, grp = [1, 0, 1, 1], [1, 1, 1, 0], ["a", "a", "b", "b"]
    assert ev.accuracy(pred, tgt) == 0.5
    assert ev.group_accuracies(pred, tgt, grp) == {"a": 0.5, "b": 0.5}
    assert ev.worst_group_accuracy([1, 1, 0, 0], [1, 1, 1, 1], grp) == 0.0
    with pytest.raises(ValueError):
        ev.accuracy([1], [1, 2])


def test_normalized_accuracy():
    assert ev.normalized_accuracy({"a": 0.5, "b": 0.9}, {"a": 1.0, "b": 0.9}) == pytest.approx(0.75)


def test_ranking_metrics_by_hand():
    ranking = ["d3", "d1", "d7", "d2"]
    assert ev.mrr_at_k(ranking, {"d1"}, 10) == 0.5
    assert ev.mrr_at_k(ranking, {"d1"}, 1) == 0.0
    assert ev.recall_at_k(ranking, {"d1", "d9"}, 10) == 0.5
    # one relevant at rank 2: DCG = 1/log2(3), IDCG = 1
    assert ev.ndcg_at_k(ranking, {"d1"}, 10) == pytest.approx(1 / math.log2(3))
    graded = {"d3": 1, "d1": 2}
    ideal = 2 + 1 / math.log2(3)
    assert ev.ndcg_at_k(ranking, graded, 10) == pytest.approx((1 + 2 / math.log2(3)) / ideal)
    assert ev.ndcg_at_k(["d1", "d3"], graded, 10) == pytest.approx(1.0)


def test_compare_times_side_by_side():
    calls = {"a": 0, "b": 0}

    def mk(k):
        def f():
            calls[k] += 1
            np.linalg.svd(np.ones((30, 30)))
        return f

    t = ev.compare({"a": mk("a"), "b": mk("b")}, warmup=1, repeats=3)
    assert calls == {"a": 4, "b": 4}
    assert t["a"].p20 <= t["a"].median <= t["a"].p80
    assert ev.ratio(t, "a", "b") > 0
