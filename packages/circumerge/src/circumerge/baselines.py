"""The merge spaces CircuMerge is compared with, exact as their public code defines them [C], each in
its fastest exact implementation (a faster linear-algebra route counts for the baseline).

- ``full``: dense task updates ΔW_t = B_t A_t, rule on the (T, m, n) stack, then a seeded
  randomized SVD back to rank ≤ Σ r_t (what peft's ``*_svd`` combination types do, faster).
- ``knots``: KnOTS (Stoica et al., ICLR'25): SVD of [ΔW_1 … ΔW_T] (m × T·n) = U S [V_1 … V_T],
  singular values < 1e-5·σ_max dropped, rule on the V_t blocks, ΔW* = U S V*. The concatenation
  is B_s · blkdiag(A_1 … A_T), so its SVD is computed exactly from a QR of B_s, per-task QRs of
  A_tᵀ and one R×R SVD (float64) — never the m × T·n matrix (``knots_dense`` is the literal one).
- ``core``: Core Space (Panariello et al., NeurIPS'25): U = left singular vectors of B_s,
  V = right singular vectors of A_s, core matrices M_t = Uᵀ B_t A_t Vᵀ (R×R), ΔW* = U M* V.
  Fastest exact route: the bases from the float64-accumulated R×R Grams (eigh), never an SVD
  of a d×R matrix, the lift folded into one factor (``core.merge_from_grams``). ``core_svd``
  is the published route (two thin SVDs, float64), kept as the reference.
- ``peft``: peft's own ``add_weighted_adapter`` (``peft_baseline.py``).
"""

from __future__ import annotations

import torch

from icml26_shared.merge import apply_rule

from .gram import gram64, merge_from_grams
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


def _knots_rule(V_blocks, U, S, *, rule, weights, density, generator, dtype):
    V_star = apply_rule(rule, V_blocks, weights.to(V_blocks.dtype), density=density, generator=generator)
    return V_star.to(dtype), (U * S).to(dtype)


@register_space("knots")
def knots_space(As, Bs, *, rule, weights, density, generator, opts: SpaceOptions):
    dtype = As[0].dtype
    B_s = torch.cat(list(Bs), 1).to(torch.float64)
    Qb, Rb = torch.linalg.qr(B_s)  # B_s = Qb Rb
    QRs = [torch.linalg.qr(a.to(torch.float64).T) for a in As]  # A_tᵀ = Qa_t Ra_t
    mid = Rb @ torch.block_diag(*[ra.T for _, ra in QRs])  # [ΔW_t] = Qb · mid · blkdiag(Qa_tᵀ)
    Um, S, Wh = torch.linalg.svd(mid)
    k = _keep(S, opts.rank_tol)
    V_blocks = torch.stack([Wh[:k, sl] @ qa.T for sl, (qa, _) in zip(rank_blocks(As), QRs, strict=True)])
    return _knots_rule(V_blocks, Qb @ Um[:, :k], S[:k], rule=rule, weights=weights, density=density,
                       generator=generator, dtype=dtype)


@register_space("knots_dense")
def knots_dense_space(As, Bs, *, rule, weights, density, generator, opts: SpaceOptions):
    """KnOTS literally as its code does it: the SVD of the dense m × T·n concatenation."""
    T, n = len(As), As[0].shape[1]
    concat = torch.cat([B @ A for A, B in zip(As, Bs, strict=True)], dim=1)
    U, S, Vh = torch.linalg.svd(concat, full_matrices=False)
    del concat
    k = _keep(S, opts.rank_tol)
    V_blocks = Vh[:k].reshape(k, T, n).permute(1, 0, 2)  # (T, k, n)
    return _knots_rule(V_blocks, U[:, :k], S[:k], rule=rule, weights=weights, density=density,
                       generator=generator, dtype=As[0].dtype)


@register_space("core")
def core_space(As, Bs, *, rule, weights, density, generator, opts: SpaceOptions):
    A_s, B_s = torch.cat(list(As), 0), torch.cat(list(Bs), 1)
    return merge_from_grams(As, Bs, gram64(A_s.T), gram64(B_s), rule=rule, weights=weights,
                            density=density, generator=generator, rank_tol=opts.rank_tol)


def core_bases(A_s: torch.Tensor, B_s: torch.Tensor, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Core-Space reference bases: U (m × k_B) from B_s, V (k_A × n) from A_s, by SVD."""
    _, Sa, Vh = torch.linalg.svd(A_s, full_matrices=False)
    U, Sb, _ = torch.linalg.svd(B_s, full_matrices=False)
    return U[:, :_keep(Sb, rtol)], Vh[:_keep(Sa, rtol)]


@register_space("core_svd")
def core_svd_space(As, Bs, *, rule, weights, density, generator, opts: SpaceOptions):
    dtype = As[0].dtype
    A_s = torch.cat(list(As), 0).to(torch.float64)
    B_s = torch.cat(list(Bs), 1).to(torch.float64)
    U, V = core_bases(A_s, B_s, opts.rank_tol)
    UtB, AVt = U.T @ B_s, A_s @ V.T  # (k_B × R), (R × k_A)
    mats = torch.stack([UtB[:, sl] @ AVt[sl] for sl in rank_blocks(As)])
    merged = apply_rule(rule, mats, weights.to(torch.float64), density=density, generator=generator)
    return V.to(dtype), (U @ merged).to(dtype)


@register_space("peft")
def peft_space(As, Bs, *, rule, weights, density, generator, opts: SpaceOptions):
    from .peft_baseline import PeftMerger

    merger = PeftMerger(As, Bs)
    return merger.merge(rule, weights, density=density, seed=generator.initial_seed())
