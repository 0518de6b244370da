"""The paper's maths as pure functions (torch): LightGCN propagation on a sparse bipartite graph,
the Gumbel-sigmoid edge mask, normalised HSIC, InfoNCE and BPR. No I/O, logging or global state.

Node order everywhere: users ``0..U-1`` then items ``U..U+I-1``.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F


class _SymSpMMValues(torch.autograd.Function):
    """Â(w) X with Â's structure fixed (CSR ``crow``/``col``, COO ``row``) and its values ``val``
    differentiable: ∂/∂val_rc = ⟨G_r, X_c⟩, ∂/∂X = Â G (Â symmetric)."""

    @staticmethod
    def forward(ctx, crow, col, row, val, x):  # type: ignore[override]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            adj = torch.sparse_csr_tensor(crow, col, val, (x.shape[0], x.shape[0]))
        ctx.save_for_backward(x)
        ctx.adj = adj
        return adj @ x

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        (x,) = ctx.saved_tensors
        gv = None
        if ctx.needs_input_grad[3]:  # ⟨G_r, X_c⟩ on the sparsity pattern only (SDDMM)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gv = torch.sparse.sampled_addmm(ctx.adj, grad, x.T, beta=0.0).values()
        return None, None, None, gv, ctx.adj @ grad


class MaskedGraph:
    """A bipartite graph whose edge weights (a soft mask) change every step: the CSR structure of
    [[0, R], [Rᵀ, 0]] is built once; ``propagate(w)`` normalises and propagates with gradients
    flowing into ``w`` (one weight per user-item edge)."""

    def __init__(self, users: torch.Tensor, items: torch.Tensor, n_users: int, n_items: int):
        self.users, self.cols, self.n = users, items + n_users, n_users + n_items
        r = torch.cat([self.users, self.cols])
        c = torch.cat([self.cols, self.users])
        order = torch.argsort(r * self.n + c)
        self.perm, self.row, self.col = order, r[order], c[order]
        counts = torch.bincount(self.row, minlength=self.n)
        self.crow = torch.cat([torch.zeros(1, dtype=torch.long, device=r.device), counts.cumsum(0)])

    def values(self, w: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
        deg = torch.zeros(self.n, dtype=w.dtype, device=w.device).index_add(0, self.users, w).index_add(0, self.cols, w)
        inv = torch.where(deg > eps, deg.clamp_min(eps).rsqrt(), torch.zeros_like(deg))
        val = w * inv[self.users] * inv[self.cols]
        return torch.cat([val, val]).index_select(0, self.perm)  # backward: index_add, not index_put

    def propagate(self, w: torch.Tensor, emb: torch.Tensor, n_layers: int) -> torch.Tensor:
        val = self.values(w)
        out, cur = emb, emb
        for _ in range(n_layers):
            cur = _SymSpMMValues.apply(self.crow, self.col, self.row, val, cur)
            out = out + cur
        return out / (n_layers + 1)


def normalized_adjacency(users: torch.Tensor, items: torch.Tensor, n_users: int, n_items: int,
                         weights: torch.Tensor | None = None, eps: float = 1e-12) -> torch.Tensor:
    """D^{-1/2} A D^{-1/2} of the bipartite graph A = [[0, R], [Rᵀ, 0]] as a sparse COO tensor of
    shape (U+I, U+I) [S: LightGCN]. ``weights`` (one per edge, e.g. a soft mask) scale R's entries
    and enter the degrees, so gradients flow into them; isolated nodes get zero rows."""
    n = n_users + n_items
    w = torch.ones(users.numel(), dtype=torch.float32, device=users.device) if weights is None else weights
    cols = items + n_users
    deg = torch.zeros(n, dtype=w.dtype, device=w.device)
    deg = deg.index_add(0, users, w).index_add(0, cols, w)
    inv = torch.where(deg > eps, deg.clamp_min(eps).rsqrt(), torch.zeros_like(deg))
    val = w * inv[users] * inv[cols]
    idx = torch.stack([torch.cat([users, cols]), torch.cat([cols, users])])
    return torch.sparse_coo_tensor(idx, torch.cat([val, val]), (n, n), check_invariants=False)


class _SymSpMM(torch.autograd.Function):
    """Â X for a fixed symmetric sparse Â: the backward pass is Â G again (Âᵀ = Â)."""

    @staticmethod
    def forward(ctx, adj, x):  # type: ignore[override]
        ctx.adj = adj
        return adj @ x

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return None, ctx.adj @ grad


def propagate(adj: torch.Tensor, emb: torch.Tensor, n_layers: int) -> torch.Tensor:
    """LightGCN: E^{l+1} = Â E^l, output the mean of E^0..E^L [S]. A CSR ``adj`` (fixed graph,
    see ``to_csr``) uses the symmetric backward; a COO ``adj`` also passes gradients to its
    values (the soft edge mask)."""
    out, cur = emb, emb
    fixed = adj.layout == torch.sparse_csr
    for _ in range(n_layers):
        cur = _SymSpMM.apply(adj, cur) if fixed else torch.sparse.mm(adj, cur)
        out = out + cur
    return out / (n_layers + 1)


def to_csr(adj: torch.Tensor) -> torch.Tensor:
    """A fixed (no-gradient) adjacency as CSR, the fastest sparse layout for repeated products."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return adj.detach().coalesce().to_sparse_csr()


