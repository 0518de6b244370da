"""The paper's maths as pure functions: no I/O, no logging, no global state.

Convention: samples are ROWS (scikit-learn's layout), so the paper's d_v×n view X_v is our n×d_v
array, its m×n anchor graph Z is our n×m array Z (each row on the probability simplex), its d_v×m
anchor matrix A is our m×d_v array A (row j = anchor j) and W (m×c) is unchanged. In this layout
the CDAL objective [S, notes §3] reads

    Σ_v ‖X_v − Z_u A^u_v − Z_s A^s_v‖² + α ‖Z_uᵀ Ĝ‖² + β Σ_v ‖A^u_v A^s_vᵀ‖² + γ ‖G − Z_s W‖²

with G the n×c one-hot groups, Ĝ = H G its column-centred copy (H = I − 11ᵀ/n) and WᵀW = I.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh, solve_sylvester


def project_simplex(V: np.ndarray) -> np.ndarray:
    """Euclidean projection of every row of ``V`` onto {z ≥ 0, 1ᵀz = 1} (sort-based; Duchi et al.
    2008). O(m log m) per row, vectorised over rows."""
    V = np.asarray(V, dtype=float)
    shape = V.shape
    V = V.reshape(-1, shape[-1])
    m = V.shape[1]
    U = -np.sort(-V, axis=1)
    css = np.cumsum(U, axis=1) - 1.0
    cond = U * np.arange(1, m + 1) > css
    rho = m - 1 - np.argmax(cond[:, ::-1], axis=1)  # last index where cond holds
    theta = css[np.arange(V.shape[0]), rho] / (rho + 1.0)
    return np.maximum(V - theta[:, None], 0.0).reshape(shape)


def qp_values(Q: np.ndarray, C: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Row-wise zᵀQz − 2zᵀc."""
    return np.einsum("ij,ij->i", Z @ Q, Z) - 2.0 * np.einsum("ij,ij->i", Z, C)


def simplex_qp(Q: np.ndarray, C: np.ndarray, Z0: np.ndarray | None = None, *, max_iter: int = 500,
               tol: float = 1e-10) -> np.ndarray:
    """min_z zᵀQz − 2zᵀc_i over the simplex, for every row c_i of ``C`` (Q symmetric PSD, shared).

    Accelerated projected gradient (FISTA, step 1/L with L = 2λ_max(Q)) replaces the authors'
    per-column ``quadprog``, with the adaptive (gradient) restart of O'Donoghue & Candès; each
    row stops on its own (so a row's answer does not depend on the
    batch it came in) and a row never ends worse than its warm start ``Z0`` (monotone blocks).
    """
    n, m = C.shape
    L = 2.0 * max(float(eigh(Q, eigvals_only=True, subset_by_index=[m - 1, m - 1])[0]), 1e-12)
    Z = np.full((n, m), 1.0 / m) if Z0 is None else project_simplex(Z0)
    start = Z.copy()
    Y, Zprev, t = Z.copy(), Z.copy(), np.ones(n)
    active = np.arange(n)
    for _ in range(max_iter):
        if active.size == 0:
            break
        Ya = Y[active]
        Znew = project_simplex(Ya - (2.0 * (Ya @ Q) - 2.0 * C[active]) / L)
        step = np.abs(Znew - Zprev[active]).max(axis=1)
        dz = Znew - Zprev[active]
        ta = np.where(np.einsum("ij,ij->i", Ya - Znew, dz) > 0, 1.0, t[active])  # restart
        tn = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * ta * ta))
        Y[active] = Znew + ((ta - 1.0) / tn)[:, None] * dz
        Zprev[active] = Znew
        t[active] = tn
        active = active[step > tol]
    Z = Zprev
    worse = qp_values(Q, C, Z) > qp_values(Q, C, start)
    Z[worse] = start[worse]
    return Z


def procrustes(ZtG: np.ndarray) -> np.ndarray:
    """W = argmin ‖G − Z_s W‖² s.t. WᵀW = I, from ZtG = Z_sᵀG (m×c): W = U Vᵀ, UΣVᵀ = SVD(Z_sᵀG)."""
    U, _, Vt = np.linalg.svd(ZtG, full_matrices=False)
    return U @ Vt


def solve_anchors(ZtZ: np.ndarray, ZtR: np.ndarray, beta: float, other: np.ndarray,
                  ridge: float = 0.0) -> np.ndarray:
    """The anchor block: argmin_A ‖R − Z A‖² + β ‖A_other Aᵀ‖², i.e. the Sylvester equation
    (ZᵀZ + ridge·I) A + A (β A_otherᵀ A_other) = ZᵀR (m×m by d×d; only ZᵀR depends on n).
    ``ridge`` (tiny, [R]) keeps it solvable when an anchor is unused and β = 0."""
    m = ZtZ.shape[0]
    a = ZtZ + ridge * np.eye(m)
    b = beta * (other.T @ other)
    if beta == 0.0:
        return np.linalg.solve(a, ZtR)
    return solve_sylvester(a, b, ZtR)


