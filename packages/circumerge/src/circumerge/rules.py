"""Merge rules: functions of a stack of task matrices, registered by name.

Every rule takes ``mats`` of shape (T, p, q) (the task updates expressed in one merge space: dense
ΔW_t in ``full``, R×R core matrices in ``core`` / ``circulant``, the V_t blocks in ``knots``),
per-task ``weights`` (T,), and returns the merged (p, q) matrix. A new rule is one decorated
function (mergekit's / peft's registry pattern)::

    @register_rule("mine")
    def mine(mats, weights, *, density, generator): ...

Pure maths: no I/O, no global state (randomness only through the given ``generator``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

RuleFn = Callable[..., torch.Tensor]
RULES: dict[str, RuleFn] = {}
#: the density a rule uses when the caller gives none ([C] TIES paper: top-20 %; DARE: p = 0.5)
DEFAULT_DENSITY = {"ties": 0.2, "magnitude_prune": 0.2, "dare": 0.5, "dare_ties": 0.5}
#: rules that are linear in the task matrices (exact in every space)
LINEAR_RULES = frozenset({"ta"})


def register_rule(name: str) -> Callable[[RuleFn], RuleFn]:
    def deco(fn: RuleFn) -> RuleFn:
        RULES[name] = fn
        return fn

    return deco


def apply_rule(name: str, mats: torch.Tensor, weights: torch.Tensor | None = None, *,
               density: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Merge ``mats`` (T, p, q) with rule ``name``; ``weights`` default to ones."""
    if name not in RULES:
        raise ValueError(f"unknown merge rule {name!r} (known: {', '.join(sorted(RULES))})")
    if mats.ndim != 3:
        raise ValueError(f"mats must be (T, p, q), got shape {tuple(mats.shape)}")
    T = mats.shape[0]
    w = torch.ones(T, dtype=mats.dtype) if weights is None else torch.as_tensor(weights, dtype=mats.dtype)
    if w.shape != (T,):
        raise ValueError(f"expected {T} weights, got {tuple(w.shape)}")
    if density is None:
        density = DEFAULT_DENSITY.get(name, 1.0)
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    return RULES[name](mats, w.to(mats.device), density=density, generator=generator)


