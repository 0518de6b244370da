"""The protocol's exact identities: order mapping, ratios, directions, conflict filtering, I/O."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mc2_bench.core import (
    MC2Item,
    letter_to_modality,
    modality_to_letter,
    options,
    parse_letter,
    preference_direction,
    preference_metrics,
    prompt_text,
)
from mc2_bench.io import build_conflicts, load_mc2
from mc2_bench.protocol import evaluate, metrics_from_records

ITEMS = [MC2Item(f"i{k}", "color" if k % 2 else "count", "What colour is the car?", "red", "blue",
                 "The car is blue.") for k in range(6)]


class Always:
    """A mock adapter answering with one modality (or a letter) regardless of order."""

    def __init__(self, modality=None, letter=None, invalid_every=0):
        self.modality, self.letter, self.invalid_every = modality, letter, invalid_every

    def answer(self, items, mode, order, answer_mode="letter", follow=None):
        out = []
        for k, it in enumerate(items):
            if self.invalid_every and k % self.invalid_every == 0:
                letter = None
            elif self.letter:
                letter = self.letter
            else:
                target = follow if (mode == "icc" and self.modality == "obey") else self.modality
                letter = modality_to_letter(target, order)
            out.append({"letter": letter, "text": str(letter), "prompt": prompt_text(it, mode, order, follow)})
        return out


def test_order_swap_maps_a_and_b_to_one_modality():
    assert letter_to_modality("A", 0) == letter_to_modality("B", 1) == "vision"
    assert letter_to_modality("B", 0) == letter_to_modality("A", 1) == "text"
    assert letter_to_modality(None, 0) is None
    it = ITEMS[0]
    for order in (0, 1):
        for m in ("vision", "text"):
            letter = modality_to_letter(m, order)
            opt = options(it, order)["AB".index(letter)]
            assert opt == (it.answer_vision if m == "vision" else it.answer_text)


def test_always_vision_model_is_order_consistent_and_letter_bias_is_not():
    r = evaluate(Always("vision"), ITEMS, "single")
    assert r["order_consistency"] == 1.0 and r["vision_ratio"] == 1.0 and r["text_ratio"] == 0.0
    r = evaluate(Always(letter="A"), ITEMS, "single")  # always "A": position bias, not preference
    assert r["order_consistency"] == 0.0 and r["vision_ratio"] == 0.5


def test_ratios_sum_to_one_and_invalid_answers_are_excluded():
    m = preference_metrics(["vision", "text", "vision"], ["vision", "vision", "text"])
    assert m["vision_ratio"] + m["text_ratio"] == pytest.approx(1.0)
    assert m["vision_ratio"] == pytest.approx(4 / 6)
    r = evaluate(Always("text", invalid_every=3), ITEMS, "single", per_item=True)
    assert r["invalid_rate"] == pytest.approx(2 / 6)
    assert r["text_ratio"] == 1.0 and r["vision_ratio"] == 0.0
    again = metrics_from_records(r["records"])
    assert again["vision_ratio"] == r["vision_ratio"] and again["invalid_rate"] == r["invalid_rate"]


def test_instruction_following_counts_both_directions():
    assert evaluate(Always("obey"), ITEMS, "icc")["instruction_following"] == 1.0
    assert evaluate(Always("vision"), ITEMS, "icc")["instruction_following"] == 0.5


def test_prompts_follow_the_authors_templates():
    it = ITEMS[0]
    p = prompt_text(it, "single", 1)
    assert p.startswith("Text context: The car is blue.") and "A. blue\nB. red" in p
    assert p.endswith("Answer the question by selecting the correct answer A or B.")
    assert "Text context" not in prompt_text(it, "base_image", 0)
    assert "follow the image" in prompt_text(it, "icc", 0, "vision")
    assert parse_letter("B.") == "B" and parse_letter("Answer: A") == "A" and parse_letter("none") is None


@pytest.mark.parametrize("method", ["diffmean", "pca", "probe"])
def test_direction_recovers_planted_direction(method):
    rng = np.random.default_rng(0)
    d = rng.standard_normal(32)
    d /= np.linalg.norm(d)
    base = rng.standard_normal((200, 32)) * 0.3
    hv, ht = base + 2.0 * d, base - 2.0 * d + rng.standard_normal((200, 32)) * 0.05
    v = preference_direction(hv, ht, method)
    tol = 0.99 if method != "probe" else 0.8  # the probe's penalty bends it (core.probe_direction)
    assert float(v @ d) > tol  # the sign too: it points toward follow-image states
    assert float(preference_direction(ht, hv, method) @ d) < -tol


def test_build_conflicts_drops_items_failing_a_single_modality_check():
    vqa = [{"id": k, "question": "q", "answer": "cat", "task": "object"} for k in range(4)]
    gen = lambda q: ("dog", f"A {q['id']} dog.")  # noqa: E731
    # item 1 fails the image check, item 2 the text check
    check = lambda it, mode: ("cow" if it.id == "1" else "cat") if mode == "base_image" else (  # noqa: E731
        "cat" if it.id == "2" else "dog")
    kept = build_conflicts(vqa, gen, check)
    assert [it.id for it in kept] == ["0", "3"]
    assert all(it.answer_text == "dog" and it.answer_vision == "cat" for it in kept)


def test_load_mc2_reads_both_spellings_and_coco_paths(tmp_path):
    (tmp_path / "val2014").mkdir()
    (tmp_path / "val2014" / "COCO_val2014_000000000042.jpg").write_bytes(b"x")
    (tmp_path / "7.png").write_bytes(b"x")
    data = [{"image_id": 42, "task": "color", "question": "q", "answer_vision": "red",
             "answer_text": "blue", "context": "c"},
            {"image_id": "7", "question": "q2", "gt": "one", "hitem": "two", "context": {"icc": "c2"}}]
    path = tmp_path / "items.json"
    path.write_text(json.dumps(data))
    items = load_mc2(path, tmp_path)
    assert items[0].image.endswith("val2014/COCO_val2014_000000000042.jpg")
    assert (items[1].answer_vision, items[1].answer_text, items[1].context) == ("one", "two", "c2")


class Reader:
    """A mock adapter that answers from what its prompt shows: the option named by the text
    context when there is one (base_text), the image's answer (an oracle by item id) otherwise."""

    def __init__(self, items):
        self.seen = {it.id: it.answer_vision for it in items}

    def answer(self, items, mode, order, answer_mode="letter", follow=None):
        import re

        out = []
        for it in items:
            text = prompt_text(it, mode, order, follow)
            m = re.search(r"Text context: .* is (\w+)\.", text)
            said = m.group(1) if m else self.seen[it.id]
            out.append({"letter": "AB"[options(it, order).index(said)], "text": said, "prompt": text})
        return out


