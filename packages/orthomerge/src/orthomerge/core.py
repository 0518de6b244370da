"""The paper's maths as pure functions (no I/O, no logging, no global state).

Conventions. peft's exact OFT path builds R = (I − Q)(I + Q)⁻¹ ("peft"); its Neumann path
approximates (I + Q)(I − Q)⁻¹ = I + 2Q + 2Q² + … ("paper", the convention of the OrthoMerge
code's decoupling step). The two are transposes of each other; merging in Q-space is
convention-agnostic as long as one convention is used throughout [C].
"""

from __future__ import annotations

import torch

CONVENTIONS = ("peft", "paper")


class RotationError(ValueError):
    """A rotation without a Cayley generator (an eigenvalue at −1: a 180° turn or a reflection)."""


# --- peft packing ---------------------------------------------------------------------------------

def n_params(block: int) -> int:
    """Upper-triangular entries of one b×b skew block: b(b−1)/2."""
    return block * (block - 1) // 2


def block_from_params(n: int) -> int:
    """The block size b with b(b−1)/2 = n (peft stores only n)."""
    b = int(round((1 + (1 + 8 * n) ** 0.5) / 2))
    if n_params(b) != n:
        raise ValueError(f"{n} is not b(b-1)/2 for any block size b")
    return b


def skew_from_vec(vec: torch.Tensor, block: int) -> torch.Tensor:
    """(..., b(b−1)/2) packed upper triangles (peft's ``oft_R.weight``) → (..., b, b) skew."""
    rows, cols = torch.triu_indices(block, block, 1)
    out = torch.zeros(*vec.shape[:-1], block, block, dtype=vec.dtype, device=vec.device)
    out[..., rows, cols] = vec
    return out - out.transpose(-2, -1)


def vec_from_skew(Q: torch.Tensor) -> torch.Tensor:
    """(..., b, b) skew → its packed upper triangle; the input is skew-symmetrised first."""
    b = Q.shape[-1]
    rows, cols = torch.triu_indices(b, b, 1)
    return skew(Q)[..., rows, cols]


def skew(A: torch.Tensor) -> torch.Tensor:
    """(A − Aᵀ)/2."""
    return 0.5 * (A - A.transpose(-2, -1))


# --- Cayley chart -----------------------------------------------------------------------------------

def _eye_like(A: torch.Tensor) -> torch.Tensor:
    return torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand_as(A)


def cayley(Q: torch.Tensor, convention: str = "peft") -> torch.Tensor:
    """Rotation of a skew generator Q (..., n, n): peft (I − Q)(I + Q)⁻¹, paper (I + Q)(I − Q)⁻¹."""
    _check_convention(convention)
    eye = _eye_like(Q)
    if convention == "peft":
        return torch.linalg.solve(eye + Q, eye - Q, left=False)
    return torch.linalg.solve(eye - Q, eye + Q, left=False)


def cayley_neumann(Q: torch.Tensor, terms: int = 5) -> torch.Tensor:
    """peft's truncated Neumann series I + 2Q + 2Q² + … + Qᵏ (k = terms − 1) of (I + Q)(I − Q)⁻¹."""
    R = _eye_like(Q).clone()
    if terms > 1:
        R = R + 2 * Q
        if terms > 2:
            power = Q @ Q
            R = R + 2 * power
            for _ in range(3, terms - 1):
                power = power @ Q
                R = R + 2 * power
            R = R + power @ Q
    return R


def inverse_cayley(R: torch.Tensor, convention: str = "peft", tol: float = 1e-6) -> torch.Tensor:
    """Skew generator of a rotation: peft (I + R)⁻¹(I − R), paper (R + I)⁻¹(R − I), skew-symmetrised.

    Raises ``RotationError`` when R has an eigenvalue at −1 (numerically), instead of returning a
    huge or NaN generator. The guard reads the solve itself: for an orthogonal R whose largest
    principal angle is θ, ‖A‖₂ = tan(θ/2) = 2 sin(θ/2)/σ_min(I + R), so σ_min(I + R) < ``tol``
    shows as ‖A‖_F > 2/``tol`` (no extra SVD: the Frobenius norm bounds the spectral one).
    """
    _check_convention(convention)
    eye = _eye_like(R)
    num = eye - R if convention == "peft" else R - eye
    A = None
    if bool(torch.isfinite(R).all()):
        try:
            A = torch.linalg.solve(eye + R, num)
        except RuntimeError:  # torch.linalg.LinAlgError: I + R exactly singular
            A = None
    norm = float(torch.linalg.matrix_norm(A).max()) if A is not None else float("inf")
    if not norm <= 2.0 / tol:  # inf and NaN too
        raise RotationError(f"rotation has an eigenvalue at -1 (Cayley generator norm {norm:.2e}, "
                            f"tan of half its largest angle): no Cayley generator (180° turn or reflection)")
    return skew(A)


