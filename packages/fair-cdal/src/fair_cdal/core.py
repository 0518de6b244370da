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
    """Euclidean projection of every row of ``V`` onto {z ≥ 0, 1ᵀz = 1}, sort-free (Michelot
    1986): θ ← (Σ_{v>θ} v − 1)/|{v > θ}| from θ = (Σv − 1)/m rises monotonically to the exact
    threshold in at most m passes (typically 2–4), each O(m) per row, vectorised over rows."""
    V = np.asarray(V, dtype=float)
    shape = V.shape
    V = V.reshape(-1, shape[-1])
    m = V.shape[1]
    theta = (V.sum(1) - 1.0) / m
    rows = np.arange(V.shape[0])
    for _ in range(m):
        Vr = V[rows]
        act = Vr > theta[rows, None]
        cnt = act.sum(1)
        new = (np.where(act, Vr, 0.0).sum(1) - 1.0) / np.maximum(cnt, 1)
        moved = new > theta[rows] + 1e-15 * np.maximum(1.0, np.abs(new))
        theta[rows] = np.maximum(new, theta[rows])
        rows = rows[moved]
        if rows.size == 0:
            break
    return np.maximum(V - theta[:, None], 0.0).reshape(shape)


def project_simplex_sort(V: np.ndarray) -> np.ndarray:
    """The sort-based projection (Duchi et al. 2008), kept as the reference for tests."""
    V = np.asarray(V, dtype=float)
    m = V.shape[1]
    U = -np.sort(-V, axis=1)
    css = np.cumsum(U, axis=1) - 1.0
    cond = U * np.arange(1, m + 1) > css
    rho = m - 1 - np.argmax(cond[:, ::-1], axis=1)
    theta = css[np.arange(V.shape[0]), rho] / (rho + 1.0)
    return np.maximum(V - theta[:, None], 0.0)


def qp_values(Q: np.ndarray, C: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Row-wise zᵀQz − 2zᵀc."""
    return np.einsum("ij,ij->i", Z @ Q, Z) - 2.0 * np.einsum("ij,ij->i", Z, C)


def fw_gap(Z: np.ndarray, grad: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Relative Frank–Wolfe gap per row: (⟨∇ᵢ, zᵢ⟩ − minⱼ ∇ᵢⱼ) / scaleᵢ. The gap bounds the row's
    distance to its optimum in objective value (f(zᵢ) − f* ≤ gap for convex f on the simplex)."""
    gap = np.einsum("ij,ij->i", Z, grad) - grad.min(axis=1)
    return np.maximum(gap, 0.0) / np.maximum(scale, 1e-12)


def _qp_scale(ZQ, Z, C) -> np.ndarray:
    """|zᵀQz| + 2|zᵀc| + 1: the size of the row's objective, what ``qp_tol`` is relative to."""
    return np.abs(np.einsum("ij,ij->i", ZQ, Z)) + 2.0 * np.abs(np.einsum("ij,ij->i", Z, C)) + 1.0


def simplex_qp(Q: np.ndarray, C: np.ndarray, Z0: np.ndarray | None = None, *, max_iter: int = 500,
               tol: float = 1e-6, return_info: bool = False):
    """min_z zᵀQz − 2zᵀc_i over the simplex, for every row c_i of ``C`` (Q symmetric PSD, shared).

    Accelerated projected gradient (FISTA, step 1/L with L = 2λ_max(Q), adaptive restart of
    O'Donoghue & Candès) replaces the authors' per-column ``quadprog``. Each row stops on its own
    when its relative Frank–Wolfe gap (:func:`fw_gap`, relative to :func:`_qp_scale`) is ≤ ``tol``
    (so a row's answer does not depend on its batch); ``max_iter`` is a counted cap. A row never
    ends worse than its warm start ``Z0``. With ``return_info``: ``(Z, {"max_gap", "n_capped",
    "iters"})``, the worst final gap and the rows that hit the cap with their gap above ``tol``.
    """
    n, m = C.shape
    L = 2.0 * max(float(eigh(Q, eigvals_only=True, subset_by_index=[m - 1, m - 1])[0]), 1e-12)
    Z = np.full((n, m), 1.0 / m) if Z0 is None else project_simplex(Z0)
    start = Z.copy()
    ZQ = Z @ Q
    gap = fw_gap(Z, 2.0 * ZQ - 2.0 * C, _qp_scale(ZQ, Z, C))
    Y, YQ, Zprev, ZprevQ, t = Z.copy(), ZQ.copy(), Z.copy(), ZQ, np.ones(n)
    active = np.flatnonzero(gap > tol)
    it = 0
    while active.size and it < max_iter:
        it += 1
        Ya, Ca = Y[active], C[active]
        Znew = project_simplex(Ya - (2.0 * YQ[active] - 2.0 * Ca) / L)
        ZnQ = Znew @ Q
        gap[active] = fw_gap(Znew, 2.0 * ZnQ - 2.0 * Ca, _qp_scale(ZnQ, Znew, Ca))
        dz, dzQ = Znew - Zprev[active], ZnQ - ZprevQ[active]
        ta = np.where(np.einsum("ij,ij->i", Ya - Znew, dz) > 0, 1.0, t[active])  # restart
        tn = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * ta * ta))
        w = ((ta - 1.0) / tn)[:, None]
        Y[active], YQ[active] = Znew + w * dz, ZnQ + w * dzQ
        Zprev[active], ZprevQ[active] = Znew, ZnQ
        t[active] = tn
        active = active[gap[active] > tol]
    Z = Zprev
    worse = qp_values(Q, C, Z) > qp_values(Q, C, start)
    Z[worse] = start[worse]
    if not return_info:
        return Z
    return Z, {"max_gap": float(gap.max()) if n else 0.0, "n_capped": int(active.size), "iters": it}