def gumbel_sigmoid(logits: torch.Tensor, temp: float, generator: torch.Generator | None = None,
                   eps: float = 1e-6) -> torch.Tensor:
    """Relaxed Bernoulli sample σ((logit + log u − log(1−u)) / τ) [R]."""
    u = torch.rand(logits.shape, generator=generator, device=logits.device).clamp(eps, 1 - eps)
    return torch.sigmoid((logits + torch.log(u) - torch.log1p(-u)) / temp)


def _center(k: torch.Tensor) -> torch.Tensor:
    return k - k.mean(0, keepdim=True) - k.mean(1, keepdim=True) + k.mean()


def kernel_matrix(x: torch.Tensor, kernel: str = "linear") -> torch.Tensor:
    """Gram matrix of the rows of ``x``: linear ⟨x_i, x_j⟩ or RBF with the median heuristic."""
    if kernel == "linear":
        return x @ x.T
    if kernel == "rbf":
        d2 = torch.cdist(x, x).pow(2)
        med = d2.detach()[d2.detach() > 0]
        bw = med.median() if med.numel() else torch.tensor(1.0, device=x.device)
        return torch.exp(-d2 / (2 * bw))
    raise ValueError(f"unknown kernel {kernel!r}")


def hsic(x: torch.Tensor, y: torch.Tensor, kernel: str = "linear") -> torch.Tensor:
    """Biased HSIC estimator tr(K H L H) / (n − 1)² [S]."""
    n = x.shape[0]
    k, l_ = kernel_matrix(x, kernel), kernel_matrix(y, kernel)
    return (_center(k) * l_).sum() / (n - 1) ** 2


def normalized_hsic(x: torch.Tensor, y: torch.Tensor, kernel: str = "linear",
                    eps: float = 1e-12) -> torch.Tensor:
    """HSIC(X, Y) / √(HSIC(X, X)·HSIC(Y, Y)) ∈ [0, 1] (CKA); 0 when either side is constant."""
    n = x.shape[0]
    kc, lc = _center(kernel_matrix(x, kernel)), _center(kernel_matrix(y, kernel))
    xy = (kc * lc).sum() / (n - 1) ** 2
    xx = (kc * kc).sum() / (n - 1) ** 2
    yy = (lc * lc).sum() / (n - 1) ** 2
    return xy / torch.sqrt(xx * yy).clamp_min(eps)


def info_nce(a: torch.Tensor, b: torch.Tensor, temp: float) -> torch.Tensor:
    """InfoNCE with in-batch negatives: row i of ``a`` should match row i of ``b`` [S].
    Cosine similarities / τ; equals log(batch size) when all similarities are equal."""
    logits = F.normalize(a, dim=1) @ F.normalize(b, dim=1).T / temp
    return F.cross_entropy(logits, torch.arange(a.shape[0], device=a.device))


def bpr_loss(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """Bayesian personalised ranking: mean −log σ(ŷ_ui − ŷ_uj) [S]."""
    return F.softplus(neg - pos).mean()


def hr_ndcg(ranks: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Leave-one-out HR@k and NDCG@k per user from the 0-based rank of the held-out item."""
    hit = (ranks < k).float()
    return hit, hit / torch.log2(ranks.float() + 2)


def rank_of_target(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """0-based rank of column ``target[r]`` in row r (items scoring strictly higher; ties favour
    the target, as in RecBole's full sort)."""
    t = scores.gather(1, target[:, None])
    return (scores > t).sum(1)

