"""``CDAL``: the scikit-learn estimator around the solver.

X is a list of n×d_v views (arrays or memmaps) or one n×Σd_v array cut by ``view_sizes``
(default: one view). ``sensitive_features`` (fit keyword; routed as metadata in pipelines via
``set_fit_request``) is one or several columns — several are intersected into one group per
distinct row; ``None`` means one group, where Ĝ = 0 makes the α-HSIC term identically zero and
the γ term only asks the sensitive graph to code a constant (the form ``check_estimator`` runs).
"""

from __future__ import annotations

import re
import warnings

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from . import core, metrics
from .config import SolverConfig
from .solver import CDALSolver, Views

ASSIGN = ("fair", "kmeans")


def weight_scales(n: int, dims, m: int) -> dict[str, float]:
    """Raw weight per unit of the scale-free knobs [R] (``weight_scale="auto"``):
    α_raw = a·Σd_v/n (‖Z_uᵀĜ‖² grows like n², the reconstruction like n·Σd_v);
    β_raw = b·n/(m·Σd_v) (β·A_oᵀA_o, of size β·m·Σd_v/…, against ZᵀZ ≈ n/m in the anchor
    blocks); γ_raw = g·Σd_v (‖G − Z_sW‖² grows like n, the reconstruction like n·Σd_v)."""
    d = float(sum(dims))
    return {"alpha": d / n, "beta": n / (m * d), "gamma": d}


def parse_anchors(n_anchors, k: int) -> int:
    """``"2k"`` → 2·k; an integer stays as it is."""
    if isinstance(n_anchors, str):
        m = re.fullmatch(r"\s*(\d+)\s*k\s*", n_anchors)
        if not m:
            raise ValueError(f"n_anchors must be an integer or a string like '2k', got {n_anchors!r}")
        return int(m.group(1)) * k
    if isinstance(n_anchors, (int, np.integer)) and n_anchors >= 1:
        return int(n_anchors)
    raise ValueError(f"n_anchors must be a positive integer or like '2k', got {n_anchors!r}")


def is_view_list(X) -> bool:
    """A list of views (each 2-D), as opposed to one array given as a list of rows."""
    return isinstance(X, (list, tuple)) and len(X) > 0 and all(np.ndim(v) == 2 for v in X)


