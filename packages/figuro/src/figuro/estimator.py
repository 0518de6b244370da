"""``FiGuRO``: the scikit-dimension-style estimator around the autoencoder and the controller.

``fit(X)`` (one array) estimates one intrinsic dimension (``dimension_``); ``fit([X1, X2, ...])``
estimates the shared rank and one private rank per modality (``shared_dim_``,
``private_dims_``), with the whole trajectory in ``rank_history_``.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import replace

import numpy as np
import torch
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from icml26_shared.train import EarlyStopping

from .config import FiGuROConfig
from .core import SHARED, RankController, SharedPrivateAE


def _check_views(xs: list, min_rows: int = 1) -> list[np.ndarray]:
    """Each view through ``sklearn.utils.check_array`` (2-D, finite, numeric, dense), float32;
    equal row counts."""
    out = []
    for i, x in enumerate(xs):
        a = check_array(x, dtype=[np.float64, np.float32], input_name=f"view {i}")
        if a.shape[0] < min_rows:
            raise ValueError(f"need at least 4·latent_dim = {min_rows} rows, got {a.shape[0]} "
                             "sample(s): lower latent_dim or give more rows")
        out.append(a.astype(np.float32, copy=False))
    n = {a.shape[0] for a in out}
    if len(n) != 1:
        raise ValueError(f"views have different row counts: {[a.shape[0] for a in out]}")
    return out


def _is_views(X) -> bool:
    """Paired views: a list or tuple of 2-D arrays (a list of rows is one array)."""
    return isinstance(X, (list, tuple)) and len(X) > 0 and all(np.ndim(v) == 2 for v in X)


_CONFIG_PARAMS = tuple(FiGuROConfig.__dataclass_fields__)


class FiGuRO(TransformerMixin, BaseEstimator):
    """Fidelity-guided rank optimisation (reconstructed from the abstract; see README).

    A scikit-learn estimator: every hyperparameter is an explicit keyword (documented on
    ``FiGuROConfig``, which validates them at ``fit``), so ``get_params``, ``clone``,
    ``GridSearchCV`` and ``Pipeline`` work. ``fit(X)`` estimates one intrinsic dimension
    (``dimension_``, as in scikit-dimension); ``fit([X1, X2, ...])`` the shared and private ranks.
    ``n_threads`` torch CPU threads are used during ``fit`` (the caller's setting is restored);
    ``device`` is a torch device string.
    """

    def __init__(self, latent_dim: int = 32, distortion_threshold: float = 0.05,
                 update_every: int = 50, max_rounds: int = 200, patience: int = 5,
                 k_min: int = 0, confirm: int = 2, pretrain_max_steps: int = 3000,
                 eval_every: int = 25, plateau_patience: int = 3, plateau_tol: float = 0.002,
                 hidden: int = 64, depth: int = 1, lr: float = 5e-3, batch_size: int = 256,
                 val_fraction: float = 0.2, tie_tol: float = 0.01, cross_weight: float = 1.0,
                 schedule: str = "fidelity", spectral_tau: float = 0.1,
                 random_state: int | None = None, device: str = "cpu", n_threads: int = 1):
        self.latent_dim = latent_dim
        self.distortion_threshold = distortion_threshold
        self.update_every = update_every
        self.max_rounds = max_rounds
        self.patience = patience
        self.k_min = k_min
        self.confirm = confirm
        self.pretrain_max_steps = pretrain_max_steps
        self.eval_every = eval_every
        self.plateau_patience = plateau_patience
        self.plateau_tol = plateau_tol
        self.hidden = hidden
        self.depth = depth
        self.lr = lr
        self.batch_size = batch_size
        self.val_fraction = val_fraction
        self.tie_tol = tie_tol
        self.cross_weight = cross_weight
        self.schedule = schedule
        self.spectral_tau = spectral_tau
        self.random_state = random_state
        self.device = device
        self.n_threads = n_threads

    @property
    def config(self) -> FiGuROConfig:
        """The validated hyperparameters (raises ValueError on a bad value)."""
        return FiGuROConfig(**{k: getattr(self, k) for k in _CONFIG_PARAMS})

    # -- public API --------------------------------------------------------------------------
    def fit(self, X, y=None):
        cfg = self.config
        if not isinstance(self.n_threads, numbers.Integral) or self.n_threads < 1:
            raise ValueError(f"n_threads must be an integer >= 1, got {self.n_threads!r}")
        multimodal = _is_views(X)
        if multimodal and len(X) < 2:
            raise ValueError("a multimodal fit needs at least two views")
        if not multimodal:
            X = validate_data(self, X, dtype=[np.float64, np.float32], reset=True)
        xs = _check_views(list(X) if multimodal else [X], min_rows=4 * cfg.latent_dim)
        threads = torch.get_num_threads()
        torch.set_num_threads(self.n_threads)
        try:
            self._fit(cfg, xs, shared=multimodal)
        finally:
            torch.set_num_threads(threads)
        ranks = self.ranks_
        self.multimodal_ = multimodal
        if multimodal:
            self.shared_dim_ = ranks[SHARED]
            self.private_dims_ = [ranks[f"private{m}"] for m in range(len(xs))]
            self.dimension_ = self.shared_dim_ + sum(self.private_dims_)
        else:
            self.dimension_ = ranks["private0"]
        full = [sp for sp, k in ranks.items() if k >= self.k_max_[sp] and k > 0]
        if full:
            warnings.warn(f"FiGuRO: no reduction found in {', '.join(full)} (the answer equals "
                          f"the cap min(latent_dim, D) = {[self.k_max_[sp] for sp in full]})",
                          UserWarning, stacklevel=2)
        return self

    def fit_transform(self, X, y=None):
        return self.fit(X).transform(X)

    @torch.no_grad()
    def transform(self, X):
        """Codes in the kept directions (coordinates along each projection's top right-singular
        vectors). One array in: an (n, dimension_) array. Views in:
        ``{"shared": (n, k_s) or None, "private": [(n, k_m)]}``."""
        xs, multimodal, dtype = self._inputs(X)
        model = self.model_
        model.eval()
        h = [e(x) for e, x in zip(model.enc, xs)]
        priv = [(hm @ p.V[:, : p.rank]).cpu().numpy().astype(dtype) for hm, p in zip(h, model.priv)]
        if not multimodal:
            return priv[0]
        shared = None
        if model.has_shared:
            k = model.shr[0].rank
            shared = torch.stack([(hm @ s.V[:, :k]) * s.S[:k] for hm, s in zip(h, model.shr)])
            shared = shared.mean(0).cpu().numpy()
        return {"shared": shared, "private": priv}

    @torch.no_grad()
    def score(self, X, y=None) -> float:
        """Minus the reconstruction MSE of X (standardised) at the chosen ranks (higher is
        better), so that ``GridSearchCV`` can compare settings on held-out folds."""
        xs, _, _ = self._inputs(X)
        self.model_.eval()
        own, _ = self.model_.losses(xs, cross=False)
        return -float(own.mean())

    def _inputs(self, X):
        check_is_fitted(self, "ranks_")
        multimodal = _is_views(X)
        if multimodal != self.multimodal_:
            raise ValueError("fitted on " + ("paired views" if self.multimodal_ else "one array")
                             + "; transform / score need the same form")
        if not multimodal:
            X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        xs = _check_views(list(X) if multimodal else [X])
        if multimodal and [x.shape[1] for x in xs] != [len(m) for m in self.mean_]:
            raise ValueError(f"views have {[x.shape[1] for x in xs]} features; fitted on "
                             f"{[len(m) for m in self.mean_]}")
        dtype = np.asarray(X).dtype if not multimodal else np.float32
        return self._tensors(xs, standardise=True), multimodal, dtype

    # -- training ----------------------------------------------------------------------------
    def _tensors(self, xs, standardise=False):
        if standardise:
            xs = [(x - mu) / sd for x, mu, sd in zip(xs, self.mean_, self.scale_)]
        return [torch.as_tensor(x, dtype=torch.float32, device=self.device) for x in xs]

    def _fit(self, cfg: FiGuROConfig, xs: list[np.ndarray], shared: bool) -> None:
        seed = 0 if self.random_state is None else int(self.random_state)
        gen = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)
        n = xs[0].shape[0]
        perm = np.random.default_rng(seed).permutation(n)
        n_val = max(int(round(cfg.val_fraction * n)), 1)
        val_idx, tr_idx = perm[:n_val], perm[n_val:]
        self.mean_ = [x[tr_idx].mean(0) for x in xs]
        self.scale_ = [x[tr_idx].std(0) + 1e-6 for x in xs]
        data = self._tensors(xs, standardise=True)
        tr = [d[torch.as_tensor(tr_idx)] for d in data]
        va = [d[torch.as_tensor(val_idx)] for d in data]
        model = SharedPrivateAE([x.shape[1] for x in xs], cfg.latent_dim, cfg.hidden, shared,
                                depth=cfg.depth).to(self.device)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, foreach=True)  # multi-tensor update: cheaper on CPU
        self.model_ = model
        use_cross = shared and len(xs) > 1

        batches = self._batches(len(tr_idx), cfg.batch_size, gen)

        def train(steps: int) -> None:
            """``steps`` Adam updates on mini-batches (reshuffled every pass over the rows)."""
            model.train()
            for _ in range(steps):
                b = next(batches)
                own, crs = model.losses([t[b] for t in tr], cross=use_cross)
                loss = own.sum() + cfg.cross_weight * crs.sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

        @torch.no_grad()
        def distortion() -> list[float]:
            model.eval()
            own, crs = model.losses(va, cross=use_cross)
            return (own + crs).tolist() if use_cross else own.tolist()

        # never above the ambient dimension: k_max = min(L, D) per space (shared: smallest view)
        dims = {sp: (min(x.shape[1] for x in xs) if sp == SHARED
                     else xs[int(sp.removeprefix("private"))].shape[1]) for sp in model.spaces()}
        self.k_max_ = {sp: min(cfg.latent_dim, dims[sp]) for sp in model.spaces()}
        model.set_ranks(self.k_max_)

        # the unit of distortion: the held-out distortion of the zero code (x̂ = 0, the mean of
        # standardised data), per modality; λ and plateau_tol are fractions of it
        with torch.no_grad():
            scale = [float((v ** 2).mean()) * (2.0 if use_cross else 1.0) for v in va]
        self.distortion_scale_ = scale
        # pre-training at full rank to a validation plateau: stop when the held-out distortion
        # (in those units, summed) has not improved by more than plateau_tol for plateau_patience
        # evaluations, one every eval_every steps (icml26_shared.train.EarlyStopping)
        es = EarlyStopping(patience=cfg.plateau_patience, mode="min", min_delta=cfg.plateau_tol)
        curve, steps = [], 0
        while steps < cfg.pretrain_max_steps:
            k = min(cfg.eval_every, cfg.pretrain_max_steps - steps)
            train(k)
            steps += k
            d = distortion()
            rel = float(sum(a / b for a, b in zip(d, scale)))
            curve.append((steps, rel))
            if es.step(rel, at=steps):
                break
        self.pretrain_curve_ = curve
        self.pretrain_steps_ = steps
        self.pretrain_plateau_ = es.should_stop
        # the reference: the absolute held-out distortion at the plateau (no later drift)
        ref = distortion()
        self.reference_distortion_ = ref
        self._one_shot(model, va, ref, scale, cfg.distortion_threshold, distortion)
        ctl = RankController(model.ranks(), ref, threshold=cfg.distortion_threshold, scale=scale,
                             k_min=cfg.k_min, k_max=self.k_max_, confirm=cfg.confirm, patience=cfg.patience,
                             max_rounds=cfg.max_rounds, tie_tol=cfg.tie_tol)
        self.distortion_history_ = [ref]
        while not ctl.done:
            train(cfg.update_every)
            D = distortion()
            if cfg.schedule == "spectral":
                new = self._spectral_step(model, ctl, cfg.spectral_tau)
            else:
                cands = {}
                if not ctl.violated(D) and ctl._holds + 1 >= ctl.confirm:
                    # the candidates are measured only when this check may lead to a reduction
                    current = model.ranks()
                    for sp, r in ctl.proposals():
                        model.set_ranks({**current, sp: r})
                        cands[(sp, r)] = distortion()
                    model.set_ranks(current)
                new = ctl.step(D, cands)
            model.set_ranks(new)
            self.distortion_history_.append(D)
        if cfg.schedule == "fidelity":
            final, dist = ctl.result()
            model.set_ranks(final)
        else:
            final, dist = model.ranks(), self.distortion_history_[-1]
        self.ranks_ = final
        self.answer_distortion_ = dist
        self.rank_history_ = ctl.history
        self.events_ = ctl.events
        self.stop_reason_ = ctl.reason
        self.stopped_by_max_rounds_ = ctl.reason == "max_rounds reached"
        self.n_rounds_ = len(ctl.history) - 1

    def _one_shot(self, model, va, ref, scale, lam, distortion) -> None:
        """Ablations read off the pre-trained full-rank model, with no search and no re-training:
        ``one_shot_ranks_`` truncates each space alone to the smallest rank whose held-out
        distortion stays within the same fidelity bound; ``latent_codes_`` are the held-out
        full-rank codes (for lPCA of the trained latent)."""
        full = model.ranks()
        out = {}
        for sp, k_full in full.items():
            k_ok = k_full
            for k in range(k_full - 1, -1, -1):
                model.set_ranks({**full, sp: k})
                d = distortion()
                if not all(a <= r + lam * c for a, r, c in zip(d, ref, scale)):
                    break
                k_ok = k
            out[sp] = k_ok
        model.set_ranks(full)
        self.one_shot_ranks_ = out
        with torch.no_grad():
            s, p = model.codes(va)
            codes = [torch.cat([sm, pm], 1) for sm, pm in zip(s, p)] if s is not None else p
            self.latent_codes_ = [c.cpu().numpy() for c in codes]

    @staticmethod
    def _batches(m: int, size: int, gen: torch.Generator):
        while True:
            order = torch.randperm(m, generator=gen)
            for i in range(0, m, size):
                yield order[i: i + size]

    @staticmethod
    def _spectral_step(model: SharedPrivateAE, ctl: RankController, tau: float) -> dict[str, int]:
        """Ablation: drop the space whose smallest kept singular value is the smallest fraction
        of its largest, while below spectral_tau; no fidelity test."""
        rel = {}
        for sp, k in model.ranks().items():
            if k <= ctl.k_min:
                continue
            vals = [layer.spectrum()[:k] for layer in model.layers(sp)]
            rel[sp] = min(float(v[k - 1] / v[0]) if v[0] > 0 else 0.0 for v in vals)
        if rel and min(rel.values()) < tau:
            sp = min(rel, key=rel.get)
            ctl.ranks[sp] -= 1
            ctl.events.append(f"truncate {sp}")
        else:
            ctl.done, ctl.reason = True, "spectral schedule: no singular value below tau"
        ctl.history.append(dict(ctl.ranks))
        if len(ctl.history) - 1 >= ctl.max_rounds and not ctl.done:
            ctl.done, ctl.reason = True, "max_rounds reached"
        return dict(ctl.ranks)


def fit_with(config: FiGuROConfig, xs, seed: int, device: str = "cpu", **overrides) -> FiGuRO:
    """Fit with a full config (experiments use this to vary one field at a time)."""
    cfg = replace(config, **overrides)
    kw = {f: getattr(cfg, f) for f in _CONFIG_PARAMS}
    est = FiGuRO(random_state=seed, device=device, **kw)
    return est.fit(xs)


def rank_error(est: dict, truth: dict) -> dict:
    """Absolute rank error per space and whether all ranks are exact (rounded estimates)."""
    s = abs(round(est["shared"]) - truth["shared"])
    p = [abs(round(a) - b) for a, b in zip(est["private"], truth["private"])]
    return {"shared": s, "private": p, "mean": (s + sum(p)) / (1 + len(p)),
            "exact": bool(s == 0 and all(e == 0 for e in p))}


__all__ = ["FiGuRO", "fit_with", "rank_error"]
