"""Hyperparameters: frozen dataclasses, each field citing the paper / the authors' code or marked [R].

[C] = the authors' public code (``AI-hew-math/MVProbe``: ``probex.py``,
``train_discriminative_probex.py``); [P] = the paper; [R] = reconstructed here.
"""

from __future__ import annotations

from dataclasses import dataclass

BRANCHES = ("xu", "xtu", "xxtu", "xtxu")  # [C] probex.py: the four probe views
FIRST_ORDER = ("xu", "xtu")  # [C] ablation flag first_order
SECOND_ORDER = ("xxtu", "xtxu")  # [C] ablation flag second_order


@dataclass(frozen=True)
class ProbeConfig:
    """The probe encoder (MVProbe, and ProbeX as its one-branch, unstandardised special case)."""

    n_probes: int = 128  # [C] --n_probes default 128 (r, learnable probe columns per branch)
    proj_dim: int = 128  # [C] --proj_dim default 128 (shared points-axis projection)
    rep_dim: int = 512  # [C] --rep_dim default 512 (fused representation)
    branches: tuple[str, ...] = BRANCHES  # [C] all four branches on; ablations choose subsets
    standardize: bool = True  # [C][P] per-sample standardisation of each branch (Thm 3)
    eps: float = 1e-8  # [C] _standardize_per_sample eps (population std here: issue 17 [R])
    x_center: bool = False  # [C] --x_center default False
    x_row_norm: bool = False  # [C] --x_row_norm default False

    def __post_init__(self) -> None:
        for name in ("n_probes", "proj_dim", "rep_dim"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if not self.branches:
            raise ValueError("branches must name at least one of " + ", ".join(BRANCHES))
        unknown = [b for b in self.branches if b not in BRANCHES]
        if unknown:
            raise ValueError(f"unknown branch {unknown[0]!r} (choose from {', '.join(BRANCHES)})")
        if len(set(self.branches)) != len(self.branches):
            raise ValueError(f"branches repeat: {self.branches}")


@dataclass(frozen=True)
class TrainConfig:
    """The trainer every probe and the flat baselines share."""

    lr: float = 3e-4  # [C] --training_lr default 3e-4 (ProbeX's own default is 1e-3 [P])
    weight_decay: float = 1e-5  # [C] Adam(..., weight_decay=1e-5)
    batch_size: int = 128  # [C] --batch_size default 128
    epochs: int = 3000  # [C] --n_epochs default 3000 (ProbeX: 500 [P])
    patience: int | None = None  # [R] early-stopping patience in epochs on val; None = run all
    # epochs and keep the best-on-val weights ([C] keeps the best val accuracy epoch)
    eval_every: int = 1  # [R] evaluate on val every this many epochs
    seed: int = 0  # [C] --seed (the paper averages seeds 1-5)

    def __post_init__(self) -> None:
        import math

        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"learning rate must be a positive number, got {self.lr}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight decay must be >= 0, got {self.weight_decay}")
        if self.batch_size < 1 or self.epochs < 1 or self.eval_every < 1:
            raise ValueError("batch size, epochs and eval_every must be positive integers")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be a positive integer, got {self.patience}")


@dataclass(frozen=True)
class ZooConfig:
    """The offline "mini Model Jungle" [R]: one Model Tree of MLPs fine-tuned from one ancestor on
    digits, Model-J in miniature (Model-J: ViTs/ResNets fine-tuned on 50-of-100 CIFAR classes [P])."""

    n_models: int = 1500  # [R] issue 17 (Model-J subsets hold thousands of models [P])
    subset_size: int = 5  # [R] classes per child (Model-J: 50 of 100 [P])
    n_classes: int = 10  # digits
    hidden: int = 64  # [R] ancestor MLP 64 -> hidden -> hidden -> 10
    ancestor_steps: int = 200  # [R] full-batch Adam steps for the ancestor
    ancestor_lr: float = 5e-3  # [R]
    steps: tuple[int, int] = (20, 80)  # [R] nuisance: fine-tuning steps per child, uniform range
    lr: tuple[float, float] = (3e-4, 3e-3)  # [R] nuisance: per-child Adam lr, log-uniform range
    input_noise: tuple[float, float] = (0.0, 1.0)  # [R] nuisance: Gaussian input noise std range
    weight_noise: float = 0.0  # [R] nuisance: relative Gaussian perturbation of the start point
    permute_hidden: float = 0.5  # [R] nuisance: probability that a child's first hidden layer is
    # permuted (a function-preserving symmetry: rows of fc1, columns of fc2)
    batch: int = 32  # [R] minibatch per child step (nuisance: each child's own batch order)
    split: tuple[int, int, int] = (1000, 250, 250)  # [R] train / val / test models (issue 17)
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.subset_size < self.n_classes:
            raise ValueError(f"subset size must be between 1 and {self.n_classes - 1}, got {self.subset_size}")
        if self.n_models < 3:
            raise ValueError(f"need at least 3 models (train/val/test), got {self.n_models}")
        if self.hidden < 2:
            raise ValueError(f"hidden width must be at least 2, got {self.hidden}")

    def split_sizes(self) -> tuple[int, int, int]:
        """The 1000/250/250 proportions scaled to ``n_models``."""
        total = sum(self.split)
        n_val = max(1, round(self.n_models * self.split[1] / total))
        n_test = max(1, round(self.n_models * self.split[2] / total))
        return self.n_models - n_val - n_test, n_val, n_test
