"""The merge spaces CircuMerge is compared with, exact as their public code defines them [C].

- ``full``: dense task updates ΔW_t = B_t A_t, rule on the (T, m, n) stack, then a seeded
  randomized SVD back to rank ≤ Σ r_t (what peft's ``*_svd`` combination types do).
- ``knots``: KnOTS (Stoica et al., ICLR'25): SVD of [ΔW_1 … ΔW_T] (m × T·n) = U S [V_1 … V_T],
  rule on the V_t blocks, ΔW* = U S V*.
- ``core``: Core Space (Panariello et al., NeurIPS'25): V = right singular vectors of the stacked
  A factors, U = left singular vectors of the stacked B factors, core matrices M_t = Uᵀ B_t A_t Vᵀ
  (R×R), rule on the M_t, ΔW* = U M* V.
"""

from __future__ import annotations

import torch

from .rules import apply_rule
from .spaces import SpaceOptions, rank_blocks, register_space


def _keep(S: torch.Tensor, rtol: float) -> int:
    """Number of singular values above ``rtol`` · the largest (at least one)."""
    if S.numel() == 0 or S[0] <= 0:
        return 1
    return max(1, int((S > rtol * S[0]).sum()))


def randomized_svd(X: torch.Tensor, rank: int, *, oversample: int, power_iters: int,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded randomized SVD (Halko et al. 2011): exact when rank(X) ≤ rank + oversample."""
    m, n = X.shape
    q = min(rank + oversample, m, n)
    omega = torch.randn(n, q, generator=generator, dtype=X.dtype)
    Y = X @ omega
    Q, _ = torch.linalg.qr(Y)
    for _ in range(power_iters):
        Q, _ = torch.linalg.qr(X.T @ Q)
        Q, _ = torch.linalg.qr(X @ Q)
    U, S, Vh = torch.linalg.svd(Q.T @ X, full_matrices=False)
    return (Q @ U)[:, :rank], S[:rank], Vh[:rank]


@register_space("full")
def full_space(As, Bs, *, rule, weights, density, generator, opts: SpaceOptions):
    R = sum(a.shape[0] for a in As)
    mats = torch.stack([B @ A for A, B in zip(As, Bs, strict=True)])
    merged = apply_rule(rule, mats, weights, density=density, generator=generator)
    del mats
    U, S, Vh = randomized_svd(merged, R, oversample=opts.oversample, power_iters=opts.power_iters,
                              generator=generator)
    k = _keep(S, opts.rank_tol)
    root = S[:k].sqrt()
    return root[:, None] * Vh[:k], U[:, :k] * root


@register_space("knots")
def knots_space(As, Bs, *, rule, weights, density, generator, opts: SpaceOptions):
    T, n = len(As), As[0].shape[1]
    concat = torch.cat([B @ A for A, B in zip(As, Bs, strict=True)], dim=1)  # m × T·n
    U, S, Vh = torch.linalg.svd(concat, full_matrices=False)
    del concat
    k = _keep(S, opts.rank_tol)
    V_blocks = Vh[:k].reshape(k, T, n).permute(1, 0, 2)  # (T, k, n)
    V_star = apply_rule(rule, V_blocks, weights, density=density, generator=generator)
    return V_star, U[:, :k] * S[:k]


def core_bases(A_s: torch.Tensor, B_s: torch.Tensor, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Core-Space reference bases: U (m × k_B) from B_s, V (k_A × n) from A_s, by SVD."""
    _, Sa, Vh = torch.linalg.svd(A_s, full_matrices=False)
    U, Sb, _ = torch.linalg.svd(B_s, full_matrices=False)
    return U[:, :_keep(Sb, rtol)], Vh[:_keep(Sa, rtol)]


@register_space("core")
def core_space(As, Bs, *, rule, weights, density, generator, opts: SpaceOptions):
    A_s, B_s = torch.cat(list(As), 0), torch.cat(list(Bs), 1)
    U, V = core_bases(A_s, B_s, opts.rank_tol)
    UtB, AVt = U.T @ B_s, A_s @ V.T  # (k_B × R), (R × k_A)
    mats = torch.stack([UtB[:, sl] @ AVt[sl] for sl in rank_blocks(As)])
    merged = apply_rule(rule, mats, weights, density=density, generator=generator)
    return V, U @ merged

