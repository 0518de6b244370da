"""The CDAL iteration over row blocks (notes §3, update order [S]).

Every statistic the closed-form blocks need is a sum over samples (ZᵀZ, ZᵀX_v, ZᵀG), so the
views are read ``chunk_size`` rows at a time (NumPy memmaps work) and the two n×m graphs live in
float64 memmaps when chunked; ``chunk_size=None`` is one block. Per iteration: three passes over
the data, O(n·m·(Σd_v + m)) work and O(m·Σd_v + m²) memory besides the graphs.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.linalg import eigh

from . import core
from .config import SolverConfig


class Views:
    """Standardised row-block access to a list of n×d_v views (arrays or memmaps; never copied)."""

    def __init__(self, views, chunk_size: int | None = None, mean=None, scale=None):
        self.views = list(views)
        self.n = self.views[0].shape[0]
        self.chunk = int(chunk_size) if chunk_size else self.n
        if mean is None:
            s1 = [np.zeros(v.shape[1]) for v in self.views]
            s2 = [np.zeros(v.shape[1]) for v in self.views]
            for sl in self.blocks():
                for i, v in enumerate(self.views):
                    b = np.asarray(v[sl], dtype=float)
                    s1[i] += b.sum(0)
                    s2[i] += (b * b).sum(0)
            mean = [a / self.n for a in s1]
            scale = [np.sqrt(np.maximum(b / self.n - mu * mu, 0.0)) for b, mu in zip(s2, mean)]
            scale = [np.where(s > 1e-12, s, 1.0) for s in scale]
        self.mean, self.scale = mean, scale

    def blocks(self):
        for start in range(0, self.n, self.chunk):
            yield slice(start, min(start + self.chunk, self.n))

    def get(self, i: int, sl) -> np.ndarray:
        return (np.asarray(self.views[i][sl], dtype=float) - self.mean[i]) / self.scale[i]

    def all(self, sl) -> list[np.ndarray]:
        return [self.get(i, sl) for i in range(len(self.views))]


@dataclass
class Stats:
    ZuZu: np.ndarray
    ZsZs: np.ndarray
    ZuZs: np.ndarray
    ZuX: list
    ZsX: list
    ZsG: np.ndarray
    GZu: np.ndarray
    colZu: np.ndarray


@dataclass
class CDALState:
    Zu: np.ndarray
    Zs: np.ndarray
    Au: list
    As: list
    W: np.ndarray
    objective: list = field(default_factory=list)
    terms: dict = field(default_factory=dict)
    n_iter: int = 0
    #: per outer iteration: worst relative Frank–Wolfe gap of the Z_s and Z_u blocks, QP rows that
    #: hit ``qp_max_iter`` above ``qp_tol``, and the Z_u re-linearisation rounds used
    blocks: list = field(default_factory=list)
    converged: bool = False


class CDALSolver:
    """Alternating minimisation of the four-term objective; ``step()`` is one outer iteration."""

    def __init__(self, views: Views, codes: np.ndarray, c: int, m: int, cfg: SolverConfig,
                 seed: int = 0, workdir: str | Path | None = None):
        self.X, self.codes, self.c, self.m, self.cfg, self.seed = views, codes, c, m, cfg, seed
        n = views.n
        self.p = np.bincount(codes, minlength=c) / n
        gram = np.diag(self.p * n) - n * np.outer(self.p, self.p)  # ĜᵀĜ (c×c)
        self.lam = float(np.linalg.eigvalsh(gram).max()) if c > 1 else 0.0
        self.XX = [0.0] * len(views.views)
        for sl in views.blocks():
            for i, b in enumerate(views.all(sl)):
                self.XX[i] += float(np.sum(b * b))
        self._tmp = None
        if views.chunk < n:
            self._tmp = tempfile.TemporaryDirectory(prefix="fair-cdal-", dir=workdir)
            mk = lambda name: np.lib.format.open_memmap(  # noqa: E731
                Path(self._tmp.name) / name, mode="w+", dtype=np.float64, shape=(n, m))
            Zu, Zs = mk("Zu.npy"), mk("Zs.npy")
        else:
            Zu, Zs = np.zeros((n, m)), np.zeros((n, m))
        self.state = self._init(Zu, Zs)
        self.stats = self._stats()
        self.state.objective.append(self._objective())

    def _G(self, sl) -> np.ndarray:
        return core.one_hot(self.codes[sl], self.c)

    def _init(self, Zu, Zs) -> CDALState:
        """k-means anchors on the concatenated standardised features (notes §3 [S]) fitted on at
        most ``init_sample`` rows; sensitive anchors = k-means of the residuals X − Z_u A^u [R]."""
        from sklearn.cluster import KMeans

        n, m, cfg = self.X.n, self.m, self.cfg
        rng = np.random.default_rng(self.seed)
        idx = np.sort(rng.choice(n, size=min(n, cfg.init_sample), replace=False))
        dims = np.cumsum([v.shape[1] for v in self.X.views])[:-1]
        Xs = np.hstack(self.X.all(idx))
        km = KMeans(m, n_init=cfg.kmeans_n_init, random_state=self.seed).fit(Xs)
        Cu = km.cluster_centers_
        Rs = Xs - Cu[km.labels_]
        km2 = KMeans(m, n_init=cfg.kmeans_n_init, random_state=self.seed + 1).fit(Rs)
        Cs = km2.cluster_centers_
        for sl in self.X.blocks():
            xb = np.hstack(self.X.all(sl))
            lu = _nearest(xb, Cu)
            Zu[sl] = core.one_hot(lu, m)
            Zs[sl] = core.one_hot(_nearest(xb - Cu[lu], Cs), m)
        Au, As = np.split(Cu, dims, axis=1), np.split(Cs, dims, axis=1)
        ZsG = sum(Zs[sl].T @ self._G(sl) for sl in self.X.blocks())
        return CDALState(Zu, Zs, Au, As, core.procrustes(ZsG))

    def _stats(self) -> Stats:
        m, V = self.m, len(self.X.views)
        st = Stats(np.zeros((m, m)), np.zeros((m, m)), np.zeros((m, m)),
                   [0.0] * V, [0.0] * V, np.zeros((m, self.c)), np.zeros((self.c, m)), np.zeros(m))
        Zu, Zs = self.state.Zu, self.state.Zs
        for sl in self.X.blocks():
            zu, zs, G = np.asarray(Zu[sl]), np.asarray(Zs[sl]), self._G(sl)
            st.ZuZu += zu.T @ zu
            st.ZsZs += zs.T @ zs
            st.ZuZs += zu.T @ zs
            st.ZsG += zs.T @ G
            st.GZu += G.T @ zu
            st.colZu += zu.sum(0)
            for i, b in enumerate(self.X.all(sl)):
                st.ZuX[i] = st.ZuX[i] + zu.T @ b
                st.ZsX[i] = st.ZsX[i] + zs.T @ b
        return st

    def _GcZu(self, st: Stats) -> np.ndarray:
        return st.GZu - np.outer(self.p, st.colZu)  # Ĝᵀ Z_u (c×m)

    def _objective(self) -> float:
        s, st, cfg = self.state, self.stats, self.cfg
        recon = 0.0
        for i, (au, as_) in enumerate(zip(s.Au, s.As)):
            recon += (self.XX[i] - 2 * np.sum(st.ZuX[i] * au) - 2 * np.sum(st.ZsX[i] * as_)
                      + np.sum((st.ZuZu @ au) * au) + 2 * np.sum((st.ZuZs @ as_) * au)
                      + np.sum((st.ZsZs @ as_) * as_))
        hsic = float(np.sum(self._GcZu(st) ** 2))
        orth = sum(float(np.sum((au @ as_.T) ** 2)) for au, as_ in zip(s.Au, s.As))
        group = self.X.n - 2 * np.sum(st.ZsG * s.W) + np.sum((st.ZsZs @ s.W) * s.W)
        s.terms = {"recon": float(recon), "hsic": hsic, "orth": orth, "group": float(group)}
        return float(recon + cfg.alpha * hsic + cfg.beta * orth + cfg.gamma * group)

    def _ridge(self, ZtZ) -> float:
        return self.cfg.ridge * max(float(np.trace(ZtZ)) / self.m, 1e-12)

    def step(self) -> float:
        s, cfg, st = self.state, self.cfg, self.stats
        # 1. W: orthogonal Procrustes on Z_sᵀG
        s.W = core.procrustes(st.ZsG)
        # 2. A^s_v: Sylvester
        s.As = [core.solve_anchors(st.ZsZs, st.ZsX[i] - st.ZuZs.T @ s.Au[i], cfg.beta, s.Au[i],
                                   self._ridge(st.ZsZs)) for i in range(len(s.Au))]
        # 3. Z_s: one simplex QP per row, Q shared
        Q = sum(a @ a.T for a in s.As) + cfg.gamma * s.W @ s.W.T
        cross = sum(a @ b.T for a, b in zip(s.Au, s.As))  # A^u A^sᵀ, m×m
        st.ZsZs[:], st.ZuZs[:], st.ZsG[:] = 0.0, 0.0, 0.0
        st.ZsX = [0.0] * len(s.As)
        zs_gap, capped = 0.0, 0
        for sl in self.X.blocks():
            xb, zu, G = self.X.all(sl), np.asarray(s.Zu[sl]), self._G(sl)
            C = sum(x @ a.T for x, a in zip(xb, s.As)) - zu @ cross + cfg.gamma * G @ s.W.T
            zs, info = core.simplex_qp(Q, C, np.asarray(s.Zs[sl]), max_iter=cfg.qp_max_iter,
                                       tol=cfg.qp_tol, return_info=True)
            zs_gap, capped = max(zs_gap, info["max_gap"]), capped + info["n_capped"]
            s.Zs[sl] = zs
            st.ZsZs += zs.T @ zs
            st.ZuZs += zu.T @ zs
            st.ZsG += zs.T @ G
            st.ZsX = [acc + zs.T @ x for acc, x in zip(st.ZsX, xb)]
        # 4. A^u_v: Sylvester
        s.Au = [core.solve_anchors(st.ZuZu, st.ZuX[i] - st.ZuZs @ s.As[i], cfg.beta, s.As[i],
                                   self._ridge(st.ZuZu)) for i in range(len(s.As))]
        # 5. Z_u
        zu = self._update_zu()
        s.blocks.append({"zs_gap": zs_gap, "zu_gap": zu["gap"], "qp_capped": capped + zu["capped"],
                         "zu_iters": zu["rounds"]})
        self.stats = self._stats()
        s.objective.append(self._objective())
        s.n_iter += 1
        return s.objective[-1]

    def _update_zu(self) -> dict:
        s, cfg = self.state, self.cfg
        P = sum(a @ a.T for a in s.Au)
        cross_t = sum(b @ a.T for a, b in zip(s.Au, s.As))  # A^s A^uᵀ
        a, lam = cfg.alpha, self.lam
        h = 1.0 if cfg.hsic_gradient else 0.0  # 0: the prox_only ablation
        T = self._GcZu(self.stats)
        if cfg.zu_solver == "linearized_qp":
            # the whole Z_u block to its relative Frank–Wolfe gap qp_tol, exact HSIC coupling
            # (FISTA on the block, core.simplex_qp_coupled) [R]. The authors' linearisation with a
            # proximal weight αλ is its majoriser; iterated to tolerance it reaches the same point,
            # so no proximal weight damps Z_u any more. ``prox_only`` keeps only the proximal pull
            # towards the previous Z_u (weight αλ) and drops the HSIC gradient.
            C0 = np.empty((self.X.n, self.m))
            Gc = np.empty((self.X.n, self.c))
            for sl in self.X.blocks():
                C0[sl] = sum(x @ au.T for x, au in zip(self.X.all(sl), s.Au)) - np.asarray(s.Zs[sl]) @ cross_t
                Gc[sl] = self._G(sl) - self.p
            zu0 = np.asarray(s.Zu)
            if h:
                z, info = core.simplex_qp_coupled(P, C0, Gc, a, zu0, max_iter=cfg.qp_max_iter,
                                                  tol=cfg.qp_tol)
            else:
                z, info = core.simplex_qp(P + a * lam * np.eye(self.m), C0 + a * lam * zu0, zu0,
                                          max_iter=cfg.qp_max_iter, tol=cfg.qp_tol, return_info=True)
            s.Zu[:] = z
            return {"gap": info["max_gap"], "capped": info["n_capped"], "rounds": info["iters"]}
        # "pgd": the modified copy's projected-gradient steps at 1/L [S]; a fixed number of steps,
        # so its gap is not driven to qp_tol (reported as NaN)
        L = 2 * float(eigh(P, eigvals_only=True, subset_by_index=[self.m - 1, self.m - 1])[0]) + 2 * a * lam
        for k in range(cfg.pgd_steps):
            if k:
                GZu = sum(self._G(sl).T @ np.asarray(s.Zu[sl]) for sl in self.X.blocks())
                colZu = sum(np.asarray(s.Zu[sl]).sum(0) for sl in self.X.blocks())
                T = GZu - np.outer(self.p, colZu)
            for sl in self.X.blocks():
                xb, zu, zs = self.X.all(sl), np.asarray(s.Zu[sl]), np.asarray(s.Zs[sl])
                Gc = self._G(sl) - self.p
                grad = (2 * zu @ P - 2 * (sum(x @ au.T for x, au in zip(xb, s.Au)) - zs @ cross_t)
                        + 2 * h * a * Gc @ T)
                s.Zu[sl] = core.project_simplex(zu - grad / L)
        return {"gap": float("nan"), "capped": 0, "rounds": cfg.pgd_steps}

    def run(self) -> CDALState:
        cfg, obj = self.cfg, self.state.objective
        self.state.converged = False
        for _ in range(cfg.max_iter):
            self.step()
            if abs(obj[-2] - obj[-1]) <= cfg.tol * max(abs(obj[-2]), 1e-300):
                self.state.converged = True
                break
        return self.state

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _nearest(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    d = (X * X).sum(1)[:, None] - 2 * X @ C.T + (C * C).sum(1)[None, :]
    return np.argmin(d, axis=1)