def sylvester_residual(ZtZ, ZtR, beta, other, A, ridge: float = 0.0) -> float:
    """Relative residual of the anchor equation solved by :func:`solve_anchors`."""
    lhs = (ZtZ + ridge * np.eye(ZtZ.shape[0])) @ A + beta * A @ (other.T @ other)
    return float(np.linalg.norm(lhs - ZtR) / max(np.linalg.norm(ZtR), 1e-300))


def group_codes(sensitive) -> tuple[np.ndarray, np.ndarray]:
    """Integer group codes 0..c-1 of one or several sensitive columns (several columns: their
    intersection, one group per distinct row) and the groups' labels."""
    S = np.asarray(sensitive)
    if S.ndim == 1:
        S = S[:, None]
    labels, codes = np.unique(S, axis=0, return_inverse=True)
    return codes.ravel().astype(np.int64), labels


def one_hot(codes: np.ndarray, c: int) -> np.ndarray:
    G = np.zeros((codes.shape[0], c))
    G[np.arange(codes.shape[0]), codes] = 1.0
    return G


def hsic_term(Zu: np.ndarray, codes: np.ndarray, c: int) -> float:
    """‖Z_uᵀ Ĝ‖² in O(nmc): the linear-kernel HSIC between Z_u and the groups, times (n−1)²."""
    G = one_hot(codes, c)
    return float(np.sum((Zu.T @ (G - G.mean(axis=0))) ** 2))


def hsic_trace(Zu: np.ndarray, codes: np.ndarray, c: int) -> float:
    """tr(Z_u Z_uᵀ H G Gᵀ H), the same quantity computed densely (n×n; for tests)."""
    n = Zu.shape[0]
    G = one_hot(codes, c)
    H = np.eye(n) - 1.0 / n
    return float(np.trace(Zu @ Zu.T @ H @ G @ G.T @ H))


def objective_terms(views, Zu, Zs, Au, As, W, codes, c) -> dict[str, float]:
    """The four terms of the objective, unweighted, computed directly (in memory)."""
    G = one_hot(codes, c)
    recon = sum(float(np.sum((X - Zu @ au - Zs @ as_) ** 2)) for X, au, as_ in zip(views, Au, As))
    return {"recon": recon, "hsic": hsic_term(Zu, codes, c),
            "orth": sum(float(np.sum((au @ as_.T) ** 2)) for au, as_ in zip(Au, As)),
            "group": float(np.sum((G - Zs @ W) ** 2))}


def objective(views, Zu, Zs, Au, As, W, codes, c, alpha, beta, gamma) -> float:
    t = objective_terms(views, Zu, Zs, Au, As, W, codes, c)
    return t["recon"] + alpha * t["hsic"] + beta * t["orth"] + gamma * t["group"]


def spectral_basis(ZtZ: np.ndarray, k: int) -> np.ndarray:
    """m×k map V Σ⁻¹ such that Z V Σ⁻¹ = the top-k left singular vectors of Z (n×m), from the m×m
    Gram only, so that the embedding is O(nmk) and applies to new rows unchanged."""
    vals, vecs = np.linalg.eigh(ZtZ)
    order = np.argsort(vals)[::-1][:k]
    s = np.sqrt(np.maximum(vals[order], 1e-300))
    V = vecs[:, order]
    V = V * np.sign(V[np.argmax(np.abs(V), axis=0), np.arange(V.shape[1])])  # fixed signs
    return V / s


def embed(Z: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Row-normalised spectral embedding Z V Σ⁻¹ (the authors' post-processing before k-means)."""
    E = Z @ basis
    return E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)


def code_on_anchors(views, Au, As, *, sweeps: int = 10, max_iter: int = 200, tol: float = 1e-9):
    """Out-of-sample coding [R]: for each new row, (z_u, z_s) on their simplices minimising
    Σ_v ‖x_v − z_u A^u_v − z_s A^s_v‖² (the reconstruction term; groups are unknown at prediction
    time), by block-coordinate descent, each block an exact simplex QP. Row-independent."""
    n = views[0].shape[0]
    Pu = sum(a @ a.T for a in Au)
    Ps = sum(a @ a.T for a in As)
    XAu = sum(X @ a.T for X, a in zip(views, Au))
    XAs = sum(X @ a.T for X, a in zip(views, As))
    cross = sum(a @ b.T for a, b in zip(Au, As))  # m×m: A^u A^sᵀ
    Zu = simplex_qp(Pu, XAu, None, max_iter=max_iter, tol=tol)
    Zs = np.full((n, As[0].shape[0]), 1.0 / As[0].shape[0])
    for _ in range(sweeps):  # a fixed number of sweeps: no batch-wide stopping rule
        Zs = simplex_qp(Ps, XAs - Zu @ cross, Zs, max_iter=max_iter, tol=tol)
        Zu = simplex_qp(Pu, XAu - Zs @ cross.T, Zu, max_iter=max_iter, tol=tol)
    return Zu, Zs
