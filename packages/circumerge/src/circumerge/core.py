"""CircuMerge: merging LoRA adapters through a shared circulant sketch — a RECONSTRUCTION [R].

Only the abstract of the paper is public [P]: adapters stay factored, one shared circulant
transform puts all tasks in one coordinate system so that coordinates can be sampled uniformly,
compact sketches of the cross-task interactions are merged, and a standard LoRA is rebuilt; merge
quality rises with the effective rank. What follows is our reading, built on Core Space [C]:

1. C_d = F⁻¹ diag(λ) F D with |λ_k| = 1 (conjugate-symmetric, so C_d is real orthogonal) and D
   random signs, seeded and shared by every task; applied by FFT (``torch.fft``) in O(d log d)
   per column, to every task's factors at once (the stacked factor).
2. Sketch S = √(d/s) P_Ω C_d X of a stacked factor X (d × R) by uniform sampling of s rows;
   G = Sᵀ S ≈ Xᵀ X (exact when s = d, since C_d is orthogonal). ``auto`` picks s from the stacked
   rank R and a target distortion ε: s = ⌈R / ε²⌉ clipped to [2R, d] (the Marchenko–Pastur width
   of a uniform sketch of an incoherent R-column basis is ≈ √(R/s)). It never switches the
   transform off: without sampling (s = d) the transform still runs.
3. Whitening from the (sketched) Grams: G_A = P Λ_A Pᵀ ≈ A_s A_sᵀ and G_B = Q Λ_B Qᵀ ≈ B_sᵀ B_s
   give bases V = Λ_A^{-1/2} Pᵀ A_s and U = B_s Q Λ_B^{-1/2} (orthonormal when the Grams are exact).
4. Each task's coordinates in these bases are R×R: M_t = (Λ_B^{1/2} Qᵀ)[:, t] (P Λ_A^{1/2})[t, :]
   (Core Space's Uᵀ B_t A_t Vᵀ when the Grams are exact); ΔW_t = U M_t V holds for any sketch,
   so task arithmetic is exact at every sketch size; nonlinear rules see a near-orthonormal basis.
5. M* = rule(M_1 … M_T) on R×R matrices (float64); lift without an m×n matrix:
   ΔW* = B_s K A_s with K = Q Λ_B^{-1/2} M* Λ_A^{-1/2} Pᵀ, K folded into the cheaper factor.

Numerics: every Gram is accumulated in float64 from the factors' own dtype (a float32 Gram drops
singular values below ≈1e-3·σ_max: shared-init adapters then drift by >100 %), the no-sampling
transform runs in float64, the sampled one in the factors' dtype (its rounding is far below the
sketch's own distortion).

Pure functions: no I/O, no global state; randomness only from the given generator.
"""

from __future__ import annotations

import math

import torch

from .gram import gram64, merge_from_grams
from .spaces import SpaceOptions, register_space


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
    """C X for X (d × R), C = F⁻¹ diag(λ) F D, by real FFTs along dim 0, in X's precision."""
    d = X.shape[0]
    spec = torch.fft.rfft(X * signs.to(X.device, X.dtype)[:, None], dim=0)
    return torch.fft.irfft(spec * lam.to(spec.device, spec.dtype)[:, None], n=d, dim=0)


