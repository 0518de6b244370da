"""Hyperparameters: frozen dataclasses, each field citing the paper or marked [R]."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SubspaceConfig:
    """The shared-subspace fit (paper §3, the authors' H1 config in the code)."""

    #: variance retained by the pooled PCA, rho [C: H1 config 0.95]
    var: float = 0.95
    #: relative-usage threshold tau for a task to "use" a direction [C: H1 config 1e-3]
    tau: float = 1e-3
    #: how many tasks must use a direction for it to be shared; "all" = every task [C: m = all]
    m: int | str = "all"
    #: seed of the per-task subsampling to n = min_t n_t [R]
    seed: int = 42

    def __post_init__(self) -> None:
        if not 0.0 < self.var <= 1.0:
            raise ValueError(f"var must lie in (0, 1], got {self.var}")
        if not 0.0 <= self.tau < 1.0:
            raise ValueError(f"tau must lie in [0, 1), got {self.tau}")
        if self.m != "all" and (not isinstance(self.m, int) or self.m < 1):
            raise ValueError(f"m must be 'all' or a positive integer, got {self.m!r}")


@dataclass(frozen=True)
class CollectConfig:
    """Decode-state collection (paper §3 "Decode state")."""

    #: decoder layer whose output is recorded [C: H1 layer 10]
    layer: int = 10
    #: greedy decode steps per prompt [C: 128; R: 12 at quick scale, CPU budget]
    max_new_tokens: int = 12
    #: prompts per task [C: 128; R: 24 calibration prompts at quick scale]
    per_task: int | None = None
    #: batch size of batched generation [R]
    batch_size: int = 24


@dataclass(frozen=True)
class AblationConfig:
    """Decode-only ablation and its controls (paper §H2)."""

    #: strength of the removal h - alpha Q Q^T h for the shared basis [P: alpha = 1]
    alpha: float = 1.0
    #: controls, matched in dimension and removed energy [P]; "prefill" = matched-rank prefill basis
    controls: tuple[str, ...] = ("alpha", "k", "random", "prefill")
    #: paired bootstrap resamples for the accuracy intervals [R]
    n_boot: int = 2000
    #: seed of the control bases (random subsets and orders of the non-shared pool) [R]
    seed: int = 0


@dataclass(frozen=True)
class SteerConfig:
    """Steering audit (paper §Steering, Tables 4–5)."""

    #: added vector norm as a multiple of the mean decode-state norm [R]
    scale: float = 0.5
    #: repair strength of v_alpha = (I - alpha Q Q^T) v [P]
    repair_alpha: float = 1.0
