"""Configuration of a merge, as frozen dataclasses (the CLI's options map onto these fields).

Markings: [P] paper, [C] the authors' public code (Sphere-AI-Lab/OrthoMerge), [R] reconstructed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAGNITUDES = ("mean", "median", "max")
GRANULARITIES = ("module", "block")
DIRECTIONS = ("theta", "uniform")
# the core's merge rules (icml26_shared.merge.RULES; tested equal), named here without importing torch
RULES = ("ta", "ties", "magnitude_prune", "dare_linear", "dare_ties", "tsv", "iso")
OFT_METHODS = ("orthomerge", "avg", *RULES)
RESIDUAL_RULES = RULES
TRIM_SCOPES = ("model", "tensor")
#: the residual strength λ when none is given: the authors' TA coefficient 0.2 [C]; TIES' final
#: scale 1.0 [C] (merge/OrthoMerge_C_TIES.py); 1 for the other rules [R]
DEFAULT_RESIDUAL_SCALE = {"ta": 0.2}
#: TIES at its authors' settings, (λ, density): final scale 1.0 [C], RESET_THRESH 0.2 [C]
AUTHORS_TIES = (1.0, 0.2)
ORTHO_TARGETS = ("none", "general", "conflict")


def _finite(name: str, value: float, low: float | None = None, high: float | None = None) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value}")


@dataclass(frozen=True)
class OFTMergeConfig:
    """Merging OFT / BOFT adapters in the Lie algebra (Cayley chart)."""

    method: str = "orthomerge"
    """``orthomerge``: magnitude-corrected merge of the skew matrices Q_i [C]
    (merge/OrthoMerge_OFT_models.py); ``avg``: plain mean of Q_i, no correction [C] (the ablation);
    a rule of ``RULES``: Euclidean merge of the dense deltas W0·R_iᵀ − W0 [P] (Table 1)."""
    magnitude: str = "mean"
    """θ* = mean ‖Q_i‖_F [C]; ``median`` / ``max`` are options [C]."""
    granularity: str = "module"
    """Norms over all blocks of a module [C] (the code flattens a module's parameters);
    ``block``: one θ per block [R]."""
    direction: str = "theta"
    """Direction Σ w_i Q_i (θ-weighted unit directions) [C]; ``uniform``: Σ u_i [C]."""
    weights: tuple[float, ...] | None = None
    """Per-adapter weights (default 1 each) [R]."""
    scale: float = 1.0
    """Strength λ: Q* ← λ·Q* (orthomerge/avg) or λ·merged delta (Euclidean) [R]; 1 is the paper's."""
    density: float | None = None
    """TIES kept fraction / DARE keep probability; None: the rule's default (TIES and
    magnitude-prune 0.2 [P], DARE 0.5 [P])."""
    trim_scope: str = "model"
    """TIES / magnitude-prune trim: ``model`` keeps each expert's top ``density`` over all the
    tensors the rule sees, as the authors do [C]; ``tensor`` per tensor (peft / mergekit) [R]."""
    exact_cayley: bool = False
    """Write the merged adapter on peft's exact Cayley path (``use_cayley_neumann=False``) when
    the inputs use the Neumann series: R* exactly orthogonal, a small function change [R]."""
    seed: int = 0
    """Seeds DARE's masks [R]."""

    def __post_init__(self) -> None:
        _check_choice("method", self.method, OFT_METHODS)
        _check_choice("trim scope", self.trim_scope, TRIM_SCOPES)
        _check_choice("magnitude", self.magnitude, MAGNITUDES)
        _check_choice("granularity", self.granularity, GRANULARITIES)
        _check_choice("direction", self.direction, DIRECTIONS)
        _finite("scale", self.scale, 0.0)
        if self.density is not None:
            _finite("density", self.density, 1e-6, 1.0)
        if self.weights is not None:
            for w in self.weights:
                _finite("weight", w, 0.0)
            if sum(self.weights) <= 0:
                raise ValueError("weights must not all be zero")


@dataclass(frozen=True)
class DecoupleConfig:
    """Orthogonal-Residual Decoupling of non-OFT experts (full fine-tunes, LoRA)."""

    ortho: str = "general"
    """Procrustes target: ``general`` T_i = W_i (OrthoMerge-G) [C]; ``conflict`` T_i = W0 + Δ_i ⊙ mask_i,
    rows whose delta has negative cosine with the mean delta (OrthoMerge-C) [C]; ``none``: no
    rotation, the residual rule alone (= the Euclidean baseline) [R]."""
    residual: str = "ta"
    """Merge of the residuals E_i = W_i − W0·R_i: ta [C], ties [C], tsv [C], the others [R]."""
    residual_scale: float | None = None
    """λ on the merged residual; None: ``DEFAULT_RESIDUAL_SCALE`` (TA 0.2 [C], TIES 1.0 [C])."""
    density: float | None = None
    """TIES kept fraction (0.2, the authors' RESET_THRESH [C]) / DARE keep probability (0.5 [P])."""
    trim_scope: str = "model"
    """TIES trim over each expert's whole residual (``kthvalue`` of the flattened model) [C];
    ``tensor``: per tensor, peft's / mergekit's convention [R]."""
    magnitude: str = "mean"
    """Magnitude of the merged rotation generator, as for OFT [C]."""
    rotation_scale: float = 1.0
    """λ on the merged generator A* [R] (1 in the paper)."""
    seed: int = 0
    """Seeds DARE's masks [R]."""

    def __post_init__(self) -> None:
        _check_choice("ortho", self.ortho, ORTHO_TARGETS)
        _check_choice("residual", self.residual, RESIDUAL_RULES)
        _check_choice("trim scope", self.trim_scope, TRIM_SCOPES)
        _check_choice("magnitude", self.magnitude, MAGNITUDES)
        if self.residual_scale is None:
            object.__setattr__(self, "residual_scale", DEFAULT_RESIDUAL_SCALE.get(self.residual, 1.0))
        _finite("residual scale", self.residual_scale, 0.0)
        _finite("rotation scale", self.rotation_scale, 0.0)
        if self.density is not None:
            _finite("density", self.density, 1e-6, 1.0)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value == "dare" and "dare_ties" in choices:  # the core's one-line refusal naming both
        from .baselines import check_rule

        check_rule(value)
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r} (choose one of {', '.join(choices)})")
