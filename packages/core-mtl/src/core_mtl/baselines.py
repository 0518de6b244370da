"""The baselines behind one ``Aggregator`` interface (a small registry: a new method is one
decorated class). Two kinds:

* ``grad`` methods see the task gradients on the shared parameters, ``G [T, P]``, and return one
  update direction ``[P]``: EW (the sum), MGDA (exact min-norm point of the convex hull: closed
  form for two tasks, ``scipy.optimize`` SLSQP otherwise), PCGrad and FairGrad (TorchJD), CAGrad
  and Nash-MTL (``scipy.optimize``; TorchJD's need cvxpy), GradNorm (learned weights).
* ``loss`` methods re-weight the task losses: UW, DWA, FAMO, STCH.

``single`` (one task per model) and ``mtan`` (architecture; EW losses) are handled by the trainer.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import torch
from scipy.optimize import minimize

METHODS: dict[str, type[Aggregator]] = {}
#: every --method name the trainer accepts
ALL_METHODS = ("core", "single", "ew", "uw", "dwa", "gradnorm", "mgda", "pcgrad", "cagrad",
               "nashmtl", "famo", "fairgrad", "stch", "mtan")


def register(name: str) -> Callable[[type[Aggregator]], type[Aggregator]]:
    def deco(cls: type[Aggregator]) -> type[Aggregator]:
        cls.name = name
        METHODS[name] = cls
        return cls
    return deco


class Aggregator:
    """``kind == "grad"``: ``aggregate(G, losses) -> [P]``; ``kind == "loss"``: ``combine(losses)``
    -> scalar. ``end_epoch`` / ``observe`` let stateful methods update their weights."""

    name = ""
    kind = "grad"
    #: clip the shared update at this norm (None: no clip)
    max_norm: float | None = None
    #: per-task weights of the task-specific parameters' gradients after ``aggregate`` (None: sum)
    head_weights: torch.Tensor | None = None

    def __init__(self, n_tasks: int):
        self.n_tasks = n_tasks

    def aggregate(self, G: torch.Tensor, losses: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def combine(self, losses: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def parameters(self) -> list[torch.nn.Parameter]:
        return []

    def to(self, device) -> Aggregator:
        """Move learned weights to ``device`` (UW's log-variances); the rest follows its inputs."""
        return self

    def end_epoch(self, mean_losses: np.ndarray) -> None:
        pass

    def observe(self, losses: torch.Tensor) -> None:
        pass


def _simplex_qp(fun, T: int) -> np.ndarray:
    cons = ({"type": "eq", "fun": lambda w: w.sum() - 1.0},)
    res = minimize(fun, np.full(T, 1.0 / T), method="SLSQP", bounds=[(0.0, 1.0)] * T,
                   constraints=cons, options={"ftol": 1e-12, "maxiter": 200})
    w = np.clip(res.x, 0, None)
    return w / w.sum()


def min_norm_weights(K: np.ndarray) -> np.ndarray:
    """argmin_{w in simplex} w^T K w: closed form for two tasks, SLSQP otherwise."""
    T = K.shape[0]
    if T == 1:
        return np.ones(1)
    if T == 2:
        den = K[0, 0] + K[1, 1] - 2 * K[0, 1]
        g = 0.5 if den <= 1e-20 else float(np.clip((K[1, 1] - K[0, 1]) / den, 0.0, 1.0))
        return np.array([g, 1 - g])
    return _simplex_qp(lambda w: w @ K @ w, T)


@register("ew")
class EW(Aggregator):
    def aggregate(self, G, losses=None):
        return G.sum(0)


@register("mgda")
class MGDA(Aggregator):
    def aggregate(self, G, losses=None):
        K = (G.double() @ G.double().T).cpu().numpy()
        w = torch.as_tensor(min_norm_weights(K), dtype=G.dtype, device=G.device)
        return w @ G


@register("pcgrad")
class PCGrad(Aggregator):
    def __init__(self, n_tasks):
        super().__init__(n_tasks)
        from torchjd.aggregation import PCGrad as _P

        self._agg = _P()

    def aggregate(self, G, losses=None):
        return self._agg(G)


@register("fairgrad")
class FairGrad(Aggregator):
    alpha = 1.0  # FairGrad's alpha-fairness; 1 = proportional fairness [R: their common default]

    def __init__(self, n_tasks):
        super().__init__(n_tasks)
        from torchjd.aggregation import FairGrad as _F

        self._agg = _F(alpha=self.alpha)

    def aggregate(self, G, losses=None):
        return self._agg(G)


@register("cagrad")
class CAGrad(Aggregator):
    c = 0.4  # CAGrad's c [CAGrad paper/code default for NYUv2]

    def aggregate(self, G, losses=None):
        T = G.shape[0]
        K = (G.double() @ G.double().T).cpu().numpy()
        g0_norm = np.sqrt(max(K.mean(), 1e-20))  # ||g0||, g0 = mean gradient
        phi = (self.c * g0_norm) ** 2
        b = K.mean(1)  # g_w . g0 = w^T K 1/T
        w = _simplex_qp(lambda w: w @ b + np.sqrt(phi * max(w @ K @ w, 1e-20)), T)
        w_t = torch.as_tensor(w, dtype=G.dtype, device=G.device)
        gw = w_t @ G
        lam = np.sqrt(phi) / max(float(gw.norm()), 1e-12)
        return (G.mean(0) + lam * gw) / (1 + self.c**2)


@register("nashmtl")
class NashMTL(Aggregator):
    """Nash bargaining as the reference code does it [C: LibMTL ``weighting/Nash_MTL.py``; Navon et
    al. 2022 ``nash-mtl``]: alpha > 0 with the *unnormalised* (G G^T) alpha = 1 / alpha, so the
    shared update alpha G has norm sqrt(T); it is then clipped at max-norm 1.0 (LibMTL's default
    ``max_norm``); the task-specific parameters get sum_t alpha_t grad L_t; a solver failure warns
    and keeps the previous alpha (ones at the start), as LibMTL does.

    The convex problem min 0.5 a^T K a - sum log a (gradient K a - 1/a) is solved on K / s
    (s = max |K|, for conditioning) and rescaled: if (K/s) b = 1/b then a = b / sqrt(s) solves
    K a = 1/a [R: scipy solver in place of LibMTL's cvxpy/ECOS]."""

    max_norm = 1.0  # clip on the shared update [C: LibMTL Nash_MTL max_norm default]
    tol = 1e-6  # accepted residual max_i |alpha_i (K alpha)_i - 1| [R]

    def __init__(self, n_tasks):
        super().__init__(n_tasks)
        self.alpha = np.ones(n_tasks)  # LibMTL's initial prvs_alpha
        self.head_weights: torch.Tensor | None = None

    def solve(self, K: np.ndarray) -> np.ndarray | None:
        """alpha with alpha_i (K alpha)_i = 1 for every i, or None when the solver fails."""
        T = K.shape[0]
        s = float(np.abs(K).max())
        if not np.isfinite(K).all() or s <= 1e-30:
            return None
        Ks = K / s
        res = minimize(lambda a: 0.5 * a @ Ks @ a - np.log(a).sum(), np.ones(T),
                       jac=lambda a: Ks @ a - 1.0 / a, method="L-BFGS-B", bounds=[(1e-8, None)] * T,
                       options={"ftol": 0.0, "gtol": 1e-13, "maxiter": 2000})
        a = res.x / np.sqrt(s)
        if not (np.isfinite(a).all() and (a > 0).all()):
            return None
        if np.abs(a * (K @ a) - 1.0).max() > self.tol:
            return None
        return a

    def weights(self, G: torch.Tensor) -> np.ndarray:
        K = (G.double() @ G.double().T).cpu().numpy()
        a = self.solve(K)
        if a is None:
            warnings.warn("Nash-MTL: the bargaining solver failed; keeping the previous alpha",
                          RuntimeWarning, stacklevel=2)
        else:
            self.alpha = a
        return self.alpha

    def aggregate(self, G, losses=None):
        a = torch.as_tensor(self.weights(G), dtype=G.dtype, device=G.device)
        self.head_weights = a
        return a @ G  # norm sqrt(T); the trainer clips it at max_norm


@register("gradnorm")
class GradNorm(Aggregator):
    alpha, lr = 1.5, 0.025  # GradNorm's alpha for NYUv2 and its weight learning rate [Chen et al. 2018]

    def __init__(self, n_tasks):
        super().__init__(n_tasks)
        self.w = np.ones(n_tasks)
        self.l0: np.ndarray | None = None

    def aggregate(self, G, losses=None):
        L = losses.detach().cpu().double().numpy()
        if self.l0 is None:
            self.l0 = L.copy()
        norms = G.double().norm(dim=1).cpu().numpy()
        gw = self.w * norms
        r = (L / self.l0) / np.mean(L / self.l0)
        target = gw.mean() * r**self.alpha
        out = torch.as_tensor(self.w, dtype=G.dtype, device=G.device) @ G
        self.w = np.clip(self.w - self.lr * np.sign(gw - target) * norms / max(norms.mean(), 1e-20), 1e-3, None)
        self.w *= self.n_tasks / self.w.sum()
        return out


@register("uw")
class UW(Aggregator):
    kind = "loss"

    def __init__(self, n_tasks):
        super().__init__(n_tasks)
        self.log_var = torch.nn.Parameter(torch.zeros(n_tasks))

    def parameters(self):
        return [self.log_var]

    def to(self, device):
        self.log_var.data = self.log_var.data.to(device)
        return self

    def combine(self, losses):
        return (torch.exp(-self.log_var) * losses + self.log_var).sum()


@register("dwa")
class DWA(Aggregator):
    kind = "loss"
    temperature = 2.0  # [Liu et al. 2019]

    def __init__(self, n_tasks):
        super().__init__(n_tasks)
        self.history: list[np.ndarray] = []
        self.w = torch.ones(n_tasks)

    def end_epoch(self, mean_losses):
        self.history.append(np.asarray(mean_losses, dtype=float))
        if len(self.history) >= 2:
            r = self.history[-1] / np.maximum(self.history[-2], 1e-12)
            e = np.exp(r / self.temperature)
            self.w = torch.as_tensor(self.n_tasks * e / e.sum(), dtype=torch.float32)

    def combine(self, losses):
        return (self.w.to(losses) * losses).sum()


@register("famo")
class FAMO(Aggregator):
    """Fast adaptive multitask optimisation (Liu et al. 2023): softmax logits xi updated from the
    change of log losses between consecutive steps (lr 0.025, decay 1e-3) [FAMO code]."""

    kind = "loss"

    def __init__(self, n_tasks):
        super().__init__(n_tasks)
        self.xi = torch.zeros(n_tasks, requires_grad=True)
        self.opt = torch.optim.Adam([self.xi], lr=0.025, weight_decay=1e-3)
        self.prev: torch.Tensor | None = None

    def observe(self, losses):
        cur = losses.detach().float().cpu().clamp_min(1e-8)
        if self.prev is not None:
            delta = self.prev.log() - cur.log()
            self.opt.zero_grad()
            z = torch.softmax(self.xi, 0)
            (g,) = torch.autograd.grad(z, self.xi, grad_outputs=delta)
            self.xi.grad = g
            self.opt.step()
        self.prev = cur

    def combine(self, losses):
        z = torch.softmax(self.xi.detach(), 0).to(losses)
        d = losses.clamp_min(1e-8)
        c = (z / d).sum().detach()
        return (z * d.log()).sum() / c


@register("stch")
class STCH(Aggregator):
    """Smooth Tchebycheff scalarisation (Lin et al. 2024): mu log sum exp(L_i / L_i0 / mu) [R: mu]."""

    kind = "loss"
    mu = 0.5

    def __init__(self, n_tasks):
        super().__init__(n_tasks)
        self.l0: torch.Tensor | None = None

    def combine(self, losses):
        if self.l0 is None:
            self.l0 = losses.detach().clamp_min(1e-8)
        return self.mu * torch.logsumexp(losses / self.l0 / self.mu, 0)


def make(method: str, n_tasks: int) -> Aggregator:
    if method not in METHODS:
        raise KeyError(f"unknown aggregator {method!r} (choose from {', '.join(METHODS)})")
    return METHODS[method](n_tasks)


def aggregate(method: str, G) -> torch.Tensor:
    """Aggregate task gradients ``G [T, P]`` (torch or NumPy) into one update ``[P]`` with a
    gradient method (ew, mgda, pcgrad, cagrad, nashmtl, fairgrad, gradnorm's first step), clipped
    as the trainer clips it (Nash-MTL: max-norm 1)."""
    G = torch.as_tensor(np.asarray(G) if not isinstance(G, torch.Tensor) else G)
    agg = make(method, G.shape[0])
    if agg.kind != "grad":
        raise ValueError(f"{method} re-weights losses; it has no gradient aggregation")
    d = agg.aggregate(G, torch.ones(G.shape[0], dtype=G.dtype))
    if agg.max_norm is not None:  # the trainer's clip_grad_norm_ on the shared parameters
        p = torch.nn.Parameter(torch.zeros_like(d))
        p.grad = d.clone()
        torch.nn.utils.clip_grad_norm_([p], agg.max_norm)
        d = p.grad
    return d
