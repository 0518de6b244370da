"""The paper's maths: the four probe views, per-sample standardisation, the MVProbe encoder and the
checks of Theorems 1 and 3. Pure functions and one ``nn.Module``; no I/O, logging or global state.

A layer is X ∈ R^{d_H×d_W} (one matrix, or a batch ``[B, d_H, d_W]``). With r probes per branch:

- ``xu``   S₁ = X U,        U ∈ R^{d_W×r} → [d_H, r]   (ProbeX's only view)
- ``xtu``  S₂ = Xᵀ V,       V ∈ R^{d_H×r} → [d_W, r]
- ``xxtu`` S₃ = X (Xᵀ W),   W ∈ R^{d_H×r} → [d_H, r]   (the row Gram X Xᵀ, never formed)
- ``xtxu`` S₄ = Xᵀ (X Z),   Z ∈ R^{d_W×r} → [d_W, r]   (the column Gram Xᵀ X, never formed)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .config import BRANCHES

#: which axis of X a branch's responses live on ("rows" = d_H points, "cols" = d_W points), and
#: which dimension its probe matrix multiplies
POINTS = {"xu": "rows", "xxtu": "rows", "xtu": "cols", "xtxu": "cols"}
PROBE_DIM = {"xu": "cols", "xxtu": "rows", "xtu": "rows", "xtxu": "cols"}


def branch_response(X: torch.Tensor, P: torch.Tensor, branch: str) -> torch.Tensor:
    """One raw view of a batch ``X [B, d_H, d_W]`` with probes ``P``; computed right to left."""
    Xt = X.transpose(-1, -2)
    if branch == "xu":
        return X @ P
    if branch == "xtu":
        return Xt @ P
    if branch == "xxtu":
        return X @ (Xt @ P)
    if branch == "xtxu":
        return Xt @ (X @ P)
    raise ValueError(f"unknown branch {branch!r} (choose from {', '.join(BRANCHES)})")


def standardize(S: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Per-sample standardisation over all entries of each sample's ``[N, r]`` block: mean 0 and
    (population) std 1, so that ‖S̃‖² = N·r whatever the branch's scale (Thm 3)."""
    mean = S.mean(dim=(-2, -1), keepdim=True)
    std = S.std(dim=(-2, -1), keepdim=True, correction=0)
    return (S - mean) / (std + eps)


def _batched(X: torch.Tensor) -> tuple[torch.Tensor, bool]:
    if X.dim() == 2:
        return X.unsqueeze(0), True
    if X.dim() != 3:
        raise ValueError(f"X must be [d_H, d_W] or [B, d_H, d_W], got shape {tuple(X.shape)}")
    return X, False


