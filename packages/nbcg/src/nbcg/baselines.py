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


@register_loss("db")
def distribution_balanced(logits: torch.Tensor, y: torch.Tensor, counts: torch.Tensor,
                          alpha: float = 0.1, beta: float = 10.0, mu: float = 0.3,
                          kappa: float = 0.05, lam: float = 5.0) -> torch.Tensor:
    """Distribution-balanced loss (Wu et al. 2020) at its defaults [C]: re-balancing weight
    r̂ = α + σ(β(r − μ)) with r = (1/n_j) / Σ_{i∈y}(1/n_i) per instance, and negative-tolerant
    regularisation with class bias ν_j = −κ log(1/p_j − 1) and negative scale λ."""
    n = counts.clamp(min=1)
    inv = 1.0 / n
    rep = (y * inv).sum(1, keepdim=True).clamp(min=1e-12)      # instance's repeat rate
    r = inv / rep
    w = alpha + torch.sigmoid(beta * (r - mu))
    p = (n / max(float(y.shape[0]), float(n.max()) + 1.0)).clamp(1e-6, 1 - 1e-6)
    nu = kappa * torch.log(p / (1 - p))                           # = −κ log(1/p − 1)
    z = logits + nu                                              # rare labels start lower
    pos = y * F.softplus(-z)
    neg = (1 - y) * F.softplus(lam * z) / lam
    return w * (pos + neg)


@dataclass(frozen=True)
class Arm:
    """A training arm: its loss, how labels are partitioned, how coalitions are weighted."""

    loss: str
    partition: str   # "one" (all labels in one coalition), "causal", "random"
    weighting: str   # "uniform", "nash", "nash-mtl"
    doc: str
    sampling: str = "uniform"   # "uniform" (a permutation per epoch) or "label-aware"
    masks: bool = True          # coalitions read only their own hidden units (CoalitionMLP)


ARMS: dict[str, Arm] = {
    "nbcg": Arm("auto", "causal", "nash", "NBCG: causal coalitions + Nash bargaining over the loss L* "
                "chosen on dev among bce, asl, db [R]"),
    "nbcg-bce": Arm("bce", "causal", "nash", "Nash bargaining over BCE coalition losses [R]"),
    "nbcg-asl": Arm("asl", "causal", "nash", "Nash bargaining over ASL coalition losses [R]"),
    "nbcg-db": Arm("db", "causal", "nash", "Nash bargaining over distribution-balanced coalition losses [R]"),
    "nbcg-nomask": Arm("auto", "causal", "nash", "NBCG without the communication masks (ablates masks)",
                       masks=False),
    "bce": Arm("bce", "one", "uniform", "plain BCE = all labels in one coalition (mechanism off)"),
    "focal": Arm("focal", "one", "uniform", "focal loss, γ=2 [C]"),
    "cb": Arm("cb", "one", "uniform", "class-balanced BCE, β=0.999 [C]"),
    "asl": Arm("asl", "one", "uniform", "asymmetric loss, γ−=4, m=0.05 [C]"),
    "resample": Arm("bce", "one", "uniform", "BCE with label-aware re-sampling [C]", "label-aware"),
    "db": Arm("db", "one", "uniform", "distribution-balanced loss, its defaults [C]"),
    "random-nash": Arm("auto", "random", "nash", "random coalitions (same sizes) + Nash (ablates causality)"),
    "causal-uniform": Arm("auto", "causal", "uniform", "causal coalitions + masks + uniform weights "
                          "(ablates bargaining)"),
    "nash-mtl": Arm("bce", "causal", "nash-mtl", "Nash-MTL over causal-coalition gradients, no cvxpy [C]"),
}
BASELINES = ("bce", "resample", "focal", "cb", "asl", "db", "nash-mtl")
ABLATIONS = ("random-nash", "causal-uniform", "nbcg-nomask")
NBCG_LOSSES = ("bce", "asl", "db")   # the coalition losses NBCG bargains over; L* is chosen on dev [R]


def get_arm(name: str, loss: str | None = None) -> Arm:
    """The arm ``name``; an ``"auto"`` loss (NBCG and its ablations) becomes ``loss`` when given."""
    from dataclasses import replace

    if name not in ARMS:
        raise KeyError(f"unknown method {name!r} (known: {', '.join(ARMS)})")
    arm = ARMS[name]
    if loss is not None and arm.loss == "auto":
        if loss not in NBCG_LOSSES:
            raise KeyError(f"unknown coalition loss {loss!r} (known: {', '.join(NBCG_LOSSES)})")
        arm = replace(arm, loss=loss)
    return arm


def label_aware_weights(Y: np.ndarray) -> np.ndarray:
    """Label-aware (class-aware) re-sampling probabilities (Shen et al. 2016, as the RS baseline of
    Wu et al. 2020) [C]: pick a label uniformly, then one of its documents uniformly, so document i
    is drawn with probability ∝ Σ_{j∈y_i} 1/n_j. Documents without labels keep the smallest
    positive weight (so negatives are still seen) [R]."""
    Y = np.asarray(Y, dtype=np.float64)
    n = np.maximum(Y.sum(0), 1.0)
    w = (Y / n).sum(1)
    pos = w[w > 0]
    w[w == 0] = pos.min() if len(pos) else 1.0
    return w / w.sum()


def label_counts(Y: np.ndarray) -> np.ndarray:
    return np.asarray(Y).sum(0).astype(np.float64)