def circulant_matrix(signs: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """The dense d×d matrix of the transform (tests only): circ(c) · diag(D), c = F⁻¹ λ."""
    d = signs.shape[0]
    c = torch.fft.irfft(lam, n=d)
    idx = (torch.arange(d)[:, None] - torch.arange(d)[None, :]) % d
    return c[idx] * signs[None, :]


def choose_sketch_size(R: int, d: int, target: float) -> int:
    """s = clip(⌈R / ε²⌉, 2R, d) for a target Gram distortion ε [R]: a uniform sample of s rows of
    an incoherent d × R basis has singular values within ≈ 1 ± √(R/s). Depends only on the stacked
    rank and the target, never on which benchmark is running; s = d means "no sampling pays for
    this ε" (the transform still runs)."""
    if not 0.0 < target < 1.0:
        raise ValueError(f"sketch target error must be in (0, 1), got {target}")
    return int(min(d, max(2 * R, math.ceil(R / target ** 2))))


def sketched_gram(X: torch.Tensor, sketch_size: int | str, generator: torch.Generator,
                  target: float = 0.25, *, transform: bool = True) -> tuple[torch.Tensor, int]:
    """Gram Xᵀ X (R × R, float64) of X (d × R) from the shared-circulant sketch of s rows.

    ``sketch_size``: "none" (transform, all d rows: exact up to float64 rounding), "auto"
    (``choose_sketch_size(R, d, target)``) or an int (clipped to d). Returns (G, s). The
    transform always runs; deterministic for the generator. ``transform=False`` is the mechanism
    ablation (the same rows sampled and rescaled, no transform), never a merge space.
    """
    d, R = X.shape
    if sketch_size == "auto":
        s = choose_sketch_size(R, d, target)
    elif sketch_size == "none":
        s = d
    elif isinstance(sketch_size, int) and not isinstance(sketch_size, bool) and sketch_size > 0:
        s = min(int(sketch_size), d)
    else:
        raise ValueError(f"sketch_size must be 'auto', 'none' or a positive int, got {sketch_size!r}")
    signs, lam = circulant_params(d, generator)
    if s >= d:  # no sampling: the orthogonal transform in float64, then the full Gram
        return gram64(apply_circulant(X.to(torch.float64), signs, lam)), d
    rows = torch.randperm(d, generator=generator)[:s].to(X.device)
    Y = apply_circulant(X, signs, lam) if transform else X  # shared transform, O(R d log d)
    S = Y[rows].to(torch.float64) * math.sqrt(d / s)
    return S.T @ S, s


@register_space("circulant")
def circulant_space(As, Bs, *, rule, weights, density, generator, opts: SpaceOptions):
    A_s, B_s = torch.cat(list(As), 0), torch.cat(list(Bs), 1)
    # the sketch draws from its own stream, so the rule (DARE's masks) sees the same randomness
    # as in every other space; one transform per dimension, shared by every task
    sketch_gen = torch.Generator().manual_seed(generator.initial_seed() ^ 0x5EED5EED)
    G_A, _ = sketched_gram(A_s.T, opts.sketch_size, sketch_gen, opts.sketch_target)
    G_B, _ = sketched_gram(B_s, opts.sketch_size, sketch_gen, opts.sketch_target)
    return merge_from_grams(As, Bs, G_A, G_B, rule=rule, weights=weights, density=density,
                            generator=generator, rank_tol=opts.rank_tol)


def sampled_merge(As, Bs, *, rule: str, sketch_size: int | str, seed: int = 0, transform: bool = True,
                  weights=None, density: float | None = None, sketch_target: float = 0.25,
                  rank_tol: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer merged from sketched Grams, with (``transform=True``: ``merge_layer(...,
    space="circulant")``'s maths for layer 0) or without the shared transform (the ablation
    that isolates it: same rows, same rescaling). Float64 factors in, float64 out."""
    from .spaces import layer_generator

    As, Bs = [a.double() for a in As], [b.double() for b in Bs]
    gen = layer_generator(seed, 0)
    sketch_gen = torch.Generator().manual_seed(gen.initial_seed() ^ 0x5EED5EED)
    A_s, B_s = torch.cat(As, 0), torch.cat(Bs, 1)
    G_A, _ = sketched_gram(A_s.T, sketch_size, sketch_gen, sketch_target, transform=transform)
    G_B, _ = sketched_gram(B_s, sketch_size, sketch_gen, sketch_target, transform=transform)
    w = torch.ones(len(As), dtype=torch.float64) if weights is None else torch.as_tensor(weights).double()
    return merge_from_grams(As, Bs, G_A, G_B, rule=rule, weights=w, density=density, generator=gen,
                            rank_tol=rank_tol)


def sketch_sizes(As, Bs, opts: SpaceOptions) -> tuple[int, int]:
    """The (s_A, s_B) the circulant space uses for these factors (reports and tests)."""
    R, n, m = sum(a.shape[0] for a in As), As[0].shape[1], Bs[0].shape[0]

    def one(d: int) -> int:
        if opts.sketch_size == "auto":
            return choose_sketch_size(R, d, opts.sketch_target)
        return d if opts.sketch_size == "none" else min(int(opts.sketch_size), d)

    return one(n), one(m)