class CDAL(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator):
    """Causal Disentangled Anchor Learning for fair multi-view clustering (ICML 2026).

    Fitted attributes: ``labels_``; ``semantic_graph_`` Z_u and ``sensitive_graph_`` Z_s (n×m,
    rows on the simplex: the paper's m×n graphs transposed); ``semantic_anchors_`` /
    ``sensitive_anchors_`` (per view m×d_v, in standardised units); ``W_`` (m×c, WᵀW = I);
    ``objective_`` (trace, one value per iteration plus the initial one); ``n_iter_``;
    ``cluster_centers_`` (in the spectral embedding); ``objective_terms_``; ``converged_``;
    ``alpha_raw_``, ``beta_raw_``, ``gamma_raw_`` (the weights the objective used);
    ``block_gaps_`` (per iteration: worst relative Frank–Wolfe gap of the Z_s and Z_u blocks, capped
    QP rows); ``hsic_`` (‖Z_uᵀĜ‖²/n², the semantic graph's dependence on the groups);
    ``anchor_balance_`` (Balance of the anchor clusters argmax Z_u) and ``balance_`` (of labels_).

    ``alpha``, ``beta``, ``gamma`` are scale-free knobs (``weight_scale="auto"``, the default:
    the raw weights are the knobs times :func:`weight_scales`); ``weight_scale="none"`` passes them
    raw, as the authors' grid does. ``assign="fair"`` (default, [R]) assigns the rows to the
    k-means centroids of the embedding under the share bound of :func:`core.fair_assign` with
    ``rho``; ``assign="kmeans"`` is the authors' plain k-means [S]. ``n_init`` fits from that many
    seeds and keeps the lowest objective. ``prox_only=True`` is an ablation (the Z_u proximal
    weight kept, the HSIC gradient dropped).
    """

    def __init__(self, n_clusters=8, n_anchors="2k", alpha=1.0, beta=1.0, gamma=1.0,
                 weight_scale="auto", assign="fair", rho=0.8, view_sizes=None,
                 zu_solver="linearized_qp", max_iter=50, tol=1e-3, qp_tol=1e-3, qp_max_iter=300,
                 n_init=1, prox_only=False, chunk_size=None, random_state=None):
        self.n_clusters = n_clusters
        self.n_anchors = n_anchors
        self.alpha = alpha
        self.beta = beta
        self.gamma = gamma
        self.weight_scale = weight_scale
        self.assign = assign
        self.rho = rho
        self.view_sizes = view_sizes
        self.zu_solver = zu_solver
        self.max_iter = max_iter
        self.tol = tol
        self.qp_tol = qp_tol
        self.qp_max_iter = qp_max_iter
        self.n_init = n_init
        self.prox_only = prox_only
        self.chunk_size = chunk_size
        self.random_state = random_state

    # --- input handling ------------------------------------------------------------------------
    def _views(self, X, reset: bool) -> list:
        if is_view_list(X):
            views = [check_array(v, dtype="numeric", ensure_min_samples=2 if reset else 1,
                                 copy=False) for v in X]
            n = views[0].shape[0]
            for i, v in enumerate(views):
                if v.shape[0] != n:
                    raise ValueError(f"view {i} has {v.shape[0]} rows, view 0 has {n}")
            sizes = [v.shape[1] for v in views]
            if reset:
                self.n_features_in_ = int(sum(sizes))
                self.view_sizes_ = sizes
            elif sizes != list(self.view_sizes_):
                raise ValueError(f"X has views of widths {sizes}, but CDAL was fitted on "
                                 f"{list(self.view_sizes_)}")
            return views
        X = validate_data(self, X, reset=reset, dtype="numeric", ensure_min_samples=2 if reset else 1)
        if reset:
            sizes = [X.shape[1]] if self.view_sizes is None else [int(s) for s in self.view_sizes]
            if sum(sizes) != X.shape[1] or min(sizes) < 1:
                raise ValueError(f"view_sizes {sizes} do not add up to the {X.shape[1]} columns of X")
            self.view_sizes_ = sizes
        return np.split(X, np.cumsum(self.view_sizes_)[:-1], axis=1)

    def _config(self, scales: dict) -> SolverConfig:
        for name in ("max_iter", "n_init", "qp_max_iter"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.weight_scale not in ("auto", "none"):
            raise ValueError(f"weight_scale must be 'auto' or 'none', got {self.weight_scale!r}")
        if self.assign not in ASSIGN:
            raise ValueError(f"assign must be one of {ASSIGN}, got {self.assign!r}")
        if not (isinstance(self.rho, (int, float)) and 0 <= self.rho <= 1):
            raise ValueError(f"rho must be a number in [0, 1], got {self.rho!r}")
        if self.weight_scale == "none":
            scales = {k: 1.0 for k in scales}
        w = {}
        for name in ("alpha", "beta", "gamma"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float, np.floating)) and v == v and 0 <= v < float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
            w[name] = float(v) * scales[name]
        return SolverConfig(**w, max_iter=int(self.max_iter), tol=float(self.tol),
                            zu_solver=self.zu_solver, qp_tol=float(self.qp_tol),
                            qp_max_iter=int(self.qp_max_iter), hsic_gradient=not self.prox_only)

    # --- fitting ------------------------------------------------------------------------------
    def fit(self, X, y=None, *, sensitive_features=None):
        views = self._views(X, reset=True)
        n, k = views[0].shape[0], int(self.n_clusters)
        if not 1 <= k <= n:
            raise ValueError(f"n_clusters={k} must be between 1 and the {n} samples")
        m = min(parse_anchors(self.n_anchors, k), n)
        if m < k:
            raise ValueError(f"n_anchors={m} must be at least n_clusters={k}")
        cfg = self._config(weight_scales(n, [v.shape[1] for v in views], m))
        if sensitive_features is None:
            codes, self.groups_ = np.zeros(n, dtype=np.int64), np.array([[0]])
        else:
            S = np.asarray(sensitive_features)
            if S.shape[0] != n:
                raise ValueError(f"sensitive_features has {S.shape[0]} rows, X has {n}")
            if S.ndim > 2:
                raise ValueError("sensitive_features must be one column or a 2-D table")
            codes, self.groups_ = core.group_codes(S)
        c = int(codes.max()) + 1
        if sensitive_features is not None and c < 2:
            warnings.warn("sensitive_features holds one group only: the α (HSIC) and γ terms and "
                          "the fair assignment have nothing to act on", UserWarning, stacklevel=2)
        if c > m:
            raise ValueError(f"{c} sensitive groups need at least {c} anchors (n_anchors={m})")
        rs = check_random_state(self.random_state)
        best, seed = None, None
        X_views = Views(views, self.chunk_size)
        for _ in range(int(self.n_init)):
            sd = int(rs.randint(0, 2**31 - 1))
            solver = CDALSolver(X_views, codes, c, m, cfg, seed=sd)
            try:
                st = solver.run()
                st.Zu, st.Zs = np.array(st.Zu), np.array(st.Zs)  # the in-memory result
            finally:
                solver.close()
            if best is None or st.objective[-1] < best.objective[-1]:
                best, seed = st, sd
        st = best
        Zu, Zs = st.Zu, st.Zs
        self.mean_, self.scale_ = X_views.mean, X_views.scale
        self.semantic_graph_, self.sensitive_graph_ = Zu, Zs
        self.semantic_anchors_, self.sensitive_anchors_ = st.Au, st.As
        self.W_ = st.W
        self.objective_ = np.asarray(st.objective)
        self.objective_terms_ = dict(st.terms)
        self.n_iter_ = st.n_iter
        self.converged_ = bool(st.converged)
        self.block_gaps_ = list(st.blocks)
        self.alpha_raw_, self.beta_raw_, self.gamma_raw_ = cfg.alpha, cfg.beta, cfg.gamma
        self.n_groups_ = c
        self.n_anchors_ = m
        self.fairness_terms_active_ = {"alpha": cfg.alpha > 0 and c > 1, "beta": cfg.beta > 0,
                                       "gamma": cfg.gamma > 0 and c > 1}
        if not self.converged_:
            warnings.warn(f"CDAL stopped at max_iter={cfg.max_iter} before the relative objective "
                          f"change fell below tol={cfg.tol:g}; raise max_iter", ConvergenceWarning,
                          stacklevel=2)
        self.embedding_basis_ = core.spectral_basis(Zu.T @ Zu, k)
        from sklearn.cluster import KMeans

        E = core.embed(Zu, self.embedding_basis_)
        km = KMeans(k, n_init=cfg.label_n_init, random_state=seed).fit(E)
        self.cluster_centers_ = km.cluster_centers_
        self.kmeans_labels_ = km.labels_
        self._codes = codes
        self.labels_ = self.relabel(self.assign, self.rho)
        self.hsic_ = core.hsic_term(Zu, codes, c) / float(n) ** 2
        self.anchor_balance_ = metrics.balance(Zu.argmax(1), codes)
        self.balance_ = metrics.balance(self.labels_, codes)
        return self

    def relabel(self, assign: str = "fair", rho: float = 0.8) -> np.ndarray:
        """The training rows' labels under another final step, from the fitted graph (no refit):
        ``"kmeans"`` (the authors' step) or ``"fair"`` at share bound ``rho``."""
        check_is_fitted(self, "kmeans_labels_")
        if assign == "kmeans":
            return self.kmeans_labels_
        if assign != "fair":
            raise ValueError(f"assign must be one of {ASSIGN}, got {assign!r}")
        E = core.embed(self.semantic_graph_, self.embedding_basis_)
        D = ((E[:, None, :] - self.cluster_centers_[None, :, :]) ** 2).sum(-1)
        return core.fair_assign(D, self._codes, float(rho))

    @property
    def _n_features_out(self) -> int:
        return int(self.n_clusters)

    def fit_transform(self, X, y=None, *, sensitive_features=None):
        return self.fit(X, sensitive_features=sensitive_features).transform(X)

    def fit_predict(self, X, y=None, *, sensitive_features=None):
        return self.fit(X, sensitive_features=sensitive_features).labels_

    # --- out of sample ------------------------------------------------------------------------
    def code(self, X):
        """(Z_u, Z_s) of new rows: simplex coding on the fitted anchors (no groups needed)."""
        check_is_fitted(self, "labels_")
        views = self._views(X, reset=False)
        std = [(np.asarray(v, dtype=float) - mu) / sd for v, mu, sd in zip(views, self.mean_, self.scale_)]
        return core.code_on_anchors(std, self.semantic_anchors_, self.sensitive_anchors_)

    def transform(self, X):
        """The row-normalised spectral embedding of new rows (n×n_clusters)."""
        Zu, _ = self.code(X)
        return core.embed(Zu, self.embedding_basis_)

    def predict(self, X):
        """Nearest fitted centroid in the embedding."""
        E = self.transform(X)
        d = ((E[:, None, :] - self.cluster_centers_[None, :, :]) ** 2).sum(-1)
        return np.argmin(d, axis=1)
