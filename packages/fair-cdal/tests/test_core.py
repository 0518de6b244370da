"""Exact identities and invariants of the CDAL maths (float64, small generic shapes)."""

from __future__ import annotations

import numpy as np
import pytest
from fair_cdal import core
from fair_cdal.config import SolverConfig
from fair_cdal.solver import CDALSolver, Views
from scipy.optimize import minimize


def brute_qp(Q, c):
    m = len(c)
    best = None
    for start in np.eye(m).tolist() + [np.full(m, 1 / m).tolist()]:
        r = minimize(lambda z: z @ Q @ z - 2 * z @ c, np.array(start), method="SLSQP",
                     bounds=[(0, 1)] * m, constraints=[{"type": "eq", "fun": lambda z: z.sum() - 1}],
                     options={"ftol": 1e-15, "maxiter": 500})
        if best is None or r.fun < best.fun:
            best = r
    return best.x


def test_simplex_projection_is_a_projection(rng):
    V = rng.normal(size=(200, 7)) * 3
    P = core.project_simplex(V)
    assert P.min() >= 0 and np.abs(P.sum(1) - 1).max() < 1e-12
    assert np.abs(core.project_simplex(P) - P).max() < 1e-12  # idempotent
    for v, p in zip(V[:5], P[:5]):  # equals the brute-force QP min ‖z − v‖²
        assert np.abs(brute_qp(np.eye(7), v) - p).max() < 1e-6


def test_simplex_qp_equals_brute_force_and_never_worsens_warm_start(rng):
    A = rng.normal(size=(6, 3))
    Q = A @ A.T + 0.05 * np.eye(6)
    C = rng.normal(size=(6, 6)) * 2
    Z = core.simplex_qp(Q, C, max_iter=5000, tol=1e-12)  # to optimality: the default stops at a gap
    for i in range(6):
        zb = brute_qp(Q, C[i])
        f = lambda z, c=C[i]: z @ Q @ z - 2 * z @ c  # noqa: E731
        assert f(Z[i]) <= f(zb) + 1e-7 * (1 + abs(f(zb))) and np.abs(Z[i] - zb).max() < 1e-4
    Z0 = core.project_simplex(rng.normal(size=(6, 6)))
    Zw = core.simplex_qp(Q, C, Z0, max_iter=1)
    assert np.all(core.qp_values(Q, C, Zw) <= core.qp_values(Q, C, Z0) + 1e-12)


def test_procrustes_is_orthonormal_and_optimal(rng):
    Zs = core.project_simplex(rng.normal(size=(50, 6)))
    G = core.one_hot(rng.integers(0, 3, 50), 3)
    W = core.procrustes(Zs.T @ G)
    assert np.abs(W.T @ W - np.eye(3)).max() < 1e-12
    best = np.sum((G - Zs @ W) ** 2)
    for _ in range(20):
        R = np.linalg.qr(rng.normal(size=(6, 3)))[0]
        assert best <= np.sum((G - Zs @ R) ** 2) + 1e-12


def test_hsic_identity(rng):
    Zu = core.project_simplex(rng.normal(size=(40, 5)))
    codes = rng.integers(0, 3, 40)
    assert core.hsic_term(Zu, codes, 3) == pytest.approx(core.hsic_trace(Zu, codes, 3), rel=1e-12)
    assert core.hsic_term(Zu, codes, 3) > 0
    assert core.hsic_term(Zu, np.zeros(40, int), 1) == 0.0  # one group: the term vanishes


@pytest.mark.parametrize("beta", [0.0, 1.0, 25.0])
def test_sylvester_blocks_solve_their_equations(rng, beta):
    Z = core.project_simplex(rng.normal(size=(80, 6)))
    R, other = rng.normal(size=(80, 9)), rng.normal(size=(6, 9))
    A = core.solve_anchors(Z.T @ Z, Z.T @ R, beta, other)
    assert core.sylvester_residual(Z.T @ Z, Z.T @ R, beta, other, A) < 1e-8
    f = lambda A: np.sum((R - Z @ A) ** 2) + beta * np.sum((other @ A.T) ** 2)  # noqa: E731
    for _ in range(5):  # and the solution is the block's minimiser
        assert f(A) <= f(A + 1e-3 * rng.normal(size=A.shape))


def _solver(data, **kw):
    views, y, g = data
    cfg = SolverConfig(**{"alpha": 0.05, "beta": 1.0, "gamma": 1.0, "max_iter": 8, "tol": 0.0, **kw})
    return CDALSolver(Views(views), g, 2, 6, cfg, seed=0)


@pytest.mark.parametrize("zu_solver", ["linearized_qp", "pgd"])
def test_objective_never_increases_and_matches_direct_terms(small, zu_solver):
    s = _solver(small, zu_solver=zu_solver)
    st = s.run()
    obj = np.array(st.objective)
    assert np.all(np.diff(obj) <= 1e-10 * obj[:-1]), obj
    assert obj[-1] < obj[0]
    # the streamed objective (from sums over samples) equals the direct four-term objective
    std = s.X.all(slice(None))
    direct = core.objective(std, st.Zu, st.Zs, st.Au, st.As, st.W, small[2], 2, 0.05, 1.0, 1.0)
    assert obj[-1] == pytest.approx(direct, rel=1e-9)
    assert np.abs(st.W.T @ st.W - np.eye(2)).max() < 1e-12
    assert st.Zu.min() >= 0 and np.abs(st.Zu.sum(1) - 1).max() < 1e-9


def test_zero_weights_one_view_is_simplex_anchor_coding(small):
    views, y, g = small
    s = CDALSolver(Views(views[:1]), g, 2, 6, SolverConfig(alpha=0, beta=0, gamma=0, max_iter=15,
                                                           tol=0.0, qp_max_iter=500, qp_tol=1e-8), seed=0)
    st = s.run()
    X = s.X.get(0, slice(None))
    Au, As = st.Au[0], st.As[0]
    R = X - st.Zs @ As  # semantic branch: code the rest on the semantic anchors over the simplex
    Zbest = core.simplex_qp(Au @ Au.T, R @ Au.T, None, max_iter=3000, tol=1e-13)
    f = lambda Z: core.qp_values(Au @ Au.T, R @ Au.T, Z).sum()  # noqa: E731
    assert f(st.Zu) <= f(Zbest) + 1e-6 * abs(f(Zbest))


@pytest.mark.parametrize("zu_solver", ["linearized_qp", "pgd"])
def test_hsic_term_is_what_alpha_lowers(small, zu_solver):
    """Switching the α mechanism on lowers ‖Z_uᵀĜ‖² (fails if the HSIC gradient's sign flips or
    the term is switched off, in either Z_u solver)."""
    off = _solver(small, alpha=0.0, max_iter=10, zu_solver=zu_solver).run()
    on = _solver(small, alpha=0.5, max_iter=10, zu_solver=zu_solver).run()
    codes = small[2]
    assert core.hsic_term(on.Zu, codes, 2) < 0.5 * core.hsic_term(off.Zu, codes, 2)


def test_spectral_basis_gives_left_singular_vectors(rng):
    Z = core.project_simplex(rng.normal(size=(30, 6)))
    U = np.linalg.svd(Z, full_matrices=False)[0][:, :3]
    E = Z @ core.spectral_basis(Z.T @ Z, 3)
    assert np.abs(np.abs(E.T @ U) - np.eye(3)).max() < 1e-8
