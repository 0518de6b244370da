"""The exact, shared back half of Core Space and CircuMerge: from the R×R Grams of the stacked
factors (float64) to whitened bases, R×R core matrices, the rule, and the lift (``core.py`` step
3–5). ``core`` feeds it exact Grams, ``circulant`` sketched ones."""

from __future__ import annotations

import torch

from icml26_shared.merge import apply_rule


def _blocks(As) -> list[slice]:
    out, start = [], 0
    for a in As:
        out.append(slice(start, start + a.shape[0]))
        start += a.shape[0]
    return out


def gram64(X: torch.Tensor) -> torch.Tensor:
    """Xᵀ X accumulated in float64 (products of float32/bf16 numbers are exact in float64)."""
    Y = X.to(torch.float64)
    return Y.T @ Y


def whiten(G: torch.Tensor, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """From G = Q Λ Qᵀ (float64) keep λ > rtol² λ_max (singular values above rtol·σ_max, KnOTS'
    floor), in descending order (Core Space's singular-value order). Returns (Q_k, λ_k)."""
    lam, Q = torch.linalg.eigh(G)
    lam, Q = lam.flip(0), Q.flip(1)
    top = lam[0] if lam.numel() and lam[0] > 0 else torch.tensor(1.0, dtype=lam.dtype)
    k = max(1, int((lam > max(rtol ** 2, 1e-14) * top).sum()))
    return Q[:, :k], lam[:k].clamp(min=torch.finfo(lam.dtype).tiny)


def merge_from_grams(As, Bs, G_A: torch.Tensor, G_B: torch.Tensor, *, rule, weights, density,
                     generator, rank_tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 3–5 from the Grams of the stacked factors (A_s A_sᵀ, B_sᵀ B_s, float64): whitening,
    R×R core matrices, the rule, the lift. Shared by ``core`` (exact Grams) and ``circulant``
    (sketched Grams), so the only difference between them is how the Grams were obtained."""
    A_s, B_s = torch.cat(list(As), 0), torch.cat(list(Bs), 1)  # (R × n), (m × R)
    P, lam_a = whiten(G_A, rank_tol)
    Q, lam_b = whiten(G_B, rank_tol)
    Z_B = lam_b.sqrt()[:, None] * Q.T  # (k_B × R) = Uᵀ B_s
    Z_A = P * lam_a.sqrt()[None, :]  # (R × k_A) = A_s Vᵀ
    mats = torch.stack([Z_B[:, sl] @ Z_A[sl] for sl in _blocks(As)])
    merged = apply_rule(rule, mats, weights.to(torch.float64), density=density, generator=generator)
    K = (Q / lam_b.sqrt()[None, :]) @ merged @ (P / lam_a.sqrt()[None, :]).T  # (R × R)
    dtype = A_s.dtype
    # ΔW* = B_s K A_s: fold K into the cheaper side (m R² or n R²), accumulated in float64
    if A_s.shape[1] <= B_s.shape[0]:
        return (K @ A_s.to(torch.float64)).to(dtype), B_s
    return A_s, (B_s.to(torch.float64) @ K).to(dtype)