def _check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown Cayley convention {convention!r} (choose one of {CONVENTIONS})")


# --- the merge in the Lie algebra --------------------------------------------------------------------

def _magnitude(theta: torch.Tensor, w: torch.Tensor, how: str) -> torch.Tensor:
    if how == "mean":
        return (w.view(-1, *[1] * (theta.dim() - 1)) * theta).sum(0) / w.sum()
    if how == "median":
        return theta.median(0).values if theta.shape[0] % 2 else theta.quantile(0.5, dim=0)
    if how == "max":
        return theta.max(0).values
    raise ValueError(f"unknown magnitude {how!r}")


def merge_skew(Qs: torch.Tensor, weights=None, *, magnitude: str = "mean", granularity: str = "module",
               direction: str = "theta", scale: float = 1.0) -> torch.Tensor:
    """Magnitude-corrected merge of T skew generators Qs (T, nb, b, b) → Q* (nb, b, b) [C].

    θ_i = ‖Q_i‖_F over all nb blocks (``module``) or per block (``block``); direction
    u ∝ Σ_i w_i Q_i (``theta``) or Σ_i w_i Q_i/θ_i (``uniform``); Q* = scale · θ* · u with θ* the
    (weighted) mean, median or max of θ_i; re-skew-symmetrised. With unit weights and ``mean``:
    Q* = (1/T)(Σ‖Q_i‖/‖ΣQ_i‖) ΣQ_i.
    """
    T = Qs.shape[0]
    w = torch.ones(T, dtype=Qs.dtype, device=Qs.device) if weights is None else \
        torch.as_tensor(weights, dtype=Qs.dtype, device=Qs.device)
    dims = (1, 2, 3) if granularity == "module" else (2, 3)
    if granularity not in ("module", "block"):
        raise ValueError(f"unknown granularity {granularity!r}")
    theta = torch.linalg.vector_norm(Qs, dim=dims, keepdim=True)  # (T, 1|nb, 1, 1)
    wv = w.view(T, 1, 1, 1)
    if direction == "theta":
        s = (wv * Qs).sum(0)
    elif direction == "uniform":
        s = (wv * Qs / theta.clamp_min(torch.finfo(Qs.dtype).tiny)).sum(0)
    else:
        raise ValueError(f"unknown direction {direction!r}")
    s_norm = torch.linalg.vector_norm(s, dim=tuple(d - 1 for d in dims), keepdim=True)
    unit = torch.where(s_norm > 0, s / s_norm.clamp_min(torch.finfo(Qs.dtype).tiny), torch.zeros_like(s))
    return skew(scale * _magnitude(theta, w, magnitude) * unit)


def average_skew(Qs: torch.Tensor, weights=None, scale: float = 1.0) -> torch.Tensor:
    """Plain weighted mean of the generators: the merge without magnitude correction."""
    T = Qs.shape[0]
    w = torch.ones(T, dtype=Qs.dtype) if weights is None else torch.as_tensor(weights, dtype=Qs.dtype)
    return scale * (w.view(T, *[1] * (Qs.dim() - 1)) * Qs).sum(0) / w.sum()


