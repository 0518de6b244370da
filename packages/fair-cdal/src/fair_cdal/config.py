"""Hyperparameters: frozen dataclasses, each field citing the paper / the notes or marked [R].

[P] paper abstract, [S] the authors' demo / grid scripts and a modified copy of ``CDAL.m`` in a
third-party reproduction (notes §2), [R] reconstructed here.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the authors' grid (notes §2, [S]): α, β, γ ∈ GRID, m ∈ {k, 2k, 3k, 4k, 5k}
GRID = (1e-5, 1e-3, 1e-1, 10.0, 1000.0)
ANCHOR_MULTIPLES = (1, 2, 3, 4, 5)
ZU_SOLVERS = ("linearized_qp", "pgd")


@dataclass(frozen=True)
class SolverConfig:
    alpha: float = 1.0  # RAW weight of the linearised-HSIC term α‖Z_u Ĝᵀ‖² [S] (the estimator
    #                     passes its scale-free knob times ``weight_scales`` here)
    beta: float = 1.0  # raw weight of the anchor orthogonality Σ_v‖A^uᵀA^s‖² [S]
    gamma: float = 1.0  # raw weight of the group-explanation term ‖G − WᵀZ_s‖² [S]
    max_iter: int = 50  # outer iterations [S: 50]
    tol: float = 1e-3  # stop at relative objective change < tol [S: 1e-3]
    zu_solver: str = "linearized_qp"  # "pgd" = the modified copy's 5 steps at 1/L [S]; the
    #                                   linearised HSIC + proximal (MM) QP is our reading [R]
    pgd_steps: int = 5  # projected-gradient steps per Z_u update in "pgd" [S: 5]
    qp_max_iter: int = 300  # cap on FISTA iterations per simplex QP, warm-started; rows that hit
    #                         it are counted (replaces quadprog, which solves to optimality) [R]
    qp_tol: float = 1e-3  # every QP row stops at relative Frank–Wolfe gap <= qp_tol [R]
    hsic_gradient: bool = True  # False = the ``prox_only`` ablation: the proximal weight αλ is
    #                             kept, the linearised HSIC gradient dropped [R]
    ridge: float = 1e-10  # relative ridge on ZᵀZ in the Sylvester blocks (solvability) [R]
    init_sample: int = 20000  # k-means anchor init on at most this many rows (O(n) init) [R]
    kmeans_n_init: int = 3  # restarts of the anchor-init k-means [R]
    label_n_init: int = 10  # restarts of the final k-means on the embedding [R; authors: 20×20]

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v == v and 0 <= v < float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.zu_solver not in ZU_SOLVERS:
            raise ValueError(f"zu_solver must be one of {ZU_SOLVERS}, got {self.zu_solver!r}")
        if not (isinstance(self.max_iter, int) and self.max_iter >= 1):
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")
        for name in ("qp_max_iter",):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not (self.qp_tol == self.qp_tol and self.qp_tol > 0):
            raise ValueError(f"qp_tol must be > 0, got {self.qp_tol!r}")
        if not (self.tol == self.tol and self.tol >= 0):
            raise ValueError(f"tol must be >= 0, got {self.tol!r}")


@dataclass(frozen=True)
class SyntheticConfig:
    """The notes' synthetic fair multi-view data (§6.1, [R]): x_v = P_v μ_y + Q_v ν_g + ε."""

    n: int = 5000  # samples (issue: n = 5,000 in quick)
    k: int = 5  # clusters [R]
    c: int = 2  # sensitive groups [R: notes say c = 2]
    dims: tuple[int, ...] = (20, 30, 15)  # view dimensions, 3 views [R: notes say 2-3 views]
    latent: int = 8  # dimension of μ_y and ν_g [R]
    skew: float = 0.8  # p(g | y): 0.8 / 0.2, alternating over clusters [R: notes' example]
    cluster_sep: float = 1.5  # scale of the cluster means μ_y [R]
    group_shift: float = 2.5  # scale of the group shift ν_g: strong enough that naive anchor
    #                           clustering follows the group [R]
    noise: float = 1.0  # std of ε [R]


@dataclass(frozen=True)
class QuickConfig:
    """Budgets of the laptop reproduction [R]."""

    seeds: int = 3  # issue: 3 seeds in quick
    front_settings: int = 5  # issue: 5 settings per fairness knob
    timing_n: tuple[int, ...] = (10_000, 30_000, 100_000, 300_000)  # issue
    fair_spectral_cap: int = 3000  # dense FairSpectral up to this n (memory cap, n×n float64)
