"""FiGuRO's maths: the rank-masked truncated-SVD layer, the shared/private autoencoder, the rank
controller (a pure state machine) and the known-truth simulator. No I/O, no logging.

Everything below the abstract's one sentence ("truncated SVD of low-rank projections; a rule
deciding when to reduce or increase and in which latent space") is reconstructed [R].
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

SHARED = "shared"


class LowRankLinear(nn.Module):
    """y = x Wᵀ with W = U diag(σ ⊙ mask) Vᵀ held at rank ``rank`` [P] (truncated SVD).

    ``truncate(k)`` re-factorises the kept block by SVD (the function is unchanged), then keeps its
    top k directions: the best rank-k approximation (Eckart–Young). Masked directions keep their
    values, so raising the rank back restores the matrix; they receive zero gradient.
    """

    def __init__(self, in_features: int, out_features: int, rank: int | None = None,
                 weight: torch.Tensor | None = None):
        super().__init__()
        r = min(in_features, out_features)
        w = weight if weight is not None else torch.eye(out_features, in_features) \
            + 0.01 * torch.randn(out_features, in_features)
        u, s, vh = torch.linalg.svd(w.float(), full_matrices=False)
        self.U = nn.Parameter(u.contiguous())
        self.S = nn.Parameter(s.contiguous())
        self.V = nn.Parameter(vh.T.contiguous())
        self.register_buffer("mask", torch.ones(r))
        self.max_rank = r
        self.rank = r
        if rank is not None:
            self.truncate(rank)

    @property
    def weight(self) -> torch.Tensor:
        return (self.U * (self.S * self.mask)) @ self.V.T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x @ self.V) * (self.S * self.mask)) @ self.U.T

    @torch.no_grad()
    def resvd(self) -> None:
        """Re-orthonormalise the kept block (U_k σ_k V_kᵀ → its exact SVD); function unchanged."""
        k = self.rank
        if k == 0:
            return
        w = (self.U[:, :k] * self.S[:k]) @ self.V[:, :k].T
        u, s, vh = torch.linalg.svd(w, full_matrices=False)
        self.U[:, :k] = u[:, :k]
        self.S[:k] = s[:k]
        self.V[:, :k] = vh[:k].T

    @torch.no_grad()
    def truncate(self, k: int) -> None:
        """Set the rank to k: lowering keeps the top-k SVD directions of the kept block; raising
        unmasks the directions dropped earlier (their values were kept)."""
        if not 0 <= k <= self.max_rank:
            raise ValueError(f"rank {k} outside [0, {self.max_rank}]")
        if k < self.rank:
            self.resvd()
        self.mask.zero_()
        self.mask[:k] = 1.0
        self.rank = k

    @torch.no_grad()
    def spectrum(self) -> torch.Tensor:
        """Singular values of the current (masked) weight, descending."""
        return torch.linalg.svdvals(self.weight)


def _mlp(d_in: int, hidden: int, d_out: int, depth: int = 1) -> nn.Sequential:
    """``depth`` hidden GELU layers of width ``hidden``."""
    layers, d = [], d_in
    for _ in range(depth):
        layers += [nn.Linear(d, hidden), nn.GELU()]
        d = hidden
    return nn.Sequential(*layers, nn.Linear(d, d_out))


class SharedPrivateAE(nn.Module):
    """Per-modality encoders into R^L, shared projections S_m (one shared rank k_s) and private
    projections P_m (rank k_m); shared code s = mean_m S_m h_m; decoders D_m([s, P_m h_m]) [S/R].
    With one modality and ``shared=False`` it is a single-latent rank-reduction autoencoder."""

    def __init__(self, dims: list[int], latent: int, hidden: int, shared: bool = True,
                 depth: int = 1):
        super().__init__()
        self.M, self.L, self.has_shared = len(dims), latent, shared
        self.enc = nn.ModuleList(_mlp(d, hidden, latent, depth) for d in dims)
        self.priv = nn.ModuleList(LowRankLinear(latent, latent) for _ in dims)
        self.shr = nn.ModuleList(LowRankLinear(latent, latent) for _ in dims) if shared else None
        width = 2 * latent if shared else latent
        self.dec = nn.ModuleList(_mlp(width, hidden, d, depth) for d in dims)

    def spaces(self) -> list[str]:
        return ([SHARED] if self.has_shared else []) + [f"private{m}" for m in range(self.M)]

    def layers(self, space: str) -> list[LowRankLinear]:
        if space == SHARED:
            return list(self.shr)
        return [self.priv[int(space.removeprefix("private"))]]

    def ranks(self) -> dict[str, int]:
        return {sp: self.layers(sp)[0].rank for sp in self.spaces()}

    def set_ranks(self, ranks: dict[str, int]) -> None:
        for sp, k in ranks.items():
            for layer in self.layers(sp):
                layer.truncate(k)

    def codes(self, xs: list[torch.Tensor]) -> tuple[list[torch.Tensor] | None, list[torch.Tensor]]:
        h = [e(x) for e, x in zip(self.enc, xs)]
        p = [pm(hm) for pm, hm in zip(self.priv, h)]
        s = [sm(hm) for sm, hm in zip(self.shr, h)] if self.has_shared else None
        return s, p

    def losses(self, xs: list[torch.Tensor], cross: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-modality (own, cross) reconstruction MSE. Own: x_m from [mean_m s_m, p_m]; cross:
        x_m from [mean of the other modalities' s, p_m] (0 without a shared space or M = 1)."""
        s, p = self.codes(xs)
        own, crs = [], []
        for m, x in enumerate(xs):
            if s is None:
                own.append(((self.dec[m](p[m]) - x) ** 2).mean())
                crs.append(torch.zeros((), device=x.device))
                continue
            s_all = torch.stack(s).mean(0)
            own.append(((self.dec[m](torch.cat([s_all, p[m]], 1)) - x) ** 2).mean())
            if cross and self.M > 1:
                s_oth = torch.stack([s[j] for j in range(self.M) if j != m]).mean(0)
                crs.append(((self.dec[m](torch.cat([s_oth, p[m]], 1)) - x) ** 2).mean())
            else:
                crs.append(torch.zeros((), device=x.device))
        return torch.stack(own), torch.stack(crs)