def block_diag(R: torch.Tensor, in_features: int | None = None) -> torch.Tensor:
    """(nb, b, b) blocks → the (nb·b)² block-diagonal matrix (a shared block repeated to in_features)."""
    nb, b, _ = R.shape
    if in_features is not None and nb * b != in_features:
        if nb != 1 or in_features % b:
            raise ValueError(f"{nb} blocks of {b} do not cover {in_features} inputs")
        R = R.expand(in_features // b, b, b)
    return torch.block_diag(*R.unbind(0))


# --- Orthogonal-Residual Decoupling -------------------------------------------------------------------

def procrustes_right(W0: torch.Tensor, T: torch.Tensor, proper: bool = False) -> torch.Tensor:
    """argmin over orthogonal R of ‖W0·R − T‖_F = U Vᵀ with U Σ Vᵀ = svd(W0ᵀ T) (n×n) [C].

    ``proper``: the minimiser over rotations (det +1, Kabsch's sign fix on the weakest singular
    pair) [R]. A reflection has an eigenvalue at −1 and so no Cayley generator; it arises when a
    fine-tune flips W0 along a direction where W0 is nearly singular.
    """
    U, _, Vh = torch.linalg.svd(W0.T @ T)
    if proper and float(torch.linalg.det(U @ Vh)) < 0:
        U = U.clone()
        U[:, -1] = -U[:, -1]
    return U @ Vh


def conflict_targets(W0: torch.Tensor, Ws: list[torch.Tensor]) -> list[torch.Tensor]:
    """OrthoMerge-C targets T_i = W0 + Δ_i ⊙ mask_i: keep the output rows whose delta has negative
    cosine similarity with the mean delta over tasks (threshold 0) [C]."""
    deltas = torch.stack([W - W0 for W in Ws])
    mean = deltas.mean(0, keepdim=True)
    cos = torch.nn.functional.cosine_similarity(deltas, mean.expand_as(deltas), dim=-1)  # (T, m)
    return [W0 + d * (c < 0).unsqueeze(-1).to(d.dtype) for d, c in zip(deltas, cos, strict=True)]


def decouple(W0: torch.Tensor, Ws: list[torch.Tensor], ortho: str = "general",
             *, magnitude: str = "mean", rotation_scale: float = 1.0):
    """Rotations and residuals of T experts: returns (R* (n×n), [E_i = W_i − W0·R_i]).

    ``general``: T_i = W_i; ``conflict``: ``conflict_targets``; ``none``: R_i = R* = I, E_i = Δ_i.
    R_i by ``procrustes_right`` (proper rotations [R]), A_i = inverse Cayley (paper convention, guarded), A* by
    ``merge_skew`` with the module as one block, R* = Cayley(A*) [C].
    """
    n = W0.shape[1]
    eye = torch.eye(n, dtype=W0.dtype, device=W0.device)
    if ortho == "none":
        return eye, [W - W0 for W in Ws]
    if ortho == "general":
        targets = Ws
    elif ortho == "conflict":
        targets = conflict_targets(W0, Ws)
    else:
        raise ValueError(f"unknown ortho target {ortho!r}")
    Rs = [procrustes_right(W0, T, proper=True) for T in targets]
    A = torch.stack([inverse_cayley(R, "paper") for R in Rs]).unsqueeze(1)  # (T, 1, n, n)
    A_star = merge_skew(A, magnitude=magnitude, scale=rotation_scale)[0]
    R_star = cayley(A_star, "paper")
    return R_star, [W - W0 @ R for W, R in zip(Ws, Rs, strict=True)]


# --- geometry ---------------------------------------------------------------------------------------

def hyperspherical_energy(W: torch.Tensor, eps: float = 1e-12) -> float:
    """Σ_{i≠j} 1/‖ŵ_i − ŵ_j‖ over the unit-normalised neuron rows of W (m × n) (OFT's energy)."""
    Wn = W / torch.linalg.vector_norm(W, dim=1, keepdim=True).clamp_min(eps)
    d2 = (2 - 2 * (Wn @ Wn.T)).clamp_min(eps)
    off = ~torch.eye(W.shape[0], dtype=torch.bool, device=W.device)
    return float((d2[off].sqrt().reciprocal()).sum())


def spectral_norm(W: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(W, ord=2))


def orthogonality_error(R: torch.Tensor) -> float:
    """max over blocks of ‖RᵀR − I‖_F (R: (..., n, n))."""
    eye = _eye_like(R)
    return float(torch.linalg.matrix_norm(R.transpose(-2, -1) @ R - eye).max())


def rotation_angles(R: torch.Tensor) -> torch.Tensor:
    """Principal rotation angles (radians, in [0, π]) of one orthogonal n×n matrix."""
    return torch.linalg.eigvals(R).angle().abs()