def simplex_qp_coupled(Q: np.ndarray, C: np.ndarray, Gc: np.ndarray, a: float, Z0: np.ndarray, *,
                       max_iter: int = 500, tol: float = 1e-6):
    """min_Z Σᵢ (zᵢᵀQzᵢ − 2zᵢᵀcᵢ) + a‖ĜᵀZ‖² over row-simplices: the Z_u block with its exact HSIC
    coupling (Ĝ = ``Gc``, n×c centred groups). FISTA on the whole block (step 1/L, L = 2λ_max(Q) +
    2a‖Ĝ‖²) with function-value restart; stops when the worst row's relative Frank–Wolfe gap is
    ≤ ``tol``; never ends above its start ``Z0``. Returns ``(Z, {"max_gap", "n_capped", "iters"})``
    (``n_capped``: rows above ``tol`` when the cap stopped it)."""
    n, m = C.shape
    lam = float(np.linalg.eigvalsh(Gc.T @ Gc).max()) if Gc.shape[1] else 0.0
    L = 2.0 * max(float(eigh(Q, eigvals_only=True, subset_by_index=[m - 1, m - 1])[0]) + a * lam, 1e-12)

    def f_grad(Z):
        ZQ = Z @ Q
        T = Gc.T @ Z
        f = float(np.einsum("ij,ij->", ZQ, Z) - 2.0 * np.einsum("ij,ij->", Z, C) + a * np.sum(T * T))
        return f, 2.0 * ZQ - 2.0 * C + 2.0 * a * (Gc @ T), ZQ

    Z = project_simplex(Z0)
    f, grad, ZQ = f_grad(Z)
    f0, start = f, Z.copy()
    gap = fw_gap(Z, grad, _qp_scale(ZQ, Z, C))
    Y, gY, t, it = Z.copy(), grad, 1.0, 0
    while gap.max() > tol and it < max_iter:
        it += 1
        Znew = project_simplex(Y - gY / L)
        fn, gn, ZQ = f_grad(Znew)
        gap = fw_gap(Znew, gn, _qp_scale(ZQ, Znew, C))
        if fn > f:  # restart (O'Donoghue & Candès): momentum off, take a plain step from Z
            t = 1.0
            Znew = project_simplex(Z - grad / L)
            fn, gn, ZQ = f_grad(Znew)
            gap = fw_gap(Znew, gn, _qp_scale(ZQ, Znew, C))
        tn = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        Y = Znew + ((t - 1.0) / tn) * (Znew - Z)
        Z, f, grad, t = Znew, fn, gn, tn
        gY = f_grad(Y)[1] if t > 1.0 else grad
    if f > f0:
        Z = start
    return Z, {"max_gap": float(gap.max()) if n else 0.0, "n_capped": int((gap > tol).sum()),
               "iters": it}


