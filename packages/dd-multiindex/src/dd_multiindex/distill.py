"""The distillers behind one registry [R: the paper analyses "practical, gradient-based" dataset
distillation; which ones exactly is reconstructed from its introduction].

- ``gm``: gradient matching (Zhao et al. 2021, DC): S₁ = {(x̃_i, ỹ_i)} so that the first-layer
  gradient on S₁ matches the real one at several random initialisations (squared + per-neuron
  cosine distance, ``torch.optim.Adam``); the gradient on S₁ is the closed form ``grad_sum``,
  differentiable in (x̃, ỹ) and tested equal to ``torch.autograd.grad(create_graph=True)``.
- ``pm``: one-step performance matching (Wang et al. 2018): S₁ so that the learner after its one
  step on S₁, with ridge on a real batch, has low real loss (autograd through the step).
- ``distill_labels``: stage-2 label distillation: m₂ labels on inputs regenerated from a seed,
  the least-squares labels whose ridge fit reproduces the real-data ridge fit on real inputs.

Every distiller starts from m₁ real points (its 0-step ablation) and takes the real stage-1 data.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .config import DistillConfig
from .core import TwoStageLearner, _gen, stage2_inputs

Distiller = Callable[..., tuple[torch.Tensor, torch.Tensor]]
DISTILLERS: dict[str, Distiller] = {}


def register_distiller(name: str) -> Callable[[Distiller], Distiller]:
    def deco(fn: Distiller) -> Distiller:
        DISTILLERS[name] = fn
        return fn

    return deco


def matching_inits(learner: TwoStageLearner, d: int, n_inits: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K random symmetric inits (K, L, d) drawn from ``seed`` (never the learner's own seed)."""
    Ws = [learner.init(d, seed=seed * 1009 + 17 + k)[0] for k in range(n_inits)]
    return torch.stack(Ws), learner.init(d)[1]


def real_gradients(learner: TwoStageLearner, W0s: torch.Tensor, a: torch.Tensor, X: torch.Tensor,
                   y: torch.Tensor, chunk: int = 16384) -> torch.Tensor:
    """The real-data first-layer gradient at each init, (K, L, d), chunked over the data."""
    out = torch.zeros_like(W0s)
    for s in range(0, len(y), chunk):
        out += learner.grad_sum(W0s, a, X[s:s + chunk], y[s:s + chunk])
    return out / len(y)


def gm_loss(G_s: torch.Tensor, G_d: torch.Tensor, cos_weight: float = 1.0) -> torch.Tensor:
    """Σ_k ‖G_s − G_d‖²/‖G_d‖² + cos_weight·Σ_k mean_j (1 − cos(G_s[k, j], G_d[k, j]))."""
    sq = ((G_s - G_d) ** 2).sum((-1, -2)) / (G_d**2).sum((-1, -2)).clamp_min(1e-30)
    cos = torch.nn.functional.cosine_similarity(G_s, G_d, dim=-1, eps=1e-12)
    return (sq + cos_weight * (1 - cos).mean(-1)).sum()


