"""The comparisons the paper's method is measured against, as a small registry of steering
directions (a new variant is one decorated function) plus the instruction-prompting baseline.

- ``diffmean`` (the method [C]): centroid difference of follow-image vs follow-text states;
- ``pca`` / ``probe`` (other steering vectors [R]): top PC of paired differences, probe weights;
- ``random`` (the control [R]): a random unit direction, the same norm rule alpha * ||h||;
- ``permuted`` (the label null [R]): diffmean of the same states with the group labels permuted;
- ``TrivialAnswerer`` (anchors [R]): a random letter, or always "A";
- ``instruction`` (prompting baseline [C]): the icc mode itself, no steering.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .core import preference_direction, random_direction

DIRECTIONS: dict[str, Callable[..., np.ndarray]] = {}


def register(name: str):
    def deco(fn):
        DIRECTIONS[name] = fn
        return fn
    return deco


@register("diffmean")
def _diffmean(hv, ht, seed=0):
    return preference_direction(hv, ht, "diffmean", seed)


@register("pca")
def _pca(hv, ht, seed=0):
    return preference_direction(hv, ht, "pca", seed)


@register("probe")
def _probe(hv, ht, seed=0):
    return preference_direction(hv, ht, "probe", seed)


@register("random")
def _random(hv, ht, seed=0):
    return random_direction(np.asarray(hv).shape[1], seed + 104729)


@register("permuted")
def _permuted(hv, ht, seed=0):
    """The label null [R]: diff-of-means of the same states with the follow-image / follow-text
    labels permuted (group sizes kept), unit norm like every direction (the same step rule)."""
    x = np.concatenate([np.asarray(hv, float), np.asarray(ht, float)])
    perm = np.random.default_rng(seed + 7919).permutation(len(x))
    return preference_direction(x[perm[:len(hv)]], x[perm[len(hv):]], "diffmean", seed)


class TrivialAnswerer:
    """An anchor row [R]: answers every prompt with a random letter (``"random"``, seeded) or
    always "A" (``"always_a"``: order consistency 0, vision ratio 0.5). Reads no input."""

    kind = "trivial"

    def __init__(self, rule: str, seed: int = 0):
        if rule not in ("random", "always_a"):
            raise ValueError(f"unknown trivial answerer {rule!r}")
        self.rule, self.rng = rule, np.random.default_rng(seed)

    def answer(self, items, mode, order, answer_mode="letter", follow=None):
        from .core import prompt_text

        out = []
        for it in items:
            letter = "A" if self.rule == "always_a" else "AB"[int(self.rng.integers(2))]
            out.append({"letter": letter, "text": letter, "prompt": prompt_text(it, mode, order, follow)})
        return out


def direction(name: str, hv, ht, seed: int = 0) -> np.ndarray:
    if name not in DIRECTIONS:
        raise ValueError(f"unknown direction {name!r} (choose one of {', '.join(DIRECTIONS)})")
    return DIRECTIONS[name](hv, ht, seed)
