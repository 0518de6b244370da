"""``CDAL``: the scikit-learn estimator around the solver.

X is a list of n×d_v views (arrays or memmaps) or one n×Σd_v array cut by ``view_sizes``
(default: one view). ``sensitive_features`` (fit keyword; routed as metadata in pipelines via
``set_fit_request``) is one or several columns — several are intersected into one group per
distinct row; ``None`` means one group, where Ĝ = 0 makes the α-HSIC term identically zero and
the γ term only asks the sensitive graph to code a constant (the form ``check_estimator`` runs).
"""

from __future__ import annotations

import re

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from . import core
from .config import SolverConfig
from .solver import CDALSolver, Views


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
    ``cluster_centers_`` (in the spectral embedding); ``objective_terms_``.
    """

    def __init__(self, n_clusters=8, n_anchors="2k", alpha=1.0, beta=1.0, gamma=1.0,
                 view_sizes=None, zu_solver="linearized_qp", max_iter=50, tol=1e-3,
                 chunk_size=None, random_state=None):
        self.n_clusters = n_clusters
        self.n_anchors = n_anchors
        self.alpha = alpha
        self.beta = beta
        self.gamma = gamma
        self.view_sizes = view_sizes
        self.zu_solver = zu_solver
        self.max_iter = max_iter
        self.tol = tol
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

    def _config(self) -> SolverConfig:
        for name in ("max_iter",):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        return SolverConfig(alpha=float(self.alpha), beta=float(self.beta), gamma=float(self.gamma),
                            max_iter=int(self.max_iter), tol=float(self.tol), zu_solver=self.zu_solver)

    # --- fitting ------------------------------------------------------------------------------
    def fit(self, X, y=None, *, sensitive_features=None):
        cfg = self._config()
        views = self._views(X, reset=True)
        n, k = views[0].shape[0], int(self.n_clusters)
        if not 1 <= k <= n:
            raise ValueError(f"n_clusters={k} must be between 1 and the {n} samples")
        m = min(parse_anchors(self.n_anchors, k), n)
        if m < k:
            raise ValueError(f"n_anchors={m} must be at least n_clusters={k}")
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
        if c > m:
            raise ValueError(f"{c} sensitive groups need at least {c} anchors (n_anchors={m})")
        seed = int(check_random_state(self.random_state).randint(0, 2**31 - 1))
        solver = CDALSolver(Views(views, self.chunk_size), codes, c, m, cfg, seed=seed)
        try:
            st = solver.run()
            Zu, Zs = np.array(st.Zu), np.array(st.Zs)  # the in-memory result
        finally:
            solver.close()
        self.mean_, self.scale_ = solver.X.mean, solver.X.scale
        self.semantic_graph_, self.sensitive_graph_ = Zu, Zs
        self.semantic_anchors_, self.sensitive_anchors_ = st.Au, st.As
        self.W_ = st.W
        self.objective_ = np.asarray(st.objective)
        self.objective_terms_ = dict(st.terms)
        self.n_iter_ = st.n_iter
        self.n_groups_ = c
        self.n_anchors_ = m
        self.fairness_terms_active_ = {"alpha": cfg.alpha > 0 and c > 1, "beta": cfg.beta > 0,
                                       "gamma": cfg.gamma > 0 and c > 1}
        self.embedding_basis_ = core.spectral_basis(Zu.T @ Zu, k)
        from sklearn.cluster import KMeans

        km = KMeans(k, n_init=cfg.label_n_init, random_state=seed).fit(core.embed(Zu, self.embedding_basis_))
        self.cluster_centers_ = km.cluster_centers_
        self.labels_ = km.labels_
        return self

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
