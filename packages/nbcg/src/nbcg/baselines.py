"""The long-tail losses and the training arms, behind one interface (a small registry).

A loss maps (logits n×L, targets n×L, per-label training counts) to a per-element loss n×L. An arm
is (loss, partition, weighting); a new arm is one ``ARMS`` entry, a new loss one decorated function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
LOSSES: dict[str, LossFn] = {}


def register_loss(name: str) -> Callable[[LossFn], LossFn]:
    def deco(fn: LossFn) -> LossFn:
        LOSSES[name] = fn
        return fn
    return deco


@register_loss("bce")
def bce(logits: torch.Tensor, y: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits, y, reduction="none")


@register_loss("focal")
def focal(logits: torch.Tensor, y: torch.Tensor, counts: torch.Tensor, gamma: float = 2.0) -> torch.Tensor:
    """Focal loss (Lin et al. 2017), γ = 2 as in its paper [C]."""
    p = torch.sigmoid(logits)
    pt = torch.where(y > 0, p, 1 - p)
    return (1 - pt).pow(gamma) * F.binary_cross_entropy_with_logits(logits, y, reduction="none")


@register_loss("cb")
def class_balanced(logits: torch.Tensor, y: torch.Tensor, counts: torch.Tensor,
                   beta: float = 0.999) -> torch.Tensor:
    """Class-balanced BCE (Cui et al. 2019): label weight (1−β)/(1−β^n_j), mean 1 [C]."""
    w = (1 - beta) / (1 - beta ** counts.clamp(min=1))
    w = w * len(w) / w.sum()
    return w * F.binary_cross_entropy_with_logits(logits, y, reduction="none")


@register_loss("asl")
def asl(logits: torch.Tensor, y: torch.Tensor, counts: torch.Tensor, gamma_neg: float = 4.0,
        gamma_pos: float = 0.0, clip: float = 0.05) -> torch.Tensor:
    """Asymmetric loss (Ridnik et al. 2021) with its defaults γ−=4, γ+=0, m=0.05 [C]."""
    p = torch.sigmoid(logits)
    p_neg = (p - clip).clamp(min=0)
    pos = y * (1 - p).pow(gamma_pos) * torch.log(p.clamp(min=1e-8))
    neg = (1 - y) * p_neg.pow(gamma_neg) * torch.log((1 - p_neg).clamp(min=1e-8))
    return -(pos + neg)


@dataclass(frozen=True)
class Arm:
    """A training arm: its loss, how labels are partitioned, how coalitions are weighted."""

    loss: str
    partition: str   # "one" (all labels in one coalition), "causal", "random"
    weighting: str   # "uniform", "nash", "nash-mtl"
    doc: str


ARMS: dict[str, Arm] = {
    "nbcg": Arm("bce", "causal", "nash", "NBCG: causal coalitions + Nash bargaining [R]"),
    "nbcg-asl": Arm("asl", "causal", "nash", "NBCG with ASL as the coalition loss (a variant, not the claim) [R]"),
    "bce": Arm("bce", "one", "uniform", "plain BCE = all labels in one coalition (mechanism off)"),
    "focal": Arm("focal", "one", "uniform", "focal loss, γ=2 [C]"),
    "cb": Arm("cb", "one", "uniform", "class-balanced BCE, β=0.999 [C]"),
    "asl": Arm("asl", "one", "uniform", "asymmetric loss, γ−=4, m=0.05 [C]"),
    "random-nash": Arm("bce", "random", "nash", "random coalitions (same sizes) + Nash (ablates causality)"),
    "causal-uniform": Arm("bce", "causal", "uniform", "causal coalitions + uniform weights (ablates bargaining)"),
    "nash-mtl": Arm("bce", "causal", "nash-mtl", "Nash-MTL over causal-coalition gradients, no cvxpy [C]"),
}
BASELINES = ("bce", "focal", "cb", "asl", "nash-mtl")
ABLATIONS = ("random-nash", "causal-uniform")


def get_arm(name: str) -> Arm:
    if name not in ARMS:
        raise KeyError(f"unknown method {name!r} (known: {', '.join(ARMS)})")
    return ARMS[name]


def label_counts(Y: np.ndarray) -> np.ndarray:
    return np.asarray(Y).sum(0).astype(np.float64)
