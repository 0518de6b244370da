"""Baselines behind one interface: ``fn(views, groups, k, seed, **knob) -> labels``.

A new baseline is one decorated function. Every baseline is a reconstruction from the cited
papers [R] (the CDAL paper's baseline code was not available); each has its own knob, selected
on the dev draw by the experiments. CDAL itself and its α/β/γ = 0 ablations are registered here
too so the CLI's ``front`` and the experiments call every method the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import core

BASELINES: dict[str, Callable] = {}
#: each method's fairness knob: (parameter name, settings swept by ``front``, default)
KNOBS: dict[str, tuple[str, tuple, object]] = {}


def register(name: str, knob: str | None = None, settings: tuple = (), default=None):
    def deco(fn):
        BASELINES[name] = fn
        KNOBS[name] = (knob, settings, default)
        return fn
    return deco


def standardize(views) -> list[np.ndarray]:
    out = []
    for v in views:
        v = np.asarray(v, dtype=float)
        sd = v.std(0)
        out.append((v - v.mean(0)) / np.where(sd > 1e-12, sd, 1.0))
    return out


def _kmeans(X, k, seed, n_init=10):
    from sklearn.cluster import KMeans

    return KMeans(k, n_init=n_init, random_state=seed).fit_predict(X)


@register("concat_kmeans")
def concat_kmeans(views, groups, k, seed=0):
    """k-means on the concatenated standardised views (no fairness)."""
    return _kmeans(np.hstack(standardize(views)), k, seed)


def anchor_graph(X, m, seed, sample=20000):
    """Simplex anchor coding of one view on its k-means anchors (LMVSC-style anchor graph)."""
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    idx = rng.choice(X.shape[0], size=min(X.shape[0], sample), replace=False)
    A = KMeans(m, n_init=3, random_state=seed).fit(X[idx]).cluster_centers_
    return core.simplex_qp(A @ A.T, X @ A.T, None, max_iter=100, tol=1e-7)


@register("anchor_mvc", "n_anchors", (1, 2, 3, 4, 5), 2)
def anchor_mvc(views, groups, k, seed=0, n_anchors=2):
    """Per-view anchor graphs (m = n_anchors·k), averaged, top-k singular vectors, k-means
    (LMVSC / SMVSC family; Kang et al. AAAI'20). No fairness: its knob is the anchor count."""
    m = min(int(n_anchors) * k, views[0].shape[0])
    Z = np.mean([anchor_graph(X, m, seed + i) for i, X in enumerate(standardize(views))], axis=0)
    return _kmeans(core.embed(Z, core.spectral_basis(Z.T @ Z, k)), k, seed)


def _fairness_matrix(groups) -> np.ndarray:
    codes, _ = core.group_codes(groups)
    c = int(codes.max()) + 1
    G = core.one_hot(codes, c)
    return (G - G.mean(0))[:, : max(c - 1, 1)]


@register("fair_spectral", "n_neighbors", (5, 10, 20, 40, 80), 10)
def fair_spectral(views, groups, k, seed=0, n_neighbors=10, cap=3000):
    """Fair spectral clustering (Kleindessner et al., ICML'19): the spectral embedding constrained
    to Fᵀ H = 0 (every cluster indicator orthogonal to the centred group indicators). Dense
    (unnormalised Laplacian of a k-NN Gaussian graph, null-space of Fᵀ, eigh) up to ``cap``
    samples; above it a sparse k-NN graph with the constraint as an orthogonal projection inside
    ``eigsh`` on the normalised adjacency [R] (labelled ``sparse`` in reports)."""
    from scipy.linalg import eigh, null_space
    from scipy.sparse.linalg import LinearOperator, eigsh
    from sklearn.neighbors import kneighbors_graph

    X = np.hstack(standardize(views))
    n = X.shape[0]
    A = kneighbors_graph(X, min(int(n_neighbors), n - 1), mode="distance", include_self=False)
    A = A.maximum(A.T).tocsr()
    sigma = np.median(A.data) if A.nnz else 1.0
    A.data = np.exp(-(A.data ** 2) / (2 * sigma ** 2))
    F = _fairness_matrix(groups)
    deg = np.asarray(A.sum(axis=1)).ravel()
    if n <= cap:
        L = np.diag(deg) - A.toarray()
        Z = null_space(F.T)
        _, Y = eigh(Z.T @ L @ Z, subset_by_index=[0, k - 1])
        H = Z @ Y
    else:
        dinv = 1.0 / np.sqrt(np.maximum(deg, 1e-12))
        S = A.multiply(dinv[:, None]).multiply(dinv[None, :]).tocsr()
        Qf, _ = np.linalg.qr(F)
        proj = lambda x: x - Qf @ (Qf.T @ x)  # noqa: E731
        op = LinearOperator((n, n), matvec=lambda x: proj(S @ proj(x)), dtype=float)
        v0 = proj(np.random.default_rng(seed).normal(size=n))
        _, H = eigsh(op, k=k, which="LA", v0=v0)
    return _kmeans(H, k, seed)


@register("vfc", "lam", (0.0, 0.5, 2.0, 8.0, 32.0), 2.0)
def vfc(views, groups, k, seed=0, lam=2.0, iters=30, inner=5):
    """Variational fair clustering (Ziko et al., AAAI'21) with the k-means energy [R]: soft
    assignments S minimise Σ s_ik‖x_i − c_k‖² + λ Σ_k KL(u ‖ P(g | k)) + entropy, by the bound
    update s_i ∝ exp(−a_i − λ ∇_i), centroids as weighted means. λ = 0 is soft k-means."""
    X = np.hstack(standardize(views))
    codes, _ = core.group_codes(groups)
    B = core.one_hot(codes, int(codes.max()) + 1)
    u = B.mean(0)
    from sklearn.cluster import kmeans_plusplus

    C, _ = kmeans_plusplus(X, k, random_state=seed)
    S = None
    for _ in range(iters):
        D = (X * X).sum(1)[:, None] - 2 * X @ C.T + (C * C).sum(1)[None, :]
        D = D / max(float(D.mean()), 1e-12) * 5.0  # scale-free temperature [R]
        S = _softmax(-D) if S is None else S
        for _ in range(inner):
            col = S.sum(0) + 1e-12
            gk = B.T @ S + 1e-12  # groups × clusters
            grad = (1.0 / col)[None, :] - B @ (u[:, None] / gk)  # ∂/∂s_ik of Σ_k KL(u‖P(g|k))
            S = _softmax(-D - lam * grad * len(X) / k)
        C = (S.T @ X) / (S.sum(0)[:, None] + 1e-12)
    return S.argmax(1)


def _softmax(A):
    A = A - A.max(1, keepdims=True)
    E = np.exp(A)
    return E / E.sum(1, keepdims=True)


def _cdal(views, groups, k, seed=0, alpha=1.0, beta=1.0, gamma=1.0, max_iter=50, **kw):
    from .estimator import CDAL

    est = CDAL(n_clusters=k, alpha=alpha, beta=beta, gamma=gamma, max_iter=max_iter,
               random_state=seed, **kw)
    return est.fit_predict(list(views), sensitive_features=groups)


@register("cdal", "alpha", (1e-3, 3e-3, 1e-2, 3e-2, 1e-1), 1.0)
def cdal(views, groups, k, seed=0, **kw):
    """CDAL (this paper): the α-HSIC, β-orthogonality and γ-group terms all on."""
    return _cdal(views, groups, k, seed, **kw)


for _name, _off in (("cdal_alpha0", "alpha"), ("cdal_beta0", "beta"), ("cdal_gamma0", "gamma")):
    def _abl(views, groups, k, seed=0, _off=_off, **kw):
        return _cdal(views, groups, k, seed, **{**kw, _off: 0.0})
    register(_name)(_abl)


@register("cdal_all0")
def cdal_all0(views, groups, k, seed=0, **kw):
    """CDAL with α = β = γ = 0: dual-anchor reconstruction only (the mechanism switched off)."""
    return _cdal(views, groups, k, seed, **{**kw, "alpha": 0.0, "beta": 0.0, "gamma": 0.0})
