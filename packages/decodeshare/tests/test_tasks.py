"""The offline task generators: balanced answer positions (a task whose answer always sits at one
option measures a position bias, not the decision), distinct prompts, the calibration split."""

from __future__ import annotations

from collections import Counter

import pytest
from decodeshare.tasks import (
    GEN_GENERATORS,
    GENERATORS,
    SPLITS,
    make_gen_tasks,
    make_tasks,
    split_items,
    split_of,
)
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


def _solve(prompt: str) -> str:
    """An independent solver of the generation tasks (the test's oracle)."""
    verb, arg = prompt.split(" ", 1)
    if verb == "add":
        return str(sum(int(x) for x in arg.split("+")))
    return {"reverse": lambda w: "".join(reversed(w)), "sort": lambda w: "".join(sorted(w)),
            "rotate": lambda w: w[1:] + w[:1], "next": lambda w: "".join("bcdefghijk"["abcdefghij".index(c)] for c in w)}[verb](arg)


@pytest.mark.parametrize("task", sorted(GEN_GENERATORS))
def test_generation_answers_are_right_and_need_several_tokens(task):
    items = make_gen_tasks(200, seed=1, tasks=(task,))
    assert all(it["target"] == _solve(it["prompt"]) for it in items)
    lengths = Counter(len(it["target"]) for it in items)
    assert min(lengths) >= 3, f"{task}: answers {lengths} (one or two tokens give too few decode states)"
    if task != "add":  # word lengths 4-7 drawn uniformly
        p = chisquare([lengths.get(n, 0) for n in range(4, 8)]).pvalue
        assert p > 1e-3, f"{task}: answer lengths {lengths} are not uniform over 4-7"
        first = Counter(it["target"][0].lower() for it in items)
        assert len(first) >= 6, f"{task}: first answer letters {first}"


def test_generation_splits_are_disjoint_by_prompt():
    dev = make_gen_tasks(30, seed=0, split="dev")
    held = make_gen_tasks(30, seed=0)
    assert not {it["prompt"] for it in dev} & {it["prompt"] for it in held}
    assert all(split_of(it["prompt"]) == "heldout" for it in held)
    assert {split_of(p) for p in ("add 1+2", "reverse abcd", "sort jihg", "next abcd", "rotate cafe")} <= set(SPLITS)