class MVProbe(nn.Module):
    """The multi-view probe encoder and its heads.

    ``encode(X)`` → the representation ``[B, rep_dim]``; ``forward(X)`` → logits of the
    multi-label / multi-class head (``n_outputs``); ``zeroshot_logits(X, text)`` → cosine logits
    against linearly projected text embeddings (``text_dim``). ``branches=("xu",)`` with
    ``standardize=False`` is exactly ProbeX's forward pass.
    """

    def __init__(self, shape: Sequence[int], branches: Sequence[str] = BRANCHES,
                 standardize: bool = True, n_probes: int = 128, proj_dim: int = 128,
                 rep_dim: int = 512, n_outputs: int | None = None, text_dim: int | None = None,
                 eps: float = 1e-8, x_center: bool = False, x_row_norm: bool = False):
        super().__init__()
        from .config import ProbeConfig

        self.config = ProbeConfig(n_probes=n_probes, proj_dim=proj_dim, rep_dim=rep_dim,
                                  branches=tuple(branches), standardize=standardize, eps=eps,
                                  x_center=x_center, x_row_norm=x_row_norm)
        d_H, d_W = (int(s) for s in shape)
        self.shape = (d_H, d_W)
        self.branches = tuple(branches)
        dims = {"rows": d_H, "cols": d_W}
        self.probes = nn.ParameterDict({b: nn.Parameter(torch.empty(dims[PROBE_DIM[b]], n_probes))
                                        for b in self.branches})
        self.reset_probes()
        self.proj = nn.ModuleDict({b: nn.Linear(dims[POINTS[b]], proj_dim, bias=False)
                                   for b in self.branches})
        self.encoder = nn.Linear(len(self.branches) * n_probes * proj_dim, rep_dim)
        self.head = nn.Linear(rep_dim, n_outputs) if n_outputs else None
        self.text_proj = nn.Linear(text_dim, rep_dim) if text_dim else None

    def reset_probes(self) -> None:
        """[C] the probes are ``nn.Linear(n_probes, d).weight``: uniform ±1/√r."""
        bound = 1.0 / math.sqrt(self.config.n_probes)
        with torch.no_grad():
            for p in self.probes.values():
                p.uniform_(-bound, bound)

    def _views(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The matrices the row branches and the column branches read (both X by default; the
        optional centring / row normalisation [C] treats rows and columns as separate clouds)."""
        cfg = self.config
        if not (cfg.x_center or cfg.x_row_norm):
            return X, X

        def prep(Y: torch.Tensor) -> torch.Tensor:
            if cfg.x_center:
                Y = Y - Y.mean(dim=-2, keepdim=True)
            if cfg.x_row_norm:
                Y = F.normalize(Y, dim=-1, eps=cfg.eps)
            return Y

        return prep(X), prep(X.transpose(-1, -2)).transpose(-1, -2)

    def branch_outputs(self, X: torch.Tensor, standardized: bool = True) -> dict[str, torch.Tensor]:
        """S₁…S₄ keyed by branch (``[d_H, r]`` or ``[d_W, r]``, with a leading batch dim when X
        has one); ``standardized`` applies the per-sample standardisation."""
        Xb, single = _batched(X)
        if tuple(Xb.shape[1:]) != self.shape:
            raise ValueError(f"X has shape {tuple(Xb.shape[1:])}, this probe expects {self.shape}")
        rows, cols = self._views(Xb)
        out = {}
        for b in self.branches:
            S = branch_response(rows if POINTS[b] == "rows" else cols, self.probes[b], b)
            if standardized:
                S = standardize(S, self.config.eps)
            out[b] = S[0] if single else S
        return out

    def encode(self, X: torch.Tensor, keep: Sequence[str] | None = None) -> torch.Tensor:
        """The fused representation ``[B, rep_dim]`` (``[rep_dim]`` for one matrix). ``keep``
        zero-masks every other branch's features (the authors' ablation flags do the same), so
        ``keep=FIRST_ORDER`` is the first-order-only reading of the same trained probe."""
        Xb, single = _batched(X)
        views = self.branch_outputs(Xb, standardized=self.config.standardize)
        feats = []
        for b in self.branches:
            h = torch.relu(self.proj[b](views[b].transpose(-1, -2)))  # [B, r, proj_dim]
            if keep is not None and b not in keep:
                h = torch.zeros_like(h)
            feats.append(h.flatten(1))
        rep = self.encoder(torch.cat(feats, dim=-1))
        return rep[0] if single else rep

    def forward(self, X: torch.Tensor, keep: Sequence[str] | None = None) -> torch.Tensor:
        if self.head is None:
            raise ValueError("this probe has no classification head (n_outputs=None)")
        return self.head(self.encode(X, keep))

    def zeroshot_logits(self, X: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Cosine logits ``[B, K]`` of the representations against ``text [K, text_dim]``."""
        if self.text_proj is None:
            raise ValueError("this probe has no text projection (text_dim=None)")
        rep = F.normalize(self.encode(X), dim=-1)
        return rep @ F.normalize(self.text_proj(text), dim=-1).T


def branch_norm_report(model: MVProbe, X: torch.Tensor) -> dict[str, dict[str, float]]:
    """Mean squared Frobenius norm per sample of each branch, raw and standardised: the scale
    imbalance of Thm 3 and what standardisation does to it."""
    with torch.no_grad():
        raw = model.branch_outputs(X, standardized=False)
        std = model.branch_outputs(X, standardized=True)
    return {b: {"raw_sq_norm": float(raw[b].pow(2).sum(dim=(-2, -1)).mean()),
                "std_sq_norm": float(std[b].pow(2).sum(dim=(-2, -1)).mean()),
                "entries": int(raw[b].shape[-2] * raw[b].shape[-1])} for b in raw}


# --- theory ------------------------------------------------------------------------------------

def theorem3_ratio(n: int, m: int, sigma: float) -> float:
    """Thm 3: for X ∈ R^{n×m} with i.i.d. N(0, σ²) entries and probes of equal norm,
    E‖Xᵀ(X Z)‖² / E‖Xᵀ V‖² = n (n + m + 1) σ² / m."""
    return n * (n + m + 1) * sigma**2 / m


def theorem3_monte_carlo(n: int, m: int, sigma: float, trials: int = 4000, r: int = 8,
                         seed: int = 0) -> float:
    """Seeded Monte-Carlo estimate of the Thm 3 ratio through the package's own branch code:
    mean ‖S_xtxu‖² over mean ‖S_xtu‖², probes V [n, r] and Z [m, r] of equal Frobenius norm."""
    g = torch.Generator().manual_seed(seed)
    V = torch.randn(n, r, generator=g, dtype=torch.float64)
    Z = torch.randn(m, r, generator=g, dtype=torch.float64)
    V, Z = V / V.norm(), Z / Z.norm()
    num = den = 0.0
    for start in range(0, trials, 500):
        b = min(500, trials - start)
        X = sigma * torch.randn(b, n, m, generator=g, dtype=torch.float64)
        num += float(branch_response(X, Z, "xtxu").pow(2).sum())
        den += float(branch_response(X, V, "xtu").pow(2).sum())
    return num / den


