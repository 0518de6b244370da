"""Configuration of a merge, as frozen dataclasses (the CLI's options map onto these fields)."""

from __future__ import annotations

from dataclasses import dataclass

SPACE_NAMES = ("full", "knots", "core", "circulant")
RULE_NAMES = ("ta", "ties", "dare", "dare_ties", "tsv", "iso")


@dataclass(frozen=True)
class MergeConfig:
    space: str = "circulant"
    """Merge space: ``full`` (dense ΔW) [C], ``knots`` (KnOTS, ICLR'25) [C], ``core`` (Core Space,
    NeurIPS'25) [C], ``circulant`` (CircuMerge, ICML'26 abstract; algorithm reconstructed) [R]."""
    rule: str = "ta"
    """Merge rule applied inside the space: ta, ties, dare, dare_ties, tsv, iso [C] (the rules the
    KnOTS / Core Space code ships; ``iso`` is Iso-C / CART-style spectrum flattening)."""
    weights: tuple[float, ...] | None = None
    """Per-adapter weights λ_t (default 1 each) [C] (task-arithmetic scaling)."""
    density: float | None = None
    """Fraction kept by TIES trimming / DARE dropping (default: ties 0.2, dare 0.5) [C]."""
    sketch_size: int | str = "auto"
    """circulant only: rows sampled after the shared transform; "auto" = clip(16·erank, 2R, d),
    or no sampling when that exceeds d/32,
    "none" = no sampling (then circulant equals core) [R] (abstract: sampling after a shared
    circulant transform; the size rule is ours)."""
    sketch_factor: float = 16.0
    """circulant only: c in s = c · effective rank [R]."""
    out_rank: int | None = None
    """Compress every merged layer to this rank (best rank-r by a factored SVD) [R]."""
    seed: int = 0
    """Seeds DARE's masks, the circulant transform and sampling, and the full-space range finder."""
    rank_tol: float = 1e-5
    """Relative singular-value floor for bases [C] (KnOTS drops singular values < 1e-5)."""

    def __post_init__(self) -> None:
        if self.space not in SPACE_NAMES:
            raise ValueError(f"unknown space {self.space!r} (choose one of {', '.join(SPACE_NAMES)})")
        if self.rule not in RULE_NAMES:
            raise ValueError(f"unknown rule {self.rule!r} (choose one of {', '.join(RULE_NAMES)})")
        if self.density is not None and not 0.0 < self.density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {self.density}")
        if self.out_rank is not None and self.out_rank < 1:
            raise ValueError(f"out-rank must be ≥ 1, got {self.out_rank}")
        ss = self.sketch_size
        if not (ss in ("auto", "none") or (isinstance(ss, int) and ss > 0)):
            raise ValueError(f"sketch size must be 'auto', 'none' or a positive integer, got {ss!r}")

    def space_options(self):
        from .spaces import SpaceOptions

        return SpaceOptions(sketch_size=self.sketch_size, sketch_factor=self.sketch_factor,
                            rank_tol=self.rank_tol)
