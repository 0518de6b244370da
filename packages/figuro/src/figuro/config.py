"""Hyperparameters as frozen dataclasses; each field cites the source or says [R] (reconstructed).

Markings: [P] the paper's abstract, [S] public reviews of an earlier version (see the design
note), [R] ours. No FiGuRO code is public, so every number here is [R] unless marked.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class FiGuROConfig:
    latent_dim: int = 32
    """L, the over-complete latent width of every encoder and projection [R] (notes: 32-64)."""
    distortion_threshold: float = 0.05
    """λ: fidelity holds while D_m <= D*_m + λ·V_m for every modality, D*_m the held-out
    distortion at the pre-training plateau and V_m that of the zero code (the variance of the
    standardised view, ×2 with cross-reconstruction): a reduction may lose at most a fraction λ
    of the variance [S] (a threshold is named in the reviews; its absolute form and 0.05 are
    [R])."""
    update_every: int = 50
    """T: optimiser steps of re-training between two rank checks [S] ("every few epochs"; counted
    in steps so that small and large data sets get the same re-training; 50 is [R])."""
    max_rounds: int = 200
    """Most rank decisions before the search stops (a fit stopped here is flagged) [R]."""
    patience: int = 5
    """R: stop after this many rounds with the ranks unchanged [R]."""
    k_min: int = 0
    """Lowest rank of any space [S] (rank bounds k_min/k_max in the reviews; 0 is [R])."""
    confirm: int = 2
    """A state is accepted (may be reduced further, may be the answer) only once fidelity held at
    this many consecutive checks, each after ``update_every`` steps of re-training [R]."""
    pretrain_max_steps: int = 3000
    """Most full-rank pre-training steps; pre-training stops earlier at a validation plateau [R]."""
    eval_every: int = 25
    """Pre-training steps between two held-out evaluations of the plateau rule [R]."""
    plateau_patience: int = 3
    """Plateau rule: stop pre-training after this many evaluations without a relative improvement
    of more than ``plateau_tol`` in the summed held-out distortion [R]. The reference D*_m is
    then measured once: an absolute held-out distortion that later training cannot loosen."""
    plateau_tol: float = 0.002
    """Relative improvement below which pre-training counts as on its plateau [R]."""
    hidden: int = 64
    """Width of the hidden layers of every encoder and decoder MLP [R]."""
    depth: int = 1
    """Hidden layers per encoder and decoder MLP [R] (the capacity ablation uses 2)."""
    lr: float = 5e-3
    """Adam learning rate [R] (set for speed with batch 1024, untuned)."""
    batch_size: int = 256
    """Mini-batch size [R]."""
    val_fraction: float = 0.2
    """Held-out rows on which D_m is measured [R]."""
    tie_tol: float = 0.01
    """Relative distortion difference under which two candidate reductions tie; ties reduce a
    private space before the shared one (parsimony, private before shared) [R] (notes §3)."""
    cross_weight: float = 1.0
    """Weight of cross-reconstruction (x_m decoded from the other modality's shared code) [R]."""
    schedule: str = "fidelity"
    """"fidelity" (FiGuRO's rule) or "spectral" (ablation: a fixed truncation schedule that drops
    the smallest singular direction while it is below ``spectral_tau`` of the largest, no
    fidelity test) [R]."""
    spectral_tau: float = 0.1
    """Ablation only: relative singular-value cut of the fixed truncation schedule [R] (untuned)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"{f.name} must be finite, got {v}")
        if self.latent_dim < 1:
            raise ValueError(f"latent_dim must be >= 1, got {self.latent_dim}")
        if not 0 < self.distortion_threshold <= 10:
            raise ValueError(f"distortion_threshold must be in (0, 10], got {self.distortion_threshold}")
        for name in ("update_every", "max_rounds", "pretrain_max_steps", "eval_every",
                     "plateau_patience", "confirm", "patience", "hidden", "depth", "batch_size"):
            v = getattr(self, name)
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if not isinstance(self.latent_dim, numbers.Integral) or isinstance(self.latent_dim, bool):
            raise ValueError(f"latent_dim must be an integer, got {self.latent_dim!r}")
        if not 0 <= self.plateau_tol < 1:
            raise ValueError(f"plateau_tol must be in [0, 1), got {self.plateau_tol}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not 0 <= self.k_min <= self.latent_dim:
            raise ValueError(f"k_min must be in [0, latent_dim], got {self.k_min}")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")
        if self.schedule not in ("fidelity", "spectral"):
            raise ValueError(f"schedule must be fidelity or spectral, got {self.schedule!r}")


@dataclass(frozen=True)
class SimConfig:
    """The known-truth simulator (notes §6.1) [R]: z_s, z_1, z_2 ~ N(0, I); x_m = f_m([z_s, z_m])
    + ε with a random 2-layer MLP f_m (or a linear map) into R^D."""

    ks: int = 2
    k1: int = 2
    k2: int = 2
    n: int = 2000
    dim: int = 50
    noise: float = 0.01
    nonlinearity: str = "tanh"  # tanh (reported grid) | sin (dev only) | linear (tests)
    hidden: int = 32
