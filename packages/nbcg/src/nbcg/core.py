"""The method's maths as pure functions: NOTEARS, the label SEM, coalitions, Nash bargaining,
solver-free Nash-MTL and the metrics. No I/O, no logging, no global state.

Everything beyond the abstract's nouns is reconstructed [R] (see the README's table).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .config import NBCGConfig, SEMConfig

# --- NOTEARS and the label SEM ------------------------------------------------------------------


def notears_h(A: torch.Tensor) -> torch.Tensor:
    """h(A) = tr(exp(A∘A)) − L: zero exactly for a DAG, positive with a cycle (Zheng et al. 2018)."""
    return torch.linalg.matrix_exp(A * A).diagonal().sum() - A.shape[0]


def fit_label_sem(Y: np.ndarray, cfg: SEMConfig | None = None, seed: int = 0) -> np.ndarray:
    """Logistic SEM over labels, logit(y_j) = b_j + Σ_i A_ij y_i (parents teacher-forced), fitted
    with BCE + λ‖A‖₁ under h(A) = 0 by an augmented Lagrangian [R]. Returns A (L×L, zero diagonal)."""
    cfg = cfg or SEMConfig()
    g = torch.Generator().manual_seed(seed)
    rows, cnt = np.unique(np.asarray(Y, np.int8), axis=0, return_counts=True)  # exact: same loss
    Yt = torch.as_tensor(rows, dtype=torch.float32)
    wt = torch.as_tensor(cnt / cnt.sum(), dtype=torch.float32)[:, None]
    L = Yt.shape[1]
    A = (0.01 * torch.randn(L, L, generator=g)).requires_grad_()
    p = (wt * Yt).sum(0).clamp(1e-3, 1 - 1e-3)
    b = torch.log(p / (1 - p)).clone().requires_grad_()
    off = 1.0 - torch.eye(L)
    rho, alpha = 1.0, 0.0
    def bce(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # summed over labels, mean over docs
        return (wt * torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none")).sum()

    for _ in range(cfg.outer_iters):
        opt = torch.optim.Adam([A, b], lr=cfg.lr)
        for _ in range(cfg.inner_steps):
            Am = A * off
            h = notears_h(Am)
            loss = bce(b + Yt @ Am, Yt) + cfg.lambda_l1 * Am.abs().sum() + alpha * h + 0.5 * rho * h * h
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            h_val = float(notears_h(A * off))
        alpha += rho * h_val
        if h_val > 1e-8:
            rho = min(rho * 10.0, cfg.rho_max)
    return (A * off).detach().numpy().astype(np.float64)


def _weighted_rows(Y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, int]:
    rows, cnt = np.unique(np.asarray(Y, np.int8), axis=0, return_counts=True)
    return torch.as_tensor(rows, dtype=torch.float32), torch.as_tensor(cnt, dtype=torch.float64), len(Y)


def sem_nll(Y: np.ndarray, support: np.ndarray, ridge: float = 1e-3, iters: int = 100) -> float:
    """Total negative log-likelihood of the logistic SEM refitted (no L1, no constraint: the
    support is a DAG, so this is one logistic regression per label on its parents) on ``Y``."""
    Yt, cnt, n = _weighted_rows(Y)
    M = torch.as_tensor(np.asarray(support, bool), dtype=torch.float32)
    L = Yt.shape[1]
    w = (cnt / n).float()[:, None]
    p = (w * Yt).sum(0).clamp(1e-4, 1 - 1e-4)
    b = torch.log(p / (1 - p)).clone().requires_grad_()
    A = torch.zeros(L, L, requires_grad=True)
    opt = torch.optim.LBFGS([A, b], max_iter=iters, line_search_fn="strong_wolfe", tolerance_grad=1e-7)

    def loss_fn() -> torch.Tensor:
        Am = A * M
        z = b + Yt @ Am
        ll = (w * torch.nn.functional.binary_cross_entropy_with_logits(z, Yt, reduction="none")).sum()
        return ll + 0.5 * ridge * (Am * Am).sum() / n

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    if M.any():
        opt.step(closure)
    with torch.no_grad():
        z = b + Yt @ (A * M)
        nll = (cnt[:, None] * torch.nn.functional.binary_cross_entropy_with_logits(
            z, Yt, reduction="none").double()).sum()
    return float(nll)


def choose_sem_threshold(A: np.ndarray, Y: np.ndarray, thresholds) -> tuple[float, list[dict]]:
    """The SEM threshold whose DAG minimises the BIC of the refitted logistic SEM on ``Y``:
    2·NLL + (edges)·log n [R]. A criterion about the graph alone (no classifier, no true DAG);
    the first of equal-BIC thresholds wins. Returns (threshold, one row per distinct DAG)."""
    n = len(Y)
    rows, seen, best = [], {}, None
    for t in sorted(float(x) for x in thresholds):
        D = dag_from_adjacency(A, t)
        key = D.tobytes()
        if key not in seen:
            seen[key] = 2.0 * sem_nll(Y, D) + float(D.sum()) * np.log(n)
            rows.append({"threshold": t, "edges": int(D.sum()), "bic": seen[key]})
        if best is None or seen[key] < best[1]:
            best = (t, seen[key])
    assert best is not None
    return best[0], rows


def dag_from_adjacency(A: np.ndarray, threshold: float) -> np.ndarray:
    """Threshold |A| into a binary graph, then drop the weakest edge of each remaining cycle
    until it is acyclic (so the export is always a DAG) [R]."""
    W = np.where(np.abs(A) > threshold, np.abs(A), 0.0)
    np.fill_diagonal(W, 0.0)
    while not is_acyclic(W > 0):
        nz = np.argwhere(W > 0)
        i, j = min(nz, key=lambda e: W[e[0], e[1]])
        W[i, j] = 0.0
    return W > 0


def is_acyclic(B: np.ndarray) -> bool:
    """Kahn's algorithm on a boolean adjacency (B[i, j]: edge i → j)."""
    B = np.asarray(B, dtype=bool).copy()
    indeg = B.sum(0)
    stack = [i for i in range(len(B)) if indeg[i] == 0]
    seen = 0
    while stack:
        i = stack.pop()
        seen += 1
        for j in np.flatnonzero(B[i]):
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    return seen == len(B)


