"""CircuMerge: merging LoRA adapters through a shared circulant sketch — a RECONSTRUCTION [R].

Only the abstract of the paper is public [P]: adapters stay factored, one shared circulant
transform puts all tasks in one coordinate system so that coordinates can be sampled uniformly,
compact sketches of the cross-task interactions are merged, and a standard LoRA is rebuilt; merge
quality rises with the effective rank. What follows is our reading, built on Core Space [C]:

1. C_d = F⁻¹ diag(λ) F D with |λ_k| = 1 (conjugate-symmetric, so C_d is real orthogonal) and D
   random signs, seeded and shared by every task; applied by FFT in O(d log d) per column.
2. Sketch S = √(d/s) P_Ω C_d X of a stacked factor X (d × R) by uniform sampling of s rows;
   G = Sᵀ S ≈ Xᵀ X (exact when s = d, since C_d is orthogonal). s = "auto" picks
   s = clip(c · erank, 2R, d) from a 2R-row pilot, erank = (tr G)²/‖G‖_F² (where
   the abstract's effective rank enters besides the ``iso`` rule); no sampling when s > d/32.
3. Whitening from the sketched Grams: G_A = P Λ_A Pᵀ ≈ A_s A_sᵀ and G_B = Q Λ_B Qᵀ ≈ B_sᵀ B_s give
   bases V = Λ_A^{-1/2} Pᵀ A_s and U = B_s Q Λ_B^{-1/2} (orthonormal when the Grams are exact).
4. Because the stacked factors span the ranges, every task's coordinates in these bases are
   known exactly from R×R matrices: M_t = (Λ_B^{1/2} Qᵀ)[:, t] (P Λ_A^{1/2})[t, :]. With exact Grams
   this is Core Space's Uᵀ B_t A_t Vᵀ; with sketched Grams the bases are only near-orthonormal, but
   ΔW_t = U M_t V still holds, so task arithmetic stays exact at any sketch size (our choice [R]).
5. M* = rule(M_1 … M_T) on R×R matrices; lift without an m×n matrix, keeping the stacked A:
   B* = B_s (Q Λ_B^{-1/2} M* Λ_A^{-1/2} Pᵀ), A* = A_s (one m×R×R product).

Pure functions: no I/O, no global state; randomness only from the given generator.
"""

from __future__ import annotations

import math

import torch

from .rules import apply_rule
from .spaces import SpaceOptions, rank_blocks, register_space


def effective_rank(values: torch.Tensor, *, singular: bool = True) -> float:
    """Roy & Vetterli's effective rank exp(H(p)), p_i = σ_i / Σ σ. ``values`` are singular values
    (or, with ``singular=False``, Gram eigenvalues σ²; a matrix is first reduced to its σ)."""
    v = values.detach().to(torch.float64)
    if v.ndim == 2:
        v = torch.linalg.svdvals(v)
    elif not singular:
        v = v.clamp(min=0).sqrt()
    v = v[v > 0]
    if v.numel() == 0:
        return 0.0
    p = v / v.sum()
    return float(torch.exp(-(p * p.log()).sum()))


def participation_rank(G: torch.Tensor) -> float:
    """(tr G)² / ‖G‖_F²: the effective rank of a Gram's eigenvalue distribution without an
    eigendecomposition (O(R²)); 1 ≤ it ≤ rank(G). Used to size the sketch [R]."""
    fro2 = float((G * G).sum())
    return float(torch.trace(G)) ** 2 / fro2 if fro2 > 0 else 0.0