def init_from_real(X: torch.Tensor, y: torch.Tensor, m: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """m real points drawn without replacement: the distillers' starting point (0-step ablation).
    Raises ``ValueError`` when m exceeds the real points (a distilled set of m₁ > n real points
    would silently come back smaller)."""
    if not 1 <= m <= len(y):
        raise ValueError(f"m1={m} distilled points need 1 <= m1 <= {len(y)}, the real stage-1 points available")
    idx = torch.randperm(len(y), generator=_gen(seed), device="cpu")[:m].to(X.device)
    return X[idx].clone(), y[idx].clone()


@register_distiller("gm")
def gradient_matching(learner: TwoStageLearner, X: torch.Tensor, y: torch.Tensor, m1: int,
                      cfg: DistillConfig, seed: int, *, G_real: torch.Tensor | None = None,
                      inits: tuple[torch.Tensor, torch.Tensor] | None = None,
                      start: tuple[torch.Tensor, torch.Tensor] | None = None,
                      log: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Distil m₁ points by gradient matching against the real stage-1 data (X, y).

    Adam on (x̃, ỹ) until the matching loss plateaus (``plateau_reached``: no fall larger than
    ``cfg.plateau_tol`` × the first loss in ``cfg.plateau_patience`` steps), at most ``cfg.steps``
    steps. With ``start`` given, its points are the set (m₁ = their number). ``log``, if given,
    receives ``loss`` (the loss before each step), ``steps`` and ``stopped`` ("plateau" or "cap")."""
    d = X.shape[1]
    W0s, a = inits if inits is not None else matching_inits(learner, d, cfg.n_inits, seed)
    G_d = real_gradients(learner, W0s, a, X, y) if G_real is None else G_real
    xs, ys = start if start is not None else init_from_real(X, y, m1, seed)
    xs, ys = xs.clone().requires_grad_(True), ys.clone().requires_grad_(True)
    opt = torch.optim.Adam([xs, ys], lr=cfg.lr)
    losses: list[float] = []
    stopped = "cap"
    for _step in range(cfg.steps):
        opt.zero_grad(set_to_none=True)
        G_s = learner.grad_sum(W0s, a, xs, ys) / len(xs)  # the mean over the set; closed form = autograd's
        loss = gm_loss(G_s, G_d, cfg.cos_weight)
        losses.append(loss.item())
        if plateau_reached(losses, cfg.plateau_patience, cfg.plateau_tol):
            stopped = "plateau"
            break
        loss.backward()
        opt.step()
    if log is not None:
        log.update(loss=losses, steps=len(losses), stopped=stopped if cfg.steps else "cap")
    return xs.detach(), ys.detach()


def plateau_reached(losses: list[float], patience: int, tol: float) -> bool:
    """The plateau rule: the best loss of the last ``patience`` steps is no lower than the best before
    them minus ``tol`` × the first loss (``patience`` = 0 switches the rule off)."""
    if patience <= 0 or len(losses) <= patience:
        return False
    return min(losses[-patience:]) > min(losses[:-patience]) - tol * abs(losses[0])


@register_distiller("pm")
def performance_matching(learner: TwoStageLearner, X: torch.Tensor, y: torch.Tensor, m1: int,
                         cfg: DistillConfig, seed: int, **_: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Distil m₁ points so that one step on them, then ridge on a real batch, fits real data."""
    d = X.shape[1]
    W0s, a = matching_inits(learner, d, cfg.n_inits, seed)
    xs, ys = init_from_real(X, y, m1, seed)
    xs, ys = xs.clone().requires_grad_(True), ys.clone().requires_grad_(True)
    opt = torch.optim.Adam([xs, ys], lr=cfg.lr)
    g = _gen(seed + 1)
    b = learner.biases()
    eye = torch.eye(learner.L, dtype=X.dtype)
    for _ in range(cfg.steps):
        idx = torch.randint(len(y), (2 * cfg.pm_batch,), generator=g, device="cpu").to(X.device)
        Xf, yf = X[idx[: cfg.pm_batch]], y[idx[: cfg.pm_batch]]  # ridge fit on one half
        Xe, ye = X[idx[cfg.pm_batch:]], y[idx[cfg.pm_batch:]]  # real loss on the other
        opt.zero_grad(set_to_none=True)
        G_s = learner.grad_autograd(W0s, a, xs, ys, create_graph=True)
        W1 = W0s - learner.eta1 * G_s
        loss = 0.0
        for k in range(len(W1)):
            Pf = learner.act.fn(Xf @ W1[k].T + b)
            coef = torch.linalg.solve(Pf.T @ Pf / len(yf) + learner.ridge * eye, Pf.T @ yf / len(yf))
            loss = loss + ((learner.act.fn(Xe @ W1[k].T + b) @ coef - ye) ** 2).mean()
        loss.backward()
        opt.step()
    return xs.detach(), ys.detach()


def distill_labels(learner: TwoStageLearner, W1: torch.Tensor, X2: torch.Tensor, y2: torch.Tensor,
                   m2: int, seed2: int) -> torch.Tensor:
    """m₂ labels on ``stage2_inputs(seed2, m2, d)`` whose ridge fit best reproduces, on the real
    stage-2 inputs X2, the predictions of the ridge fit on the real stage-2 data (X2, y2).

    The ridge solution is linear in the labels, a(ỹ) = M ỹ, so the best labels solve one least-
    squares problem (``torch.linalg.lstsq``, minimum norm): exact reproduction once m₂ ≥ L."""
    d = X2.shape[1]
    target = learner.fit_stage2(W1, X2, y2)
    Xs = stage2_inputs(seed2, m2, d)
    b = learner.biases()
    P = learner.act.fn(Xs @ W1.T + b).double()
    A = P.T @ P / m2 + learner.ridge * torch.eye(learner.L, dtype=torch.float64)
    M = torch.linalg.solve(A, P.T / m2)  # (L, m2): a(ỹ) = M ỹ
    Phi = learner.act.fn(X2 @ W1.T + b).double()
    lhs, rhs = Phi @ M, (Phi @ target.a.double())[:, None]
    return torch.linalg.lstsq(lhs, rhs, driver="gelsd").solution[:, 0].to(X2.dtype)
