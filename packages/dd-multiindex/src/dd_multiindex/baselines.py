"""Equal-memory baselines: real labelled subsets chosen without distillation [R].

Each selects n real points (x, y) from a pool; a baseline of memory M keeps n = ⌊M/(d + 1)⌋ points
and trains the same two-stage learner on them (both stages), so it stores exactly as many numbers
as the distilled set (or fewer, never more). A new rule is one decorated function.

- ``random``: a uniform subset (the baseline the paper's "~d² real samples" refers to).
- ``herding``: kernel herding in the joint (x, y) space (Welling 2009; Chen et al. 2010; the
  coreset used in DC's comparisons): greedily add the point that moves the running mean of the
  chosen features closest to the pool mean.
- ``kcenter``: greedy k-center in (x, y) (Sener & Savarese 2018): each new point is the pool point
  farthest from the chosen ones, starting from the one nearest the pool mean.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .core import _gen

Selector = Callable[[torch.Tensor, torch.Tensor, int, int], torch.Tensor]
BASELINES: dict[str, Selector] = {}


def register_baseline(name: str) -> Callable[[Selector], Selector]:
    def deco(fn: Selector) -> Selector:
        BASELINES[name] = fn
        return fn

    return deco


def _joint(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(x, y/std(y)): the label weighs like one input coordinate."""
    return torch.cat([X, (y / y.std().clamp_min(1e-12))[:, None]], 1).double()


@register_baseline("random")
def random_subset(X: torch.Tensor, y: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    return torch.randperm(len(y), generator=_gen(seed), device="cpu")[:n].to(X.device)


@register_baseline("herding")
def herding(X: torch.Tensor, y: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    F = _joint(X, y)
    mu = F.mean(0)
    chosen: list[int] = []
    total = torch.zeros_like(mu)
    mask = torch.zeros(len(F), dtype=torch.bool, device=F.device)
    for t in range(min(n, len(F))):
        cand = ((total[None] + F) / (t + 1) - mu[None]).pow(2).sum(1)
        cand[mask] = float("inf")
        i = int(torch.argmin(cand))
        chosen.append(i)
        mask[i] = True
        total += F[i]
    return torch.tensor(chosen, dtype=torch.long, device=X.device)


@register_baseline("kcenter")
def kcenter(X: torch.Tensor, y: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    F = _joint(X, y)
    first = int(torch.argmin((F - F.mean(0)).pow(2).sum(1)))
    chosen = [first]
    dist = (F - F[first]).pow(2).sum(1)
    for _ in range(min(n, len(F)) - 1):
        i = int(torch.argmax(dist))
        chosen.append(i)
        dist = torch.minimum(dist, (F - F[i]).pow(2).sum(1))
    return torch.tensor(chosen, dtype=torch.long, device=X.device)


def select(name: str, X: torch.Tensor, y: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    if name not in BASELINES:
        raise KeyError(f"unknown baseline {name!r} (choose from {', '.join(BASELINES)})")
    if n < 1:
        raise ValueError(f"a baseline needs at least one point, got n={n}")
    return BASELINES[name](X, y, n, seed)
