"""Configuration of a merge, as frozen dataclasses (the CLI's options map onto these fields)."""

from __future__ import annotations

import math
from dataclasses import dataclass

SPACE_NAMES = ("full", "knots", "core", "core_svd", "circulant", "peft")
RULE_NAMES = ("ta", "ties", "magnitude_prune", "dare_linear", "dare_ties", "tsv", "iso")
#: the rules peft's add_weighted_adapter has (the ``peft`` space)
PEFT_RULES = ("ta", "ties", "magnitude_prune", "dare_linear", "dare_ties")
#: TIES / magnitude-prune trim each layer's R×R core matrices on their own (the shared layer's
#: ``trim_scope="tensor"``), as Core Space's code does [C]: apanariello4/core-space-merging,
#: ``task_merger.py``, ``MatrixPerLayerMerger.merge`` (merge_space "core") calls ``_merge_tensors``
#: → ``_process_ties`` per layer key, which runs ``ties_merging`` on that layer's core matrices only.
TRIM_SCOPE = "tensor"


def rule_error(name: str) -> str | None:
    """Why ``name`` is not a merge rule (None if it is): a bare ``dare`` names its two meanings."""
    if name == "dare":
        return ("rule 'dare' is ambiguous: choose dare_linear (DARE then task arithmetic, peft's "
                "and mergekit's 'dare') or dare_ties (DARE then TIES' sign election)")
    if name in RULE_NAMES:
        return None
    # a rule added to the core's registry (icml26_shared.merge) is one too
    from icml26_shared.merge import RULES

    if name in RULES:
        return None
    return f"unknown rule {name!r} (choose one of {', '.join(RULE_NAMES)})"


@dataclass(frozen=True)
class MergeConfig:
    space: str = "core"
    """Merge space (default ``core``: exact, and the sketch has not been measured to pay): ``full``
    (dense ΔW) [C], ``knots`` (KnOTS, ICLR'25) [C], ``core`` (Core Space, NeurIPS'25, fastest
    exact route) [C], ``core_svd`` (Core Space by two SVDs, its published
    route) [C], ``peft`` (peft's ``add_weighted_adapter`` itself) [C], ``circulant`` (CircuMerge,
    ICML'26 abstract; algorithm reconstructed; opt-in) [R]."""
    rule: str = "ta"
    """Merge rule applied inside the space: ta, ties, magnitude_prune, dare_linear, dare_ties, tsv, iso
    [C] (the rules the KnOTS / Core Space / peft code ships; ``iso`` is Iso-C / CART-style
    spectrum flattening), from the core's ``icml26_shared.merge`` (peft's code for TA / TIES /
    DARE); TIES trims per layer (``TRIM_SCOPE``). A bare ``dare`` is refused (ambiguous)."""
    weights: tuple[float, ...] | None = None
    """Per-adapter weights λ_t (default 1 each; finite, either sign, not all zero: −1 negates a
    task) [C] (task-arithmetic scaling; passed to the rule as peft's ``add_weighted_adapter`` does)."""
    density: float | None = None
    """Fraction kept by TIES trimming / DARE dropping (default: ties 0.2, dare 0.5) [C]."""
    sketch_size: int | str = "auto"
    """circulant only: rows sampled after the shared transform; "auto" = clip(⌈R/ε²⌉, 2R, d) for
    the stacked rank R and the target distortion ε = ``sketch_target``; "none" = the transform
    without sampling (then circulant equals core) [R] (abstract: sampling after a shared
    circulant transform; the size rule is ours)."""
    sketch_target: float = 0.25
    """circulant ``auto`` only: target Gram distortion ε ∈ (0, 1) [R] (chosen on dev shapes,
    README)."""
    out_rank: int | None = None
    """Compress every merged layer to this rank (best rank-r by a factored SVD) [R]."""
    seed: int = 0
    """Seeds DARE's masks, the circulant transform and sampling, and the full-space range finder."""
    rank_tol: float = 1e-5
    """Relative singular-value floor for bases [C] (KnOTS drops singular values < 1e-5)."""

    def __post_init__(self) -> None:
        if self.space not in SPACE_NAMES:
            raise ValueError(f"unknown space {self.space!r} (choose one of {', '.join(SPACE_NAMES)})")
        if rule_error(self.rule):
            raise ValueError(rule_error(self.rule))
        if self.weights is not None:
            bad = [w for w in self.weights if not math.isfinite(w)]
            if bad:
                raise ValueError(f"weights must be finite numbers, got {bad[0]}")
            if not any(self.weights):
                raise ValueError("weights are all zero: the merged adapter would be empty")
        if self.space == "peft" and self.rule not in PEFT_RULES:
            raise ValueError(f"peft's add_weighted_adapter has no rule {self.rule!r} "
                             f"(it has: {', '.join(PEFT_RULES)})")
        if self.density is not None and not (math.isfinite(self.density) and 0.0 < self.density <= 1.0):
            raise ValueError(f"density must be in (0, 1], got {self.density}")
        if self.out_rank is not None and self.out_rank < 1:
            raise ValueError(f"out-rank must be ≥ 1, got {self.out_rank}")
        ss = self.sketch_size
        if not (ss in ("auto", "none") or (isinstance(ss, int) and ss > 0)):
            raise ValueError(f"sketch size must be 'auto', 'none' or a positive integer, got {ss!r}")
        if not 0.0 < self.sketch_target < 1.0:
            raise ValueError(f"sketch target must be in (0, 1), got {self.sketch_target}")

    def space_options(self):
        from .spaces import SpaceOptions

        return SpaceOptions(sketch_size=self.sketch_size, sketch_target=self.sketch_target,
                            rank_tol=self.rank_tol)