def fair_assign(D: np.ndarray, codes: np.ndarray, rho: float, min_size: int = 1) -> np.ndarray:
    """Fair assignment to fixed centres [R]: labels minimising Σᵢ D[i, label_i] subject to every
    cluster's share of each group g lying in [ρ·p_g, p_g/ρ] (p_g the group's share of the data).

    The LP relaxation over x ∈ [0,1]^{n×k} (rows sum to 1; per cluster j and group g:
    ρ·p_g·N_j ≤ Σ_{i∈g} x_ij ≤ p_g·N_j/ρ, N_j = Σᵢ x_ij ≥ ``min_size``) is solved by HiGHS; a vertex
    has at most 2kc + k fractional rows, rounded to their largest entry, so a share can miss its
    bound by at most that many rows. ρ = 0 is the unconstrained nearest-centre assignment."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix, csr_matrix, vstack

    D = np.asarray(D, dtype=float)
    n, k = D.shape
    codes = np.asarray(codes)
    c = int(codes.max()) + 1 if n else 1
    if rho <= 0 or c < 2 or k < 2:
        return D.argmin(axis=1)
    if not rho <= 1:
        raise ValueError(f"rho must be in [0, 1], got {rho!r}")
    p = np.bincount(codes, minlength=c) / n
    idx = np.arange(n * k).reshape(n, k)  # x_ij at i*k + j
    rows_eq = coo_matrix((np.ones(n * k), (np.repeat(np.arange(n), k), idx.ravel())), shape=(n, n * k))
    blocks = []
    for g in range(c):
        ing = (codes == g).astype(float)
        for lo_hi, coef in ((-1.0, rho * p[g]), (1.0, p[g] / rho)):
            # lo: ρp_g N_j − Σ_{i∈g} x_ij ≤ 0 ; hi: Σ_{i∈g} x_ij − p_g/ρ N_j ≤ 0
            vals = lo_hi * (ing[:, None] - coef) * np.ones((1, k))
            r = np.tile(np.arange(k), n)
            blocks.append(csr_matrix((vals.ravel(), (r, idx.ravel())), shape=(k, n * k)))
    size = csr_matrix((-np.ones(n * k), (np.tile(np.arange(k), n), idx.ravel())), shape=(k, n * k))
    A_ub = vstack(blocks + [size]).tocsr()
    b_ub = np.concatenate([np.zeros(2 * c * k), -float(min_size) * np.ones(k)])
    scale = max(float(np.abs(D).max()), 1e-12)
    res = linprog((D / scale).ravel(), A_ub=A_ub, b_ub=b_ub, A_eq=rows_eq.tocsr(), b_eq=np.ones(n),
                  bounds=(0, 1), method="highs")
    if res.status != 0:  # infeasible (e.g. too few members of a group for k clusters)
        return D.argmin(axis=1)
    return res.x.reshape(n, k).argmax(axis=1)


def group_shares(labels: np.ndarray, codes: np.ndarray, k: int, c: int) -> np.ndarray:
    """k×c matrix: each cluster's share of every group divided by the group's share of the data
    (1 = mirrors the data; ``fair_assign`` keeps it in [ρ, 1/ρ]); empty clusters are NaN."""
    T = np.zeros((k, c))
    np.add.at(T, (labels, codes), 1.0)
    p = T.sum(0) / T.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        return (T / T.sum(1, keepdims=True)) / p


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