def edge_scores(pred: np.ndarray, true: np.ndarray, directed: bool = False) -> dict[str, float]:
    """SHD and edge precision/recall/F1 of a predicted graph against a planted one (skeleton when
    ``directed`` is False)."""
    P, T = np.asarray(pred, bool), np.asarray(true, bool)
    if not directed:
        P, T = np.triu(P | P.T, 1), np.triu(T | T.T, 1)
    tp = float((P & T).sum())
    prec = tp / max(P.sum(), 1)
    rec = tp / max(T.sum(), 1)
    f1 = 2 * prec * rec / max(prec + rec, 1e-12)
    return {"shd": float((P ^ T).sum()), "precision": prec, "recall": rec, "f1": f1}


# --- coalitions ----------------------------------------------------------------------------------


COALITION_METHODS = ("components", "ancestors", "spectral")


def _bfs_order(members: list[int], U: np.ndarray, freq: np.ndarray) -> list[int]:
    """Breadth-first from the most frequent member, so a child follows its parent."""
    order, seen, mset = [], set(), set(members)
    for start in sorted(members, key=lambda i: (-freq[i], i)):
        if start in seen:
            continue
        queue = [start]
        seen.add(start)
        while queue:
            i = queue.pop(0)
            order.append(i)
            for j in sorted(np.flatnonzero(U[i]), key=lambda j: (-freq[j], j)):
                if int(j) in mset and int(j) not in seen:
                    seen.add(int(j))
                    queue.append(int(j))
    return order


def _groups_by(key: np.ndarray) -> list[list[int]]:
    return [[int(i) for i in np.flatnonzero(key == c)] for c in dict.fromkeys(key.tolist())]


def _components(U: np.ndarray) -> np.ndarray:
    from scipy.sparse.csgraph import connected_components

    return connected_components(U.astype(np.int8), directed=False)[1]


def _ancestor_roots(dag: np.ndarray, freq: np.ndarray) -> np.ndarray:
    """Each label's root, reached by following its most frequent parent upwards (a DAG: ends)."""
    L = len(dag)
    root = np.arange(L)
    for j in range(L):
        i, hops = j, 0
        while dag[:, i].any() and hops < L:
            ps = np.flatnonzero(dag[:, i])
            i = int(max(ps, key=lambda p: (freq[p], -p)))
            hops += 1
        root[j] = i
    return root


