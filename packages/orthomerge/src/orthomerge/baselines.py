"""The Euclidean merges the paper compares against, on dense deltas Δ_i (m × n) [P, C].

The rules live once, in the core's merge layer ``icml26_shared.merge`` (shared with circumerge):
TA, TIES, magnitude-prune, DARE-linear and DARE-TIES are peft's own ``merge_utils`` functions,
TSV-M and Iso-C are written there. This module only adds the strength λ and the trim scope:

- ``ta``           task arithmetic (Ilharco et al. 2023): λ Σ w_i Δ_i.
- ``ties``         TIES (Yadav et al. 2023): keep each expert's top-``density`` magnitudes, elect a
                   sign per entry from the sum (a zero sum elects +1), disjoint mean, times λ.
                   Trim scope ``model`` (default): the top ``density`` of each expert over every
                   tensor the rule sees, as TIES' and OrthoMerge's authors do (``kthvalue`` over
                   the flattened model); ``tensor``: per tensor, peft's and mergekit's convention.
- ``magnitude_prune``  the same trim, then the weighted sum.
- ``dare_linear``  DARE (Yu et al. 2024): drop with probability 1 − density, rescale by 1/density,
                   then TA (peft's and mergekit's "dare").
- ``dare_ties``    DARE then TIES' sign election and disjoint mean (mergekit's dare_ties).
- ``tsv``          TSV-M (Gargiulo et al. 2025); ``iso`` Iso-C (Marczak et al. 2025).

A bare ``dare`` is refused, naming both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from icml26_shared import UserError
from icml26_shared.merge import RULES, apply_rule, model_thresholds

TRIMMED = ("ties", "magnitude_prune")  # the rules a model-scope threshold replaces the trim of
TRIM_SCOPES = ("model", "tensor")

__all__ = ["RULES", "TRIMMED", "TRIM_SCOPES", "check_rule", "merge_deltas", "thresholds"]


def check_rule(rule: str) -> None:
    """``UserError`` (one line) for an unknown rule or the ambiguous bare ``dare``."""
    if rule not in RULES:
        apply_rule(rule, torch.zeros(1, 1))  # the core's refusal, naming dare_linear / dare_ties


def thresholds(rule: str, experts: Sequence[Iterable[torch.Tensor] | Callable[[], Iterable[torch.Tensor]]],
               density: float, trim_scope: str) -> torch.Tensor | None:
    """Per-expert magnitude cuts for a model-scope trim (``None``: trim per tensor, or a rule
    without a trim). ``experts[t]``: the tensors of expert t the rule sees (or a callable giving them)."""
    if trim_scope not in TRIM_SCOPES:
        raise UserError(f"trim scope must be one of {', '.join(TRIM_SCOPES)}, got {trim_scope!r}")
    if trim_scope == "tensor" or rule not in TRIMMED:
        return None
    return model_thresholds(experts, density)


def merge_deltas(rule: str, deltas: list[torch.Tensor], *, scale: float = 1.0, density: float | None = None,
                 weights=None, generator: torch.Generator | None = None,
                 threshold: torch.Tensor | None = None) -> torch.Tensor:
    """λ · rule(Δ_1..Δ_T) (a list of same-shape tensors); ``threshold`` (T,) from ``thresholds``
    switches TIES / magnitude-prune to the model-scope trim."""
    check_rule(rule)
    w = None if weights is None else torch.as_tensor(list(weights), dtype=deltas[0].dtype)
    if w is not None and len(w) != len(deltas):
        raise ValueError(f"{len(w)} weights for {len(deltas)} experts")
    thr = threshold if rule in TRIMMED else None
    return scale * apply_rule(rule, torch.stack(deltas), w, density=density, generator=generator, thresholds=thr)