def _weighted(mats: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return mats * w.view(-1, 1, 1)


@register_rule("ta")
def task_arithmetic(mats, w, *, density, generator):
    """Task arithmetic [C]: Σ_t w_t M_t."""
    return torch.einsum("t,tpq->pq", w, mats)


def trim_top_magnitude(mats: torch.Tensor, density: float) -> torch.Tensor:
    """Keep, per task, the k = ⌊density · numel⌋ largest-magnitude entries (peft's
    ``magnitude_based_pruning``: ``torch.topk``, same k)."""
    if density >= 1.0:
        return mats
    flat = mats.reshape(mats.shape[0], -1)
    k = int(density * flat.shape[1])
    keep = torch.zeros_like(flat)
    if k > 0:
        keep.scatter_(1, flat.abs().topk(k, dim=1).indices, 1.0)
    return (flat * keep).reshape(mats.shape)


def elect_and_disjoint_mean(mats: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """TIES steps 2–3 as peft does them [C] (``calculate_majority_sign_mask(method="total")`` on the
    unweighted task tensors, then ``disjoint_merge`` of the weighted ones): elect the sign of
    Σ_t M_t per entry (0 counts as +), then average the weighted entries whose sign agrees with it
    (zeros never agree)."""
    elected = torch.where(mats.sum(0) >= 0, 1.0, -1.0).to(mats.dtype)
    agree = torch.sign(mats) == elected
    total = (_weighted(mats, w) * agree).sum(0)
    count = agree.sum(0).clamp(min=1).to(mats.dtype)
    return total / count


@register_rule("ties")
def ties(mats, w, *, density, generator):
    """TIES-merging [C] (Yadav et al. 2023; peft's ``ties``): trim to the top-``density``
    magnitudes per task, elect signs, disjoint mean of the weighted tasks."""
    return elect_and_disjoint_mean(trim_top_magnitude(mats, density), w)


@register_rule("magnitude_prune")
def magnitude_prune(mats, w, *, density, generator):
    """peft's ``magnitude_prune`` [C]: trim to the top-``density`` magnitudes per task, weighted sum."""
    return _weighted(trim_top_magnitude(mats, density), w).sum(0)


def dare_drop(mats: torch.Tensor, density: float, generator: torch.Generator) -> torch.Tensor:
    """DARE [C] (Yu et al. 2024; peft's ``random_pruning(rescale=True)``): keep each entry with
    probability ``density`` (one Bernoulli draw per task, in task order), rescale by 1/density."""
    if density >= 1.0:
        return mats
    keep = torch.stack([torch.bernoulli(torch.full_like(m, density), generator=generator) for m in mats])
    return mats * keep / density


@register_rule("dare")
def dare(mats, w, *, density, generator):
    """DARE followed by task arithmetic (peft's ``dare_linear``)."""
    return _weighted(dare_drop(mats, density, generator), w).sum(0)


@register_rule("dare_ties")
def dare_ties(mats, w, *, density, generator):
    """DARE drop-and-rescale, then TIES sign election and disjoint mean (peft's ``dare_ties``)."""
    return elect_and_disjoint_mean(dare_drop(mats, density, generator), w)


def apply_peft_rule(name: str, mats: torch.Tensor, w: torch.Tensor, *, density: float,
                    generator: torch.Generator) -> torch.Tensor:
    """The same rules through ``peft.utils.merge_utils`` itself (needs the ``peft`` extra; its
    import pulls transformers, so the registered rules above are the default and are tested to
    give peft's results). peft draws DARE's masks from torch's global generator: it is set to
    ``generator``'s state inside ``fork_rng``, so the draws equal ours."""
    from peft.utils import merge_utils as mu

    tensors = list(mats.unbind(0))
    fns = {"ta": lambda: mu.task_arithmetic(tensors, w),
           "ties": lambda: mu.ties(tensors, w, density, "total"),
           "magnitude_prune": lambda: mu.magnitude_prune(tensors, w, density),
           "dare": lambda: mu.dare_linear(tensors, w, density),
           "dare_ties": lambda: mu.dare_ties(tensors, w, density, "total")}
    if name not in fns:
        raise ValueError(f"peft has no rule {name!r} (it has: {', '.join(fns)})")
    import warnings

    with torch.random.fork_rng(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.default_generator.set_state(generator.get_state())
        out = fns[name]()
        generator.set_state(torch.default_generator.get_state())
    return out


def _orthogonalize(X: torch.Tensor) -> torch.Tensor:
    """Nearest matrix with orthonormal columns (or rows, if wide): P Qᵀ from X = P Σ Qᵀ."""
    P, _, Qh = torch.linalg.svd(X, full_matrices=False)
    return P @ Qh


@register_rule("tsv")
def tsv(mats, w, *, density, generator, rtol: float | None = None):
    """TSV-Merge [C] (Gargiulo et al. 2025): keep each task's top-(1/T) singular triplets,
    orthogonalize the concatenated singular vectors, recombine with the kept singular values.
    Triplets with σ ≈ 0 are dropped: their vectors are arbitrary and would change the
    orthogonalization (so the result does not depend on the basis of the merge space)."""
    T, p, q = mats.shape
    k = max(1, min(p, q) // T)
    U, S, Vh = torch.linalg.svd(_weighted(mats, w), full_matrices=False)
    rtol = 100 * torch.finfo(mats.dtype).eps if rtol is None else rtol
    top = S.max()
    keep = [int((S[t, :k] > rtol * top).sum()) for t in range(T)]
    U_cat = torch.cat([U[t, :, : keep[t]] for t in range(T)], 1)
    V_cat = torch.cat([Vh[t, : keep[t]] for t in range(T)], 0)
    S_cat = torch.cat([S[t, : keep[t]] for t in range(T)])
    if S_cat.numel() == 0:
        return torch.zeros(p, q, dtype=mats.dtype)
    return (_orthogonalize(U_cat) * S_cat) @ _orthogonalize(V_cat)


@register_rule("iso")
def iso(mats, w, *, density, generator, rtol: float = 1e-5):
    """Iso-C / CART-style spectrum flattening [C] (Marczak et al. 2025): the task-arithmetic sum with
    every nonzero singular value replaced by their mean (raises the effective rank)."""
    M = task_arithmetic(mats, w, density=density, generator=generator)
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    if S.numel() == 0 or S[0] == 0:
        return M
    k = int((S > rtol * S[0]).sum())
    return S[:k].mean() * (U[:, :k] @ Vh[:k])
