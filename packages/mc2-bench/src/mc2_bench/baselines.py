"""The comparisons the paper's method is measured against, as a small registry of steering
directions (a new variant is one decorated function) plus the instruction-prompting baseline.

- ``diffmean`` (the method [C]): centroid difference of follow-image vs follow-text states;
- ``pca`` / ``probe`` (other steering vectors [R]): top PC of paired differences, probe weights;
- ``random`` (the control [R]): a random unit direction, the same norm rule alpha * ||h||;
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


def direction(name: str, hv, ht, seed: int = 0) -> np.ndarray:
    if name not in DIRECTIONS:
        raise ValueError(f"unknown direction {name!r} (choose one of {', '.join(DIRECTIONS)})")
    return DIRECTIONS[name](hv, ht, seed)
