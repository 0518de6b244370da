"""Every method is one registered recipe over the same trainer, so comparisons are fair: a task
weighting rule (uniform / IWU / strict minimax / SEC bandit), a batch builder (plain, DAPO dynamic
sampling with backfill, or the ratio-preserving sampler) and the clip range.

A new variant is one decorated function returning a ``MethodSpec``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class MethodSpec:
    weighting: str  # uniform | iwu | minimax | regularized | sec
    sampling: str  # plain | dynamic | rps
    clip_higher: bool
    description: str = ""


METHODS: dict[str, Callable[[], MethodSpec]] = {}


def register(name: str):
    def deco(fn: Callable[[], MethodSpec]):
        METHODS[name] = fn
        return fn
    return deco


@register("grpo")
def grpo() -> MethodSpec:
    return MethodSpec("uniform", "plain", False, "GRPO, uniform task sampling [P baseline]")


@register("dapo")
def dapo() -> MethodSpec:
    return MethodSpec("uniform", "dynamic", True,
                      "DAPO: uniform tasks + dynamic sampling (oversample, filter, backfill) + clip-higher [P]")


@register("sec")
def sec() -> MethodSpec:
    return MethodSpec("sec", "plain", False, "SEC-GRPO: bandit curriculum over tasks [P baseline]")


@register("sec_dapo")
def sec_dapo() -> MethodSpec:
    return MethodSpec("sec", "dynamic", True, "SEC-DAPO [P baseline]")


@register("mtgrpo")
def mtgrpo() -> MethodSpec:
    return MethodSpec("iwu", "rps", True, "MT-GRPO: IWU task weights + ratio-preserving sampler [P]")


@register("iwu_only")
def iwu_only() -> MethodSpec:
    return MethodSpec("iwu", "dynamic", True,
                      "ablation: IWU weights set the mixture before filtering (no RPS) [P]")


@register("rps_only")
def rps_only() -> MethodSpec:
    return MethodSpec("uniform", "rps", True, "ablation: RPS with uniform z (no IWU) [P]")


@register("minimax")
def minimax() -> MethodSpec:
    return MethodSpec("minimax", "rps", True, "ablation: strict minimax weights (ε = 0) + RPS [P]")


@register("regularized")
def regularized() -> MethodSpec:
    return MethodSpec("regularized", "rps", True,
                      "ablation: rewards-only update with logit shrinkage (App. Subroutine 2) + RPS [P]")


@dataclass
class SecBandit:
    """Self-Evolving Curriculum (Chen et al. 2025): Q_k ← α r_k + (1 − α) Q_k with r_k the mean
    absolute advantage of task k's groups in the batch; tasks drawn by softmax(Q / τ) [P §5 baseline]."""

    num_tasks: int
    alpha: float = 0.5
    tau: float = 0.2
    Q: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.Q = np.zeros(self.num_tasks) if self.Q is None else np.asarray(self.Q, np.float64)

    @property
    def z(self) -> np.ndarray:
        q = self.Q / self.tau
        e = np.exp(q - q.max())
        return e / e.sum()

    def update(self, mean_abs_adv: np.ndarray) -> np.ndarray:
        r = np.asarray(mean_abs_adv, np.float64)
        self.Q = np.where(np.isnan(r), self.Q, self.alpha * np.nan_to_num(r) + (1 - self.alpha) * self.Q)
        return self.z

    def state_dict(self) -> dict[str, Any]:
        return {"Q": self.Q.tolist()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.Q = np.asarray(sd["Q"], np.float64)