def _spectral(W: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Spectral clustering of the symmetric affinity W (+ a small floor so it is connected)."""
    from sklearn.cluster import SpectralClustering

    if k <= 1 or len(W) <= k:
        return np.zeros(len(W), int) if k <= 1 else np.arange(len(W))
    S = W + W.T
    S = S / max(S.max(), 1e-12) + 1e-3
    np.fill_diagonal(S, 1.0)
    return SpectralClustering(k, affinity="precomputed", random_state=seed,
                              assign_labels="cluster_qr").fit_predict(S)


def form_coalitions(dag: np.ndarray, freq: np.ndarray, max_size: int, method: str = "components",
                    weights: np.ndarray | None = None) -> list[list[int]]:
    """Partition labels into causally coherent coalitions of at most ``max_size`` [R].

    ``components``: weakly connected components of the DAG; ``ancestors``: labels grouped by the
    root reached through their most frequent parents; ``spectral``: spectral clustering of
    |A| + |A|ᵀ on the DAG's edges (``weights``) into ⌈L / max_size⌉ groups. Each group is cut
    to ``max_size`` in breadth-first order from its most frequent member, so a rare child lands
    beside its parent; labels left alone are pooled."""
    if method not in COALITION_METHODS:
        raise ValueError(f"unknown coalition method {method!r} (known: {', '.join(COALITION_METHODS)})")
    D = np.asarray(dag, bool)
    L = len(D)
    U = D | D.T
    freq = np.asarray(freq, float)
    if method == "components":
        key = _components(U)
    elif method == "ancestors":
        key = _ancestor_roots(D, freq)
    else:
        W = np.abs(np.asarray(weights, float)) * D if weights is not None else D.astype(float)
        key = _spectral(W, int(np.ceil(L / max_size)))
    groups: list[list[int]] = []
    singles: list[int] = []
    for members in _groups_by(key):
        if len(members) == 1:
            singles += members
            continue
        order = _bfs_order(members, U, freq)
        groups += [order[k:k + max_size] for k in range(0, len(order), max_size)]
    singles.sort(key=lambda i: (-freq[i], i))
    groups += [singles[k:k + max_size] for k in range(0, len(singles), max_size)]
    return [sorted(g) for g in groups if g]


def random_coalitions(sizes: list[int], n_labels: int, seed: int) -> list[list[int]]:
    """A random partition with the given coalition sizes (the causality ablation)."""
    perm = np.random.default_rng(seed).permutation(n_labels)
    out, k = [], 0
    for s in sizes:
        out.append(sorted(int(i) for i in perm[k:k + s]))
        k += s
    return out


# --- Nash bargaining -----------------------------------------------------------------------------


def nash_weights(u: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Weights of ∇(Σ_k log(u_k − d_k)) on each ∇u_k: w_k ∝ 1/(u_k − d_k), normalised to mean 1."""
    gap = np.asarray(u, float) - np.asarray(d, float)
    if np.any(gap <= 0):
        raise ValueError("every utility must exceed its disagreement point")
    w = 1.0 / gap
    return w * len(w) / w.sum()


@dataclass
class NashBargaining:
    """The adaptive disagreement point and the Nash weights over coalition losses [R].

    Utilities are scale-normalised improvements u_k = 1 − L_k / L_k⁰ (L_k⁰: the loss at the end of
    warm-up), so multiplying every loss by a constant leaves u, d and the weights unchanged."""

    cfg: NBCGConfig = field(default_factory=NBCGConfig)
    ref: np.ndarray | None = None
    d: np.ndarray | None = None

    def set_reference(self, losses: np.ndarray) -> None:
        self.ref = np.maximum(np.asarray(losses, float), 1e-12)
        self.d = None

    def utilities(self, losses: np.ndarray) -> np.ndarray:
        if self.ref is None:
            raise RuntimeError("call set_reference first")
        return 1.0 - np.asarray(losses, float) / self.ref

    def step(self, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Update d_k from the current losses; return (weights on L_k/L_k⁰, utilities)."""
        u = self.utilities(losses)
        eps = self.cfg.eps
        if self.d is None:
            d = np.minimum(0.0, u) - eps
        elif self.cfg.disagreement == "ema":
            d = self.cfg.ema * self.d + (1 - self.cfg.ema) * u
        elif self.cfg.disagreement == "min":
            d = np.minimum(self.d, u)
        else:  # solo: what the coalition had alone, before cooperating (its warm-up loss: u = 0)
            d = np.zeros_like(u)
        self.d = np.minimum(d, u - eps)
        return nash_weights(u, self.d), u


# --- Nash-MTL without cvxpy ----------------------------------------------------------------------


def nash_mtl_alpha(G: np.ndarray, tol: float = 1e-10) -> np.ndarray:
    """Solve (GᵀG)α = 1/α with α > 0 (Navon et al. 2022, eq. 4) by scipy root finding on log α.
    ``G`` is p×K (one gradient per column). Update direction: Gα."""
    from scipy.optimize import least_squares

    M = np.asarray(G, float).T @ np.asarray(G, float)
    K = M.shape[0]
    scale = float(np.sqrt(np.trace(M) / K)) or 1.0
    Mn = M / scale**2  # solve for β = α·scale, then α = β/scale (the problem's scale symmetry)

    def resid(z: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # trial steps may overshoot
            beta = np.exp(np.clip(z, -50, 50))
            return beta * (Mn @ beta) - 1.0

    def jac(z: np.ndarray) -> np.ndarray:   # ∂r_i/∂z_j = β_i M_ij β_j + δ_ij β_i (Mβ)_i
        with np.errstate(over="ignore", invalid="ignore"):
            beta = np.exp(np.clip(z, -50, 50))
            return beta[:, None] * Mn * beta[None, :] + np.diag(beta * (Mn @ beta))

    z0 = np.zeros(K)  # β = 1 is the solution when the normalised gradients are orthonormal
    sol = least_squares(resid, z0, jac=jac, method="lm", xtol=tol, ftol=tol, gtol=tol, max_nfev=5000)
    return np.exp(sol.x) / scale


def nash_mtl_step(G: np.ndarray, max_norm: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nash-MTL's published step on p×K gradients ``G``: (α, the update Gα, the update clipped at
    ``max_norm``). α is not renormalised, so ‖Gα‖² = Σ α_i (GᵀGα)_i = K [C]."""
    alpha = nash_mtl_alpha(G)
    raw = np.asarray(G, float) @ alpha
    norm = float(np.linalg.norm(raw))
    return alpha, raw, raw * min(1.0, max_norm / max(norm, 1e-12))


# --- metrics --------------------------------------------------------------------------------------


def rare_labels(train_counts: np.ndarray, fraction: float = 0.3) -> np.ndarray:
    """Indices of the bottom ``fraction`` of labels by training frequency (ties by index)."""
    n = max(1, int(round(fraction * len(train_counts))))
    return np.argsort(np.asarray(train_counts), kind="stable")[:n]


def multilabel_scores(Y: np.ndarray, P: np.ndarray, S: np.ndarray, train_counts: np.ndarray,
                      k: int = 3, rare_fraction: float = 0.3) -> dict[str, float]:
    """micro/macro/rare F1 of binary predictions P; P@k and nDCG@k of scores S."""
    from sklearn.metrics import f1_score

    Y, P = np.asarray(Y, int), np.asarray(P, int)
    rare = rare_labels(train_counts, rare_fraction)
    out = {
        "micro_f1": float(f1_score(Y, P, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(Y, P, average="macro", zero_division=0)),
        "rare_f1": float(f1_score(Y, P, labels=rare, average="macro", zero_division=0)),
    }
    top = np.argsort(-np.asarray(S), axis=1, kind="stable")[:, :k]
    hits = np.take_along_axis(Y, top, axis=1)
    out[f"p@{k}"] = float(hits.mean())
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    ideal = np.array([disc[:min(int(n), k)].sum() for n in Y.sum(1)])
    dcg = (hits * disc).sum(1)
    out[f"ndcg@{k}"] = float(np.mean(np.where(ideal > 0, dcg / np.maximum(ideal, 1e-12), 0.0)))
    return out