# --- the rank controller -------------------------------------------------------------------------

@dataclass
class RankController:
    """The fidelity-guided rank search as a pure state machine [S/R].

    ``proposals()`` lists the candidate reductions (space, new rank): rank − 1 and the jumps
    rank − ⌈rank/2⌉, rank − ⌈rank/4⌉, ... ; ``step(D, candidates)`` takes the current
    per-modality distortions D_m and the distortions measured after each proposed truncation,
    and returns the next ranks. Fidelity holds when D_m <= D*_m + λ·s_m for all m, with s_m the
    ``scale`` (default D*_m: the relative rule D_m <= (1 + λ)·D*_m; the estimator passes the
    held-out distortion of the zero code, so λ is a fraction of the data's variance):
      - holds → reduce. Order (parsimony, private before shared): the private space whose −1
        truncation loses least (ties: larger rank), the shared space only once every private move
        has been rejected. The new rank is the lowest proposed one whose truncation keeps
        fidelity, else rank − 1 (then judged after ``update_every`` steps of training);
      - violated just after a reduction → revert it (ranks back to their previous values) and
        reject that move (space, rank) for good;
      - violated at an accepted state at ``confirm`` consecutive checks → raise the violated
        modality's private rank, or the shared rank when several modalities are violated (a
        single violation there waits).
    A state is *stable* once fidelity held at ``confirm`` consecutive checks (each after
    ``update_every`` steps of re-training); only a stable state is reduced further, and a
    violation before that counts as "just after a reduction" (revert). ``k_max`` caps every raise:
    an int, or one cap per space (the estimator passes min(L, D) per space).
    Stops on a 2-cycle, ``patience`` unchanged rounds, no admissible move, or ``max_rounds``.
    """

    ranks: dict[str, int]
    reference: list[float]
    threshold: float = 0.05
    scale: list[float] | None = None
    k_min: int = 0
    k_max: int | dict[str, int] | None = None
    confirm: int = 2
    patience: int = 5
    max_rounds: int = 200
    tie_tol: float = 0.01
    jumps: bool = True
    history: list[dict[str, int]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    feasible: list[tuple[dict[str, int], list[float]]] = field(default_factory=list)
    stable: list[tuple[dict[str, int], list[float]]] = field(default_factory=list)
    prev: dict[str, int] | None = None
    rejected: set = field(default_factory=set)
    done: bool = False
    reason: str = ""
    _unchanged: int = 0
    _holds: int = 0
    _viols: int = 0

    def __post_init__(self) -> None:
        self.ranks = dict(self.ranks)
        if self.scale is None:
            self.scale = list(self.reference)
        if not self.history:
            self.history.append(dict(self.ranks))

    def fidelity(self, D) -> bool:
        return not self.violated(D)

    def violated(self, D) -> list[int]:
        return [m for m, (d, ref, sc) in enumerate(zip(D, self.reference, self.scale))
                if not d <= ref + self.threshold * sc]

    def _worst(self, D) -> float:
        return max((d - ref) / max(sc, 1e-12) for d, ref, sc in zip(D, self.reference, self.scale))

    def moves(self) -> list[str]:
        """Spaces that may be reduced now (above k_min, that move not rejected)."""
        return [sp for sp, k in self.ranks.items()
                if k > self.k_min and (sp, k) not in self.rejected]

    def proposals(self) -> list[tuple[str, int]]:
        out = []
        for sp in self.moves():
            k = self.ranks[sp]
            targets = {k - 1}
            step = k // 2
            while self.jumps and step > 1:
                targets.add(max(k - step, self.k_min))
                step //= 2
            out += [(sp, r) for r in sorted(targets)]
        return out

    def choose(self, candidates: dict[tuple[str, int], list[float]]) -> tuple[str, int]:
        moves = self.moves()
        privs = [sp for sp in moves if sp != SHARED]

        def loss(sp: str) -> float:
            d = candidates.get((sp, self.ranks[sp] - 1))
            return self._worst(d) if d is not None else float("inf")

        if privs:
            best = min(loss(sp) for sp in privs)
            ties = [sp for sp in privs if loss(sp) <= best + self.tie_tol + 1e-12]
            sp = min(ties, key=lambda s: (-self.ranks[s], s))
        else:
            sp = moves[0]
        ok = [r for (s, r), d in candidates.items() if s == sp and r < self.ranks[sp]
              and r >= self.k_min and self.fidelity(d)]
        return sp, (min(ok) if ok else self.ranks[sp] - 1)

    def step(self, D, candidates: dict[tuple[str, int], list[float]] | None = None) -> dict[str, int]:
        if self.done:
            return dict(self.ranks)
        before = dict(self.ranks)
        viol = self.violated(D)
        if not viol:
            self.feasible.append((dict(self.ranks), [float(d) for d in D]))
            self._viols = 0
            self._holds += 1
            if self._holds < self.confirm:
                return self._record(before)
            if self._holds == self.confirm:
                self.stable.append((dict(self.ranks), [float(d) for d in D]))
            self.prev = None
            if not self.moves():
                return self._stop("no admissible reduction keeps fidelity")
            sp, r = self.choose(candidates or {})
            self.prev = dict(self.ranks)
            self.events.append(f"reduce {sp} {self.ranks[sp]}->{r}")
            self.ranks[sp] = r
        elif self.prev is not None:
            sp = next(s for s in self.ranks if self.ranks[s] != self.prev[s])
            k_prev = self.prev[sp]
            if self.prev[sp] - self.ranks[sp] == 1:
                self.rejected.add((sp, k_prev))
            self.events.append(f"revert {sp} {self.ranks[sp]}->{k_prev}")
            self.ranks, self.prev = dict(self.prev), None
        else:
            self._viols += 1
            if self._viols < self.confirm:
                # a violation at an accepted state is acted on only once it persists (the same
                # 'confirm' checks as a hold): one noisy check, or the dip after a revert, waits
                self.events.append("wait")
                self._holds = 0
                return self._record(before)
            target = (SHARED if len(viol) > 1 and SHARED in self.ranks
                      else f"private{viol[0]}" if f"private{viol[0]}" in self.ranks
                      else next(iter(self.ranks)))
            if self.ranks[target] < self.cap(target):
                self.ranks[target] += 1
            self.events.append(f"raise {target}")
        self._holds = self._viols = 0
        return self._record(before)

    def cap(self, space: str) -> int:
        if self.k_max is None:
            return 10**9
        return self.k_max[space] if isinstance(self.k_max, dict) else self.k_max

    def _record(self, before: dict[str, int]) -> dict[str, int]:
        self.history.append(dict(self.ranks))
        self._unchanged = self._unchanged + 1 if self.ranks == before else 0
        h = self.history
        if len(h) >= 5 and h[-1] == h[-3] == h[-5] and h[-2] == h[-4] and h[-1] != h[-2]:
            return self._stop("oscillation (2-cycle)")
        if self._unchanged >= self.patience:
            return self._stop(f"ranks unchanged for {self.patience} rounds")
        if len(h) - 1 >= self.max_rounds:
            return self._stop("max_rounds reached")
        return dict(self.ranks)

    def _stop(self, reason: str) -> dict[str, int]:
        self.done, self.reason = True, reason
        return dict(self.ranks)

    def result(self) -> tuple[dict[str, int], list[float] | None]:
        """The answer and its own distortion. Parsimony among the *stable* states (fidelity held
        at ``confirm`` consecutive checks): the smallest total rank, then the smallest shared
        rank (private before shared) [R]. A state that held once (one lucky check) is never the
        answer. With no stable state: the starting ranks (no reduction found), distortion None."""
        pool = self.stable or [(self.history[0], None)]
        ranks, dist = min(pool, key=lambda s: (sum(s[0].values()), s[0].get(SHARED, 0)))
        return dict(ranks), dist


# --- the known-truth simulator -------------------------------------------------------------------

def simulate(ks: int, k1: int, k2: int, n: int = 2000, dim: int = 50, seed: int = 0,
             noise: float = 0.01, nonlinearity: str = "tanh", hidden: int = 32):
    """Paired views with known shared/private dimensions (notes §6.1) [R]:
    z_s ∈ R^ks, z_m ∈ R^km ~ N(0, I); x_m = f_m([z_s, z_m]) + noise·N(0, I), f_m a random
    2-layer MLP (tanh; sin for dev data) or a random linear map, each output column standardised.
    Returns (x1, x2, truth)."""
    if min(ks, k1, k2) < 0 or ks + k1 + k2 == 0 or n < 2 or dim < 1:
        raise ValueError("need ks, k1, k2 >= 0 (not all 0), n >= 2, dim >= 1")
    rng = np.random.default_rng(seed)
    zs, z1, z2 = (rng.standard_normal((n, k)) for k in (ks, k1, k2))
    views = []
    for zm in (z1, z2):
        z = np.concatenate([zs, zm], 1)
        k = z.shape[1]
        if nonlinearity == "linear":
            x = z @ rng.standard_normal((k, dim)) if k else np.zeros((n, dim))
        else:
            act = {"tanh": np.tanh, "sin": np.sin}[nonlinearity]
            w1 = rng.standard_normal((k, hidden)) / np.sqrt(max(k, 1)) * 1.5
            b1 = rng.standard_normal(hidden) * 0.5
            x = act(z @ w1 + b1) @ (rng.standard_normal((hidden, dim)) / np.sqrt(hidden))
        x = (x - x.mean(0)) / (x.std(0) + 1e-8)
        views.append((x + noise * rng.standard_normal(x.shape)).astype(np.float32))
    truth = {"shared": ks, "private": [k1, k2], "n": n, "dim": dim, "seed": seed,
             "noise": noise, "nonlinearity": nonlinearity}
    return views[0], views[1], truth


def pca_rank(x: np.ndarray, tol: float = 1e-6) -> int:
    """Numerical rank of the centred matrix (singular values above tol·σ_max)."""
    s = np.linalg.svd(x - x.mean(0), compute_uv=False)
    return int((s > tol * s[0]).sum()) if s.size and s[0] > 0 else 0


def inclusion_exclusion(id1: float, id2: float, id12: float) -> dict:
    """k̂_s = ID(x1) + ID(x2) − ID(x1, x2); k̂_m = ID(x_m) − k̂_s (notes §6.1)."""
    ks = id1 + id2 - id12
    return {"shared": ks, "private": [id1 - ks, id2 - ks]}