def test_single_modality_accuracy_is_one_for_a_model_that_reads_each_modality():
    # the text answer must reach base_text prompts and map back to "text" in both orders (a
    # swapped label mapping or a prompt without the context scores 0.5 or 0 here)
    from mc2_bench.protocol import single_modality_scores

    assert evaluate(Reader(ITEMS), ITEMS, "base_text")["text_ratio"] == 1.0
    assert evaluate(Reader(ITEMS), ITEMS, "base_image")["vision_ratio"] == 1.0
    assert single_modality_scores(Reader(ITEMS), ITEMS, "option-logprob").tolist() == [1.0] * len(ITEMS)


def test_flip_alpha_rule_takes_the_smallest_alpha_that_shifts_within_the_accuracy_cost():
    from mc2_bench.core import choose_flip_alpha

    rows = [dict(alpha=a, vision_ratio=v, single_accuracy=c) for a, v, c in
            [(0.0, 0.5, 0.99), (0.1, 0.6, 0.99), (0.2, 0.8, 0.95), (0.3, 0.9, 0.98), (0.4, 1.0, 0.90)]]
    f = choose_flip_alpha(rows)
    assert f["alpha"] == 0.3 and f["within_cost"] and f["shifted"]  # 0.2 shifts but costs 4 points
    rows[3]["single_accuracy"] = 0.9  # no alpha keeps the cost: the smallest that shifts
    f = choose_flip_alpha(rows)
    assert f["alpha"] == 0.2 and not f["within_cost"]
    f = choose_flip_alpha([dict(r, vision_ratio=0.5 + 0.01 * r["alpha"]) for r in rows])
    assert f["alpha"] == 0.4 and not f["shifted"]  # nothing shifts: the largest shift


def test_flip_alpha_rule_with_an_upper_bound_refuses_a_cost_small_by_chance():
    from mc2_bench.core import choose_flip_alpha, cost_upper_bound

    n = 100
    acc0 = np.ones(n)
    noisy = np.ones(n)
    noisy[0] = 0.0  # 1 point of cost from one item: its upper bound passes 2 points
    clean = np.ones(n)
    clean[:2] = 0.75  # 0.5 points
    assert cost_upper_bound(acc0, noisy) > 0.02 > cost_upper_bound(acc0, clean) > 0.005
    rows = [dict(alpha=a, vision_ratio=v, single_accuracy=float(s.mean()), accuracy_scores=s.tolist())
            for a, v, s in [(0.0, 0.5, acc0), (0.1, 0.8, noisy), (0.2, 0.9, clean)]]
    assert choose_flip_alpha(rows)["alpha"] == 0.1  # the point estimate passes (1 point)
    f = choose_flip_alpha(rows, confidence=0.95)
    assert f["alpha"] == 0.2 and f["within_cost"] and f["cost_bound"] > f["cost"]
