"""Hyperparameters: frozen dataclasses, each field citing the paper or marked [R].

Only the title, abstract and introduction of the paper were available, so nearly every number
below is reconstructed [R]; [P] marks what the abstract states.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

LINKS = ("he2", "he2+cross")
DISTILLERS = ("gm", "pm")  # the built-in distillers (``distill.register_distiller`` adds more)


@dataclass(frozen=True)
class TeacherConfig:
    d: int  # [P] input dimension
    r: int  # [P] intrinsic dimension: y depends on x only through Uᵀx, U ∈ R^{d×r}
    link: str = "he2"  # [R] g(z) = Σ_k He2(z_k)/√r ("he2+cross" adds Σ_{k<l} z_k z_l /√r)
    noise: float = 0.1  # [R] label noise std
    seed: int = 0  # [R] seed of U (and nothing else)

    def __post_init__(self) -> None:
        if self.d < 1 or self.r < 1:
            raise ValueError(f"d and r must be >= 1, got d={self.d}, r={self.r}")
        if self.r > self.d:
            raise ValueError(f"r={self.r} must be <= d={self.d}")
        if self.link not in LINKS:
            raise ValueError(f"unknown link {self.link!r} (choose one of {', '.join(LINKS)})")
        if not (math.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"noise must be finite and >= 0, got {self.noise}")


@dataclass(frozen=True)
class LearnerConfig:
    L: int  # [P] width of the two-layer network f(x) = Σ_j a_j σ(w_jᵀx + b_j)
    eta1: float  # [R] the one large first-layer step (Damian et al. 2022; Ba et al. 2022)
    ridge: float = 1e-2  # [R] ridge λ of stage 2 (per sample: (ΦᵀΦ/n + λI) a = Φᵀy/n)
    activation: str = "relu"  # [P] two-layer network [R: ReLU; "quadratic" σ(t) = t² is the kink-free control]
    init_scale: float = 1e-3  # [R] small symmetric init: rows ~ init_scale·N(0, I/d), pairs ±a
    seed: int = 0  # [R] the learner's own init seed (W0, a, stage-2 biases)

    def __post_init__(self) -> None:
        if self.L < 1:
            raise ValueError(f"L must be >= 1, got {self.L}")
        for name in ("eta1", "ridge", "init_scale"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be finite and > 0, got {v}")
        from .core import get_activation  # the registry (relu, quadratic and any registered one)

        get_activation(self.activation)


def default_eta1(d: int) -> float:
    """[R] The stage-1 step scale that makes ‖w₁‖ ≈ 1 (the real gradient's rows are ~0.8/√d):
    the centre of the dev grid, used by the CLI's ``distill`` when nothing was tuned."""
    return 1.5 * math.sqrt(d)


ETA1_GRID = (0.5, 1.0, 1.5, 2.5)  # [R] × √d, chosen on the dev teacher
RIDGE_GRID = (1e-3, 1e-2, 1e-1)  # [R] chosen on the dev teacher
#: [R] the baselines' ridge grid, wide enough to reach the constant predictor (λ = 1e3: predictions ≈ 0)
BASELINE_RIDGE_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 1e3)
GM_LR_GRID = (0.01, 0.03, 0.1)  # [R] chosen on the dev teacher at the reference cell


@dataclass(frozen=True)
class DistillConfig:
    steps: int = 400  # [R] cap on the distiller's Adam steps (a run that reaches it is counted)
    lr: float = 0.1  # [R] Adam learning rate (the sweep re-chooses it on dev; quick chose 0.1)
    #: [R] plateau rule (gm): stop once the matching loss has not fallen by more than
    #: ``plateau_tol`` × its first value for ``plateau_patience`` consecutive steps; 0 = off
    plateau_patience: int = 25
    plateau_tol: float = 1e-3
    n_inits: int = 4  # [R] random initialisations matched per step (DC, Zhao et al. 2021)
    pm_batch: int = 1024  # [R] real points per performance-matching step
    cos_weight: float = 1.0  # [R] squared + cosine distance (DC uses the cosine per output node)

    def __post_init__(self) -> None:
        if self.steps < 0 or self.n_inits < 1 or self.pm_batch < 1 or self.plateau_patience < 0:
            raise ValueError("steps and plateau_patience must be >= 0, n_inits and pm_batch >= 1")
        if not (math.isfinite(self.plateau_tol) and self.plateau_tol >= 0):
            raise ValueError(f"plateau_tol must be finite and >= 0, got {self.plateau_tol}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be finite and > 0, got {self.lr}")


@dataclass(frozen=True)
class SearchConfig:
    mse_factor: float = 1.1  # issue: test MSE ≤ 1.1× the real-data learner's
    min_alignment: float = 0.9  # issue: alignment ‖P_U W‖_F/‖W‖_F ≥ 0.9
    n1_factor: int = 4  # issue: real stage-1 data n₁ = 4 d²
    n2_factor: int = 4  # issue: real stage-2 data n₂ = 4 L
    m1_max: int = 256  # [R] ceiling of the m₁ search (a search that ends there is flagged)
    m2_max_factor: int = 4  # [R] ceiling of the m₂ search, × L
    real_max_factor: int = 16  # [R] ceiling of the real-n search, × d²
    n_val: int = 2048  # [R] validation points (same teacher) that the searches look at
    n_test: int = 4096  # [R] test points (same teacher, own seed) for every reported MSE


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep runs; written to ``RUN/spec.json`` and compared on resume."""

    cells: tuple[tuple[int, int, int, str], ...]  # (d, r, L, stages) with stages in {"12", "2"}
    distiller: str = "gm"
    link: str = "he2"
    seeds: int = 3
    seed: int = 0
    distill: DistillConfig = field(default_factory=DistillConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    baselines: tuple[str, ...] = ("random", "herding", "kcenter")
    tune_lr: bool = True  # choose the distiller's lr on the dev teacher, per d (at the smallest r of that d)
    activation: str = "relu"  # the learner's σ: relu, quadratic (the kink-free control) or a registered one
    #: what a stage-1 cell measures beside m₁*: "real" (n_real*), "owninit" (the own-init ablation),
    #: "baselines" (the equal-memory subsets); the ablation sweeps of ``reproduce`` leave some out
    parts: tuple[str, ...] = ("real", "owninit", "baselines")
    #: the d at which the absolute target of each (r, L) is set on the dev teacher (0: the grid's smallest
    #: stage-1 d with that (r, L)); an ablation sweep on a few cells keeps the main grid's
    target_at: int = 0

    def __post_init__(self) -> None:
        from .distill import DISTILLERS as registered  # gm, pm and any registered one

        if self.distiller not in registered:
            raise ValueError(f"unknown distiller {self.distiller!r} (choose one of {', '.join(sorted(registered))})")
        if self.link not in LINKS:
            raise ValueError(f"unknown link {self.link!r} (choose one of {', '.join(LINKS)})")
        if self.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {self.seeds}")
        if not self.cells:
            raise ValueError("the grid has no cells")
        from .core import get_activation

        get_activation(self.activation)
        bad = set(self.parts) - {"real", "owninit", "baselines"}
        if bad:
            raise ValueError(f"unknown parts {sorted(bad)} (choose from real, owninit, baselines)")
        for d, r, L, _ in self.cells:
            TeacherConfig(d, r)
            if L < 1:
                raise ValueError(f"L must be >= 1, got {L}")
