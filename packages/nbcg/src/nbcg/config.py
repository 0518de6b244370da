"""Hyperparameters as frozen dataclasses; each field cites the paper's abstract [P] or says [R].

Only the abstract of NBCG is public, so almost every number here is reconstructed [R].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DISAGREEMENTS = ("ema", "solo", "min")


@dataclass(frozen=True)
class SEMConfig:
    """The label-level neural SEM (abstract: "neural structural equation models") [P]; the
    logistic form, NOTEARS constraint and all values are [R]."""

    lambda_l1: float = 0.001
    """L1 penalty on the adjacency A, on the per-document mean loss [R]. 0.01 (0.2.0) shrank the
    rare labels' parent effects (a label on 2% of documents gains ~0.02 nats per document from its
    parent) below every threshold; the sparsity is left to the BIC-chosen threshold instead."""
    threshold: float = 0.3
    """|A_ij| above this is an edge of the output DAG when no threshold is chosen [R] (NOTEARS' 0.3)."""
    outer_iters: int = 4
    """augmented-Lagrangian rounds [R]."""
    inner_steps: int = 200
    """Adam steps per round [R]."""
    lr: float = 0.1
    """Adam learning rate of the SEM [R]."""
    rho_max: float = 1e4
    """cap on the penalty ρ of the augmented Lagrangian [R]."""

    def __post_init__(self) -> None:
        for name in ("lambda_l1", "threshold", "lr", "rho_max"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")


@dataclass(frozen=True)
class NBCGConfig:
    """The classifier and its Nash bargaining over coalitions."""

    max_coalition: int = 8
    """largest coalition (labels) [R]; the issue lets it be chosen on dev (we fix it)."""
    disagreement: str = "min"
    """adaptive disagreement point d_k [P: "adaptive disagreement point"]: ``min`` (running
    minimum of u_k), ``ema`` (EMA of u_k) or ``solo`` (0 = the coalition's own loss at warm-up,
    no cooperation) [R]."""
    ema: float = 0.9
    """decay of the ``ema`` disagreement point [R]."""
    eps: float = 1e-3
    """d_k is kept at least ε below u_k, so log(u_k − d_k) is defined [R]."""
    warmup_epochs: int = 1
    """epochs with uniform weights; the reference loss L_k⁰ for u_k = 1 − L_k/L_k⁰ is taken at
    the end of warm-up [R]."""
    hidden: int = 64
    """width of the shared MLP encoder [R]."""
    epochs: int = 8
    """training epochs [R]."""
    lr: float = 1e-2
    """Adam learning rate [R]."""
    batch_size: int = 64
    """mini-batch size [R]."""
    nash_mtl_every: int = 4
    """Nash-MTL re-solves α every this many steps (its code's update_weights_every) [C]."""

    def __post_init__(self) -> None:
        if self.disagreement not in DISAGREEMENTS:
            raise ValueError(f"disagreement must be one of {', '.join(DISAGREEMENTS)}, "
                             f"got {self.disagreement!r}")
        if not (isinstance(self.max_coalition, int) and self.max_coalition >= 1):
            raise ValueError(f"max_coalition must be an integer >= 1, got {self.max_coalition!r}")
        if not (0.0 <= self.ema < 1.0):
            raise ValueError(f"ema must be in [0, 1), got {self.ema!r}")
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise ValueError(f"eps must be > 0, got {self.eps!r}")
        for name in ("epochs", "batch_size", "hidden", "nash_mtl_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


@dataclass(frozen=True)
class SynthConfig:
    """The synthetic long-tailed multi-label text generator of the research notes §6.1 [R]."""

    n_labels: int = 24
    """labels, power-law frequencies [R]."""
    head_rate: float = 0.3
    """frequency of the most frequent root label [R]."""
    tail_rate: float = 0.02
    """frequency of the rarest root label [R]."""
    words_per_label: int = 4
    """indicative words per label [R]."""
    doc_len: int = 30
    """noise words per document [R]."""
    spurious: float = 0.9
    """P(head partner on | tail label on) in train/IID; flipped to 0 in the shift split [R]."""