def theorem1_pair(U: torch.Tensor, X1: torch.Tensor | None = None,
                  seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Thm 1's construction: for U [m, r] of rank r < m, X₂ = X₁ + N with N U = 0 (N's rows in
    the orthogonal complement of U's column space), so X₁U = X₂U while (X₂ᵀX₂)U differs."""
    m, r = U.shape
    if r >= m:
        raise ValueError(f"Thm 1 needs rank(U) = r < m, got U of shape {tuple(U.shape)}")
    g = torch.Generator().manual_seed(seed)
    if X1 is None:
        X1 = torch.randn(m + 1, m, generator=g, dtype=U.dtype)
    proj_perp = torch.eye(m, dtype=U.dtype) - U @ torch.linalg.pinv(U)
    N = torch.randn(X1.shape[0], m, generator=g, dtype=U.dtype) @ proj_perp
    return X1, X1 + N


def _complement(A: torch.Tensor) -> torch.Tensor:
    """Projector onto the orthogonal complement of A's column space."""
    Q, _ = torch.linalg.qr(A)
    return torch.eye(A.shape[0], dtype=A.dtype) - Q @ Q.T


def theorem1_collision(model: MVProbe, X1: torch.Tensor, seed: int = 0,
                       scale: float = 1.0) -> torch.Tensor:
    """Thm 1 against a whole MVProbe: X₂ = X₁ + N whose every first-order response collides with
    X₁'s for all four probe sets — N U = N Z = 0 and Nᵀ V = Nᵀ W = 0 (U, Z ∈ R^{d_W×r} multiply X,
    V, W ∈ R^{d_H×r} multiply Xᵀ) — while the Gram views X Xᵀ W and Xᵀ X Z move. N = P_H G P_W
    with P the projectors onto the complements of [V W] and [U Z]; needs 2r < min(d_H, d_W).
    ``scale`` sets ‖N‖_F relative to ‖X₁‖_F."""
    d_H, d_W = model.shape
    r = model.config.n_probes
    if set(model.branches) != set(("xu", "xtu", "xxtu", "xtxu")):
        raise ValueError("the Thm 1 check needs all four branches")
    if 2 * r >= min(d_H, d_W):
        raise ValueError(f"Thm 1's collision needs 2r < min(d_H, d_W): r = {r}, layer {d_H}×{d_W}")
    P = {b: p.detach().double() for b, p in model.probes.items()}
    right = _complement(torch.cat([P["xu"], P["xtxu"]], 1))   # d_W×d_W, kills U and Z
    left = _complement(torch.cat([P["xtu"], P["xxtu"]], 1))   # d_H×d_H, kills V and W
    g = torch.Generator().manual_seed(seed)
    N = left @ torch.randn(d_H, d_W, generator=g, dtype=torch.float64) @ right
    X1 = X1.double()
    N = N * (scale * X1.norm() / N.norm())
    return (X1 + N).to(model.probes["xu"].dtype)


def theorem1_gaps(model: MVProbe, X1: torch.Tensor, seed: int = 0) -> dict[str, float]:
    """Max logit gap between X₁ and its Thm 1 collision X₂, for the full probe and for the same
    trained probe read through its first-order views only (≈ 0 by construction), and the largest
    first-order response difference (rounding)."""
    from .config import FIRST_ORDER

    X2 = theorem1_collision(model, X1, seed)
    X1 = X1.to(X2.dtype)
    with torch.no_grad():
        full = float((model(X1[None]) - model(X2[None])).abs().max())
        first = float((model(X1[None], keep=FIRST_ORDER) - model(X2[None], keep=FIRST_ORDER)).abs().max())
        raw1 = model.branch_outputs(X1, standardized=False)
        raw2 = model.branch_outputs(X2, standardized=False)
    resp = max(float((raw1[b] - raw2[b]).abs().max() / raw1[b].abs().max()) for b in FIRST_ORDER)
    gram = min(float((raw1[b] - raw2[b]).abs().max() / raw1[b].abs().max()) for b in ("xxtu", "xtxu"))
    return {"mvprobe_logit_gap": full, "first_order_logit_gap": first,
            "first_order_response_gap_rel": resp, "gram_response_gap_rel": gram}
