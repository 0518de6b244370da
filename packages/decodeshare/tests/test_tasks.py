"""The offline task generators: balanced answer positions (a task whose answer always sits at one
option measures a position bias, not the decision), distinct prompts, the calibration split."""

from __future__ import annotations

from collections import Counter

import pytest
from decodeshare.tasks import GENERATORS, make_tasks, split_items
from scipy.stats import chisquare


@pytest.mark.parametrize("task", sorted(GENERATORS))
def test_every_task_balances_its_answer_index(task):
    items = make_tasks(400, seed=0, tasks=(task,))
    n_opt = len(items[0]["options"])
    counts = Counter(it["answer"] for it in items)
    observed = [counts.get(i, 0) for i in range(n_opt)]
    assert min(observed) > 0, f"{task}: answer positions {observed}"
    p = chisquare(observed).pvalue  # against uniform over the options
    assert p > 1e-3, f"{task}: answer positions {observed} are not uniform (chi-square p = {p:.2g})"


def test_prompts_are_distinct_and_the_split_is_disjoint():
    items = make_tasks(12, seed=3)
    assert len({it["prompt"] for it in items}) == len(items)
    calib, evals = split_items(items, 5)
    assert not {it["id"] for it in calib} & {it["id"] for it in evals}
    assert len(calib) == 5 * len(GENERATORS) and len(evals) == 7 * len(GENERATORS)
