"""Hyperparameters: frozen dataclasses, each field citing the authors' code or marked [R].

[C] = ``intLyc/MES-RET-Supplement`` ``Code/Algorithms/MES_RET.m`` / ``sMES_RET.m`` (MToP classes);
the CMA-ES constants themselves are computed in :func:`mesret.core.cma_constants` exactly as in
``MES_RET.m::InitCMA`` (full) and ``sMES_RET.m::InitCMA`` (separable, sep-CMA's c_cov·(n+2)/3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALLOCATIONS = ("roulette", "uniform", "none")


@dataclass(frozen=True)
class MESRETConfig:
    """One MES-RET run. ``tau=0`` switches transfer off, ``allocation="none"`` switches the
    reward-weighted evaluation off; with both off MES-RET is independent CMA-ES (tested)."""

    sigma0: float = 0.3  # [C] MES_RET.m `sigma0 = 0.3` (unified [0, 1] box)
    tau: float | None = None  # [C] transfer samples per kind: 1 (MES_RET.m), 2 (sMES_RET.m); None = by variant
    separable: bool = False  # [C] False = MES_RET.m (full C), True = sMES_RET.m (diagonal C)
    allocation: str = "roulette"  # [C] "roulette": T extra generations drawn on the rewards; [R] ablations:
    # "uniform" (T extra generations drawn uniformly over the active tasks), "none" (even split)
    popsize: int | None = None  # [C] Prob.N, one λ for all tasks; None = 4 + floor(3 ln max D) [R]
    transfer_after: float = 2.0  # [C] transfer once FE > 2·N·T
    eps_fraction: float = 0.3  # [C] ε-constraint relaxed during the first 30% of maxFE
    eps_power: float = 8.0  # [C] ε = cv_max·(1 − FE/(0.3·maxFE))^8
    cv_quantile: float = 0.2  # [C] cv_max = the 20th-percentile CV of the first population
    bound_low: float = -0.05  # [C] quadratic boundary penalty outside [−0.05, 1.05]
    bound_high: float = 1.05  # [C]
    stop_tol: float = 1e-12  # [C] CheckStop: σ·max(|p_c|, std) < 1e-12 in every coordinate
    restart_factor: int = 2  # [C] IPOP-like: all stopped → InitCMA with λ·2

    @property
    def tau_value(self) -> float:
        return (2.0 if self.separable else 1.0) if self.tau is None else float(self.tau)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field (the CLI turns it into a UserError)."""
        for name in ("sigma0", "transfer_after", "eps_fraction", "eps_power", "stop_tol"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive finite number, got {v!r}")
        if self.tau is not None and not (math.isfinite(self.tau) and self.tau >= 0):
            raise ValueError(f"tau must be a finite number >= 0, got {self.tau!r}")
        if self.allocation not in ALLOCATIONS:
            raise ValueError(f"allocation must be one of {', '.join(ALLOCATIONS)}, got {self.allocation!r}")
        if self.popsize is not None and (int(self.popsize) != self.popsize or self.popsize < 4):
            raise ValueError(f"popsize must be an integer >= 4, got {self.popsize!r}")
        if not 0 < self.cv_quantile <= 1:
            raise ValueError(f"cv_quantile must be in (0, 1], got {self.cv_quantile!r}")


def default_popsize(max_dim: int) -> int:
    """λ = 4 + floor(3 ln D) (Hansen's default) at the largest task dimension [R]: the authors set
    ``Prob.N`` per problem in MToP and the value for their suites is not in the supplement."""
    return 4 + int(math.floor(3 * math.log(max(int(max_dim), 1))))


@dataclass(frozen=True)
class OpenAIESConfig:
    """OpenAI-ES as ``sOpenAI_ES.m``: antithetic sampling, centred ranks, momentum SGD."""

    sigma: float = 1.0  # [C] divided by the mean box range (unified-space σ); the dev suite may re-pick it
    lr: float = 1e-3  # [C] learning rate; the quick reproduction picks it on the dev suite [R]
    momentum: float = 0.9  # [C]


@dataclass(frozen=True)
class MFEAConfig:
    """MFEA (Gupta et al., 2016) as MToP's ``MFEA.m`` (values as issue 53 states them)."""

    rmp: float = 0.3  # [C] MFEA.m RMP
    mu_c: float = 2.0  # [C] GA_Crossover SBX distribution index
    mu_m: float = 5.0  # [C] GA_Mutation polynomial-mutation index (p_m = 1/D)
    pop_per_task: int = 100  # [C] Problem.m defaultN: N per task (N·T individuals in all)


@dataclass(frozen=True)
class SuiteConfig:
    """The ``wcci20`` many-task construction [R] (WCCI-2020 MaTSO style: classic functions with
    seeded shifts and rotations)."""

    tasks: int = 50  # [R] issue: --tasks 2–50
    dims: tuple[int, ...] = (10, 20, 30)  # [R] issue: --dims
    similarity: str = "mixed"  # [R] high | mixed | low: how far apart the optima lie in [0, 1]^D
    seed: int = 0  # [R] suite instance (shifts, rotations); dev and test use different seeds
