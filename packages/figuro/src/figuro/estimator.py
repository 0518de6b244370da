"""``FiGuRO``: the scikit-dimension-style estimator around the autoencoder and the controller.

``fit(X)`` (one array) estimates one intrinsic dimension (``dimension_``); ``fit([X1, X2, ...])``
estimates the shared rank and one private rank per modality (``shared_dim_``,
``private_dims_``), with the whole trajectory in ``rank_history_``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from .config import FiGuROConfig
from .core import SHARED, RankController, SharedPrivateAE


def _check_views(xs: list) -> list[np.ndarray]:
    out = []
    for i, x in enumerate(xs):
        a = np.asarray(x, dtype=np.float32)
        if a.ndim == 1:
            a = a[:, None]
        if a.ndim != 2:
            raise ValueError(f"view {i} must be 2-D (rows × features), got shape {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError(f"view {i} contains NaN or infinite values")
        out.append(a)
    n = {a.shape[0] for a in out}
    if len(n) != 1:
        raise ValueError(f"views have different row counts: {[a.shape[0] for a in out]}")
    return out


class FiGuRO:
    """Fidelity-guided rank optimisation (reconstructed from the abstract; see README).

    Parameters mirror ``FiGuROConfig``; ``device`` is a torch device string. Also accepted:
    any other ``FiGuROConfig`` field as a keyword (``pretrain_epochs=...``, ``schedule=...``).
    """

    def __init__(self, latent_dim: int = 32, distortion_threshold: float = 0.05,
                 update_every: int = 10, max_rounds: int = 200, random_state: int | None = None,
                 device: str = "cpu", **config):
        self.config = FiGuROConfig(latent_dim=latent_dim, distortion_threshold=distortion_threshold,
                                   update_every=update_every, max_rounds=max_rounds, **config)
        self.random_state = random_state
        self.device = device

    # -- public API --------------------------------------------------------------------------
    def fit(self, X, y=None):
        multimodal = isinstance(X, (list, tuple))
        xs = _check_views(list(X) if multimodal else [X])
        if multimodal and len(xs) < 2:
            raise ValueError("a multimodal fit needs at least two views")
        L = self.config.latent_dim
        if xs[0].shape[0] < 4 * L:
            raise ValueError(f"need at least 4·latent_dim = {4 * L} rows, got {xs[0].shape[0]}")
        # the networks are tiny: one CPU thread is fastest and avoids thread thrashing on busy
        # machines; the caller's setting is restored afterwards
        threads = torch.get_num_threads()
        if str(self.device).startswith("cpu"):
            torch.set_num_threads(1)
        try:
            self._fit(xs, shared=multimodal)
        finally:
            torch.set_num_threads(threads)
        ranks = self.ranks_
        if multimodal:
            self.shared_dim_ = ranks[SHARED]
            self.private_dims_ = [ranks[f"private{m}"] for m in range(len(xs))]
            self.dimension_ = self.shared_dim_ + sum(self.private_dims_)
        else:
            self.dimension_ = ranks["private0"]
        return self

    def fit_transform(self, X, y=None):
        return self.fit(X).transform(X)

    @torch.no_grad()
    def transform(self, X) -> dict:
        """Codes in the kept directions: ``{"shared": (n, k_s) or None, "private": [(n, k_m)]}``
        (coordinates along each projection's top right-singular vectors)."""
        multimodal = isinstance(X, (list, tuple))
        xs = self._tensors(_check_views(list(X) if multimodal else [X]), standardise=True)
        model = self.model_
        h = [e(x) for e, x in zip(model.enc, xs)]
        priv = [(hm @ p.V[:, : p.rank]).cpu().numpy() for hm, p in zip(h, model.priv)]
        shared = None
        if model.has_shared:
            k = model.shr[0].rank
            shared = torch.stack([(hm @ s.V[:, :k]) * s.S[:k] for hm, s in zip(h, model.shr)])
            shared = shared.mean(0).cpu().numpy()
        return {"shared": shared, "private": priv}

    # -- training ----------------------------------------------------------------------------
    def _tensors(self, xs, standardise=False):
        if standardise:
            xs = [(x - mu) / sd for x, mu, sd in zip(xs, self.mean_, self.scale_)]
        return [torch.as_tensor(x, dtype=torch.float32, device=self.device) for x in xs]

    def _fit(self, xs: list[np.ndarray], shared: bool) -> None:
        cfg = self.config
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
        model = SharedPrivateAE([x.shape[1] for x in xs], cfg.latent_dim, cfg.hidden, shared).to(self.device)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.model_ = model
        use_cross = shared and len(xs) > 1

        def train(epochs: int) -> None:
            model.train()
            m = len(tr_idx)
            for _ in range(epochs):
                order = torch.randperm(m, generator=gen)
                for i in range(0, m, cfg.batch_size):
                    b = order[i: i + cfg.batch_size]
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

        train(cfg.pretrain_epochs)
        ref = distortion()
        self.reference_distortion_ = ref
        ctl = RankController(model.ranks(), ref, threshold=cfg.distortion_threshold, k_min=cfg.k_min,
                             k_max=cfg.latent_dim, patience=cfg.patience, max_rounds=cfg.max_rounds,
                             tie_tol=cfg.tie_tol)
        self.distortion_history_ = [ref]
        while not ctl.done:
            train(cfg.update_every)
            D = distortion()
            if cfg.schedule == "spectral":
                new = self._spectral_step(model, ctl, cfg.spectral_tau)
            else:
                cands = {}
                if not ctl.violated(D):
                    current = model.ranks()
                    for sp, r in ctl.proposals():
                        model.set_ranks({**current, sp: r})
                        cands[(sp, r)] = distortion()
                    model.set_ranks(current)
                new = ctl.step(D, cands)
            model.set_ranks(new)
            self.distortion_history_.append(D)
        if cfg.schedule == "fidelity":
            final = ctl.result()
            model.set_ranks(final)
        else:
            final = model.ranks()
        self.ranks_ = final
        self.rank_history_ = ctl.history
        self.events_ = ctl.events
        self.stop_reason_ = ctl.reason
        self.stopped_by_max_rounds_ = ctl.reason == "max_rounds reached"
        self.n_rounds_ = len(ctl.history) - 1

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
    kw = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
    est = FiGuRO(random_state=seed, device=device, **kw)
    return est.fit(xs)


def rank_error(est: dict, truth: dict) -> dict:
    """Absolute rank error per space and whether all ranks are exact (rounded estimates)."""
    s = abs(round(est["shared"]) - truth["shared"])
    p = [abs(round(a) - b) for a, b in zip(est["private"], truth["private"])]
    return {"shared": s, "private": p, "mean": (s + sum(p)) / (1 + len(p)),
            "exact": bool(s == 0 and all(e == 0 for e in p))}


__all__ = ["FiGuRO", "fit_with", "rank_error"]
