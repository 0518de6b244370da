"""Our former hand-written TA / TIES / magnitude-prune / DARE / DARE-TIES (circumerge ≤ 0.2.0),
kept only as a test oracle: the registered rules now run peft's ``merge_utils``, and the tests
check that the two give the same numbers."""

from __future__ import annotations

import torch


def _weighted(mats, w):
    return mats * w.view(-1, 1, 1)


def trim_top_magnitude(mats, density):
    if density >= 1.0:
        return mats
    flat = mats.reshape(mats.shape[0], -1)
    k = int(density * flat.shape[1])
    keep = torch.zeros_like(flat)
    if k > 0:
        keep.scatter_(1, flat.abs().topk(k, dim=1).indices, 1.0)
    return (flat * keep).reshape(mats.shape)


def elect_and_disjoint_mean(mats, w):
    elected = torch.where(mats.sum(0) >= 0, 1.0, -1.0).to(mats.dtype)
    agree = torch.sign(mats) == elected
    total = (_weighted(mats, w) * agree).sum(0)
    count = agree.sum(0).clamp(min=1).to(mats.dtype)
    return total / count


def dare_drop(mats, density, generator):
    if density >= 1.0:
        return mats
    keep = torch.stack([torch.bernoulli(torch.full_like(m, density), generator=generator) for m in mats])
    return mats * keep / density


def ta(mats, w, *, density, generator):
    return torch.einsum("t,tpq->pq", w, mats)


def ties(mats, w, *, density, generator):
    return elect_and_disjoint_mean(trim_top_magnitude(mats, density), w)


def magnitude_prune(mats, w, *, density, generator):
    return _weighted(trim_top_magnitude(mats, density), w).sum(0)


def dare(mats, w, *, density, generator):
    return _weighted(dare_drop(mats, density, generator), w).sum(0)


def dare_ties(mats, w, *, density, generator):
    return elect_and_disjoint_mean(dare_drop(mats, density, generator), w)


ORACLE = {"ta": ta, "ties": ties, "magnitude_prune": magnitude_prune, "dare": dare,
          "dare_ties": dare_ties}
