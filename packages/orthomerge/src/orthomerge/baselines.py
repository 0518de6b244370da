"""The Euclidean merges the paper compares against, on dense deltas Δ_i (m × n) [P, C].

Every rule has the same signature ``rule(deltas, *, scale, density, weights, generator) -> Δ*``
and is one decorated function; OrthoMerge uses the same rules on its residuals E_i.

- ``ta``    task arithmetic (Ilharco et al. 2023): λ Σ w_i Δ_i.
- ``ties``  TIES (Yadav et al. 2023): keep the top-``density`` magnitudes of each Δ_i, elect a sign
            per entry from the sum, average the agreeing entries (disjoint mean), times λ.
- ``dare``  DARE (Yu et al. 2024) + TIES sign election (DARE-TIES, mergekit's common setting): drop
            entries with probability 1 − density, rescale by 1/density, then elect and average.
- ``tsv``   TSV-M (Gargiulo et al. 2025): keep the top 1/T singular triplets of each Δ_i,
            orthogonalise the stacked U and V by their polar factors, Δ* = λ U⊥ Σ V⊥ᵀ.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Rule = Callable[..., torch.Tensor]
RULES: dict[str, Rule] = {}


def register(name: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn
    return deco


def merge_deltas(rule: str, deltas: list[torch.Tensor], *, scale: float = 1.0, density: float = 0.2,
                 weights=None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Δ* of ``rule`` over the task deltas (a list of same-shape tensors)."""
    if rule not in RULES:
        raise ValueError(f"unknown merge rule {rule!r} (choose one of {', '.join(RULES)})")
    w = [1.0] * len(deltas) if weights is None else list(weights)
    if len(w) != len(deltas):
        raise ValueError(f"{len(w)} weights for {len(deltas)} experts")
    return RULES[rule](torch.stack(deltas), scale=scale, density=density,
                       weights=torch.tensor(w, dtype=deltas[0].dtype), generator=generator)


def _wsum(D: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (w.view(-1, *[1] * (D.dim() - 1)) * D).sum(0)


@register("ta")
def task_arithmetic(D, *, scale, density, weights, generator):
    return scale * _wsum(D, weights)


def _trim(D: torch.Tensor, density: float) -> torch.Tensor:
    """Keep each task's top-``density`` fraction of entries by magnitude."""
    flat = D.reshape(D.shape[0], -1)
    k = max(1, int(round(density * flat.shape[1])))
    if k >= flat.shape[1]:
        return D
    thresh = flat.abs().kthvalue(flat.shape[1] - k + 1, dim=1, keepdim=True).values
    return (flat * (flat.abs() >= thresh)).reshape(D.shape)


def _elect_disjoint_mean(D: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    Dw = w.view(-1, *[1] * (D.dim() - 1)) * D
    sign = torch.sign(Dw.sum(0))
    agree = (torch.sign(Dw) == sign) & (Dw != 0)
    count = agree.sum(0).clamp_min(1)
    return (Dw * agree).sum(0) / count


@register("ties")
def ties(D, *, scale, density, weights, generator):
    return scale * _elect_disjoint_mean(_trim(D, density), weights)


@register("dare")
def dare_ties(D, *, scale, density, weights, generator):
    keep = torch.rand(D.shape, generator=generator, dtype=D.dtype) < density
    return scale * _elect_disjoint_mean(D * keep / density, weights)


def _polar(X: torch.Tensor) -> torch.Tensor:
    U, _, Vh = torch.linalg.svd(X, full_matrices=False)
    return U @ Vh


@register("tsv")
def tsv_merge(D, *, scale, density, weights, generator):
    if D.dim() != 3:  # vectors (biases, norms): the mean, as TSV-M's code does for non-matrices
        return scale * _wsum(D, weights) / weights.sum()
    T, m, n = D.shape
    k = max(1, min(m, n) // T)
    Us, Ss, Vs = [], [], []
    for i in range(T):
        U, S, Vh = torch.linalg.svd(weights[i] * D[i], full_matrices=False)
        Us.append(U[:, :k])
        Ss.append(S[:k])
        Vs.append(Vh[:k].T)
    U, S, V = torch.cat(Us, 1), torch.cat(Ss), torch.cat(Vs, 1)
    return scale * (_polar(U) * S) @ _polar(V).T