def circulant_params(d: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random signs D (d,) and unit-modulus, conjugate-symmetric half spectrum λ (d//2 + 1,)."""
    signs = torch.randint(0, 2, (d,), generator=generator, dtype=torch.int64).to(torch.float64) * 2 - 1
    theta = torch.rand(d // 2 + 1, generator=generator, dtype=torch.float64) * (2 * math.pi)
    lam = torch.polar(torch.ones_like(theta), theta)
    # DC (and Nyquist for even d) must be real for a real transform: ±1
    lam[0] = torch.sign(lam[0].real) if lam[0].real != 0 else 1.0
    if d % 2 == 0:
        lam[-1] = torch.sign(lam[-1].real) if lam[-1].real != 0 else 1.0
    return signs, lam


def apply_circulant(X: torch.Tensor, signs: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """C X for X (d × R), C = F⁻¹ diag(λ) F D, by real FFTs along dim 0."""
    d = X.shape[0]
    spec = torch.fft.rfft(X * signs.to(X.dtype)[:, None], dim=0)
    return torch.fft.irfft(spec * lam.to(spec.dtype)[:, None], n=d, dim=0)


def circulant_matrix(signs: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """The dense d×d matrix of the transform (tests only): circ(c) · diag(D), c = F⁻¹ λ."""
    d = signs.shape[0]
    c = torch.fft.irfft(lam, n=d)
    idx = (torch.arange(d)[:, None] - torch.arange(d)[None, :]) % d
    return c[idx] * signs[None, :]


def choose_sketch_size(erank: float, R: int, d: int, factor: float) -> int:
    """s = clip(⌈factor · erank⌉, 2R, d), and s = d (no sampling) when that would keep more than
    d/32 rows [R]: on CPU at d = 4096, R = 128 a 512-row sketch (FFT + sampled Gram) was slower than
    the exact Gram and changed the nonlinear rules' results, so sampling is kept for d ≫ R."""
    s = int(min(d, max(2 * R, math.ceil(factor * erank))))
    return d if s > d // 32 else s


def sketched_gram(X: torch.Tensor, sketch_size: int | str, generator: torch.Generator,
                  factor: float = 16.0) -> tuple[torch.Tensor, int]:
    """Gram Xᵀ X (R × R, float64) of X (d × R) from a shared-circulant sketch of s rows.

    ``sketch_size``: "none" (all d rows: exact up to rounding), "auto" (from the effective rank of
    a 2R-row pilot, see ``choose_sketch_size``), or an int (clipped to d). Returns (G, s).
    Without sampling the transform is skipped: C is orthogonal, so (C X)ᵀ (C X) = Xᵀ X.
    Deterministic for the generator.
    """
    d, R = X.shape
    if sketch_size == "none" or (isinstance(sketch_size, int) and sketch_size >= d) or 2 * R >= d:
        return (X.T @ X).to(torch.float64), d
    if not (sketch_size == "auto" or (isinstance(sketch_size, int) and sketch_size > 0)):
        raise ValueError(f"sketch_size must be 'auto', 'none' or a positive int, got {sketch_size!r}")
    signs, lam = circulant_params(d, generator)
    perm = torch.randperm(d, generator=generator)
    s = sketch_size
    if sketch_size == "auto":
        # the pilot only sizes the sketch: raw rows suffice for that and spare the FFT when the
        # answer is "no sampling"
        s = choose_sketch_size(participation_rank(_sampled_gram(X, perm[:2 * R])), R, d, factor)
        if s >= d:
            return (X.T @ X).to(torch.float64), d
    Y = apply_circulant(X, signs, lam)  # shared transform, O(R d log d), in X's precision
    return _sampled_gram(Y, perm[:s]), s


def _sampled_gram(Y: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Gram of the rescaled sampled rows (in Y's precision, returned as float64)."""
    S = Y[rows] * math.sqrt(Y.shape[0] / rows.numel())
    return (S.T @ S).to(torch.float64)


def whiten(G: torch.Tensor, rtol: float, eps: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """From G = Q Λ Qᵀ keep λ > max(rtol², 10·eps) λ_max, in descending order (Core Space's
    singular-value order); ``eps`` is the machine epsilon of the data the Gram was formed from
    (eigenvalues below ~eps·λ_max are rounding noise). Returns (Q_k, λ_k)."""
    lam, Q = torch.linalg.eigh(G)
    lam, Q = lam.flip(0), Q.flip(1)
    top = lam[0] if lam.numel() and lam[0] > 0 else torch.tensor(1.0, dtype=lam.dtype)
    k = max(1, int((lam > max(rtol ** 2, 10 * eps) * top).sum()))
    return Q[:, :k], lam[:k].clamp(min=torch.finfo(lam.dtype).tiny)


@register_space("circulant")
def circulant_space(As, Bs, *, rule, weights, density, generator, opts: SpaceOptions):
    A_s, B_s = torch.cat(list(As), 0), torch.cat(list(Bs), 1)  # (R × n), (m × R)
    # the sketch draws from its own stream, so the rule (DARE's masks) sees the same randomness
    # as in every other space
    sketch_gen = torch.Generator().manual_seed(generator.initial_seed() ^ 0x5EED5EED)
    G_A, _ = sketched_gram(A_s.T, opts.sketch_size, sketch_gen, opts.sketch_factor)
    G_B, _ = sketched_gram(B_s, opts.sketch_size, sketch_gen, opts.sketch_factor)
    eps = torch.finfo(A_s.dtype).eps
    P, lam_a = whiten(G_A, opts.rank_tol, eps)
    Q, lam_b = whiten(G_B, opts.rank_tol, eps)
    Z_B = lam_b.sqrt()[:, None] * Q.T  # (k_B × R) = Uᵀ B_s
    Z_A = P * lam_a.sqrt()[None, :]  # (R × k_A) = A_s Vᵀ
    mats = torch.stack([Z_B[:, sl] @ Z_A[sl] for sl in rank_blocks(As)]).to(A_s.dtype)
    merged = apply_rule(rule, mats, weights, density=density, generator=generator)
    X_B = (Q / lam_b.sqrt()[None, :]).to(A_s.dtype)  # U = B_s X_B
    Y_A = (P / lam_a.sqrt()[None, :]).T.to(A_s.dtype)  # V = Y_A A_s
    # ΔW* = U M* V = B_s (X_B M* Y_A) A_s: keep the stacked A factors as A*, one m×R×R product
    return A_s, B_s @ (X_B @ merged @ Y_A)

