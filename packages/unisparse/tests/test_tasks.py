"""The passkey documents of the needle claim: deterministic per seed, the key at the requested
depth, the requested length, a scorer that rejects a wrong key. A word-level stand-in tokenizer
(no model files)."""

from __future__ import annotations

import re

import pytest
from unisparse.tasks import FILLER, HAYSTACKS, is_correct, needle_prompt


class WordTokenizer:
    """Each whitespace-led word is one token; decode is the exact inverse."""

    bos_token_id = 0

    def __init__(self):
        self.vocab: dict[str, int] = {"<s>": 0}
        self.words = ["<s>"]

    def __call__(self, text, add_special_tokens=False):
        ids = []
        for w in re.findall(r"\s*\S+\s*?(?=\s|$)|\s+$", text):
            if w not in self.vocab:
                self.vocab[w] = len(self.words)
                self.words.append(w)
            ids.append(self.vocab[w])
        return {"input_ids": ids}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.words[i] for i in ids if not (skip_special_tokens and i == 0))


@pytest.fixture(scope="module")
def tok():
    return WordTokenizer()


@pytest.mark.parametrize("haystack", HAYSTACKS)
@pytest.mark.parametrize("n_tokens,depth", [(600, 0.1), (1000, 0.5), (2048, 0.9)])
def test_document_length_depth_and_key(tok, haystack, n_tokens, depth):
    ids, key, (start, end) = needle_prompt(tok, n_tokens, seed=7, depth=depth, haystack=haystack,
                                           return_span=True)
    assert abs(len(ids) - (n_tokens + 1)) <= 3  # + BOS
    needle = tok.decode(ids[start:end])
    assert f"pass key is {key}." in needle and f"{key} is the pass key" in needle
    assert re.fullmatch(r"\d{5}", key)
    text = tok.decode(ids)
    assert re.findall(r"\d+", text) == [key, key], "the key is the only number in the document"
    sentence = len(tok(FILLER)["input_ids"]) if haystack == "repeat" else 60
    assert depth * n_tokens - sentence - 30 <= start <= depth * n_tokens + 30, (start, depth)
    assert text.endswith("What is the pass key? The pass key is")


@pytest.mark.parametrize("haystack", HAYSTACKS)
def test_document_is_deterministic_per_seed(tok, haystack):
    a = needle_prompt(tok, 800, seed=3, depth=0.4, haystack=haystack)
    assert needle_prompt(tok, 800, seed=3, depth=0.4, haystack=haystack) == a
    b = needle_prompt(tok, 800, seed=4, depth=0.4, haystack=haystack)
    assert b[1] != a[1] and b[0] != a[0]


def test_depths_move_the_needle(tok):
    starts = [needle_prompt(tok, 1500, 5, depth=d, haystack="repeat", return_span=True)[2][0]
              for d in (0.1, 0.3, 0.5, 0.7, 0.9)]
    assert starts == sorted(starts) and starts[-1] - starts[0] > 0.7 * 1500


def test_scorer_rejects_a_wrong_key(tok):
    ok = tok(" 71432. Remember")["input_ids"]
    assert is_correct(tok, ok, "71432")
    for wrong in (" 71433.", " 17432.", " 7143", " the key", " 1 71432"):
        assert not is_correct(tok, tok(wrong)["input_ids"], "71432"), wrong


def test_unknown_haystack_is_refused(tok):
    with pytest.raises(ValueError, match="unknown haystack"):
        needle_prompt(tok, 500, 1, haystack="lorem")


def test_zen_haystack_is_the_zen_reshuffled_and_silent(capsys):
    """``zen``: the 19 aphorisms of the ``this`` module, a fresh order on every pass (not a
    periodic filler), and importing ``this`` prints nothing."""
    import random

    from unisparse.tasks import _zen_lines, zen_filler

    _zen_lines.cache_clear()
    lines = _zen_lines()
    assert capsys.readouterr().out == ""
    assert len(lines) == 19 and lines[0] == "Beautiful is better than ugly."
    text = zen_filler(random.Random(0), 400)
    assert len(text.split()) >= 400
    n = len(" ".join(lines))
    first, second = text[:n], text[n + 1:2 * n + 1]
    assert sorted(first.split()) == sorted(" ".join(lines).split()) and first != second


def test_prefill_break_even_interpolates_the_crossing():
    from unisparse.prefill_bench import break_even

    rows = [{"n": 2048, "ratio": 1.5}, {"n": 8192, "ratio": 0.5}]
    assert break_even(rows) == pytest.approx(4096)
    assert break_even([{"n": 2048, "ratio": 1.2}, {"n": 4096, "ratio": 1.1}]) is None
    assert break_even([{"n": 2048, "ratio": 0.9}]) == 2048
