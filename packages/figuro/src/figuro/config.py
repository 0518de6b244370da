"""Hyperparameters as frozen dataclasses; each field cites the source or says [R] (reconstructed).

Markings: [P] the paper's abstract, [S] public reviews of an earlier version (see the design
note), [R] ours. No FiGuRO code is public, so every number here is [R] unless marked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class FiGuROConfig:
    latent_dim: int = 32
    """L, the over-complete latent width of every encoder and projection [R] (notes: 32-64)."""
    distortion_threshold: float = 0.05
    """λ: fidelity holds while D_m <= (1 + λ)·D*_m for every modality [S] (threshold named in the
    reviews; the value 0.05 is [R])."""
    update_every: int = 10
    """T: epochs of training between two rank decisions [S] ("every few epochs"; 10 is [R])."""
    max_rounds: int = 200
    """Most rank decisions before the search stops (a fit stopped here is flagged) [R]."""
    patience: int = 5
    """R: stop after this many rounds with the ranks unchanged [R]."""
    k_min: int = 0
    """Lowest rank of any space [S] (rank bounds k_min/k_max in the reviews; 0 is [R])."""
    pretrain_epochs: int = 40
    """Full-rank pre-training before the reference distortion D*_m is recorded [S] (the length is
    [R], chosen on dev simulations)."""
    hidden: int = 64
    """Width of the one hidden layer of every encoder and decoder MLP [R]."""
    lr: float = 5e-3
    """Adam learning rate [R] (set for speed with batch 1024, untuned)."""
    batch_size: int = 1024
    """Mini-batch size [R] (large for speed on 2 shared cores)."""
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
        if self.update_every < 1 or self.max_rounds < 1 or self.pretrain_epochs < 1:
            raise ValueError("update_every, max_rounds and pretrain_epochs must be >= 1")
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
