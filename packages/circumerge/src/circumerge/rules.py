"""Merge rules: functions of a stack of task matrices, registered by name.

Every rule takes ``mats`` of shape (T, p, q) (the task updates expressed in one merge space: dense
ΔW_t in ``full``, R×R core matrices in ``core`` / ``circulant``, the V_t blocks in ``knots``),
per-task ``weights`` (T,), and returns the merged (p, q) matrix. A new rule is one decorated
function (mergekit's / peft's registry pattern)::

    @register_rule("mine")
    def mine(mats, weights, *, density, generator): ...

TA, TIES, magnitude-prune, DARE and DARE-TIES run peft's own code (``peft.utils.merge_utils``)
on the task stack, whatever the space (dense ΔW_t, KnOTS' V_t blocks, the R×R core matrices,
exact or sketched); TSV-Merge and Iso-C, which peft does not have, are ours.

Pure maths: no I/O, no global state (randomness only through the given ``generator``; peft's
global-generator draws are confined to ``fork_rng``).
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

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


_PEFT_MU = None


def peft_merge_utils():
    """peft's own rule code, ``peft.utils.merge_utils`` [C].

    If peft is already imported, that very module. Otherwise the same file of the installed peft
    is loaded on its own (it imports only torch): importing the ``peft`` package runs its
    ``__init__``, which pulls transformers (≈25 CPU-seconds here), and a merge needs only this
    module. Either way the code that runs is peft's."""
    global _PEFT_MU
    loaded = sys.modules.get("peft.utils.merge_utils")
    if loaded is not None:
        return loaded
    if _PEFT_MU is None:
        spec = importlib.util.find_spec("peft")  # locates peft without importing it
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("circumerge's TA / TIES / DARE rules run peft's code: pip install peft")
        path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "merge_utils.py"
        mspec = importlib.util.spec_from_file_location("circumerge._peft_merge_utils", path)
        module = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(module)
        _PEFT_MU = module
    return _PEFT_MU


def _seeded(fn: Callable[[], torch.Tensor], generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Run ``fn`` with torch's global generator set to ``generator``'s state (peft draws DARE's
    masks from the global generator) inside ``fork_rng``, so the caller's random state is left
    alone and the same ``generator`` gives the same masks; ``generator`` advances as if it had
    drawn them. On CUDA the device generator is seeded from one draw of ``generator``."""
    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft warns when density = 1 (nothing pruned)
        if cuda:
            torch.cuda.manual_seed(int(torch.randint(0, 2 ** 62, (1,), generator=generator)))
        torch.default_generator.set_state(generator.get_state())
        out = fn()
        generator.set_state(torch.default_generator.get_state())
    return out


def _peft(fn_name: str, mats: torch.Tensor, w: torch.Tensor, *args, generator=None) -> torch.Tensor:
    fn = getattr(peft_merge_utils(), fn_name)
    tensors = list(mats.unbind(0))
    return _seeded(lambda: fn(tensors, w, *args), generator, mats.device)


@register_rule("ta")
def task_arithmetic(mats, w, *, density, generator):
    """Task arithmetic [C]: Σ_t w_t M_t (peft's ``task_arithmetic``)."""
    return _peft("task_arithmetic", mats, w, generator=generator)


@register_rule("ties")
def ties(mats, w, *, density, generator):
    """TIES-merging [C] (Yadav et al. 2023), peft's ``ties(..., majority_sign_method="total")``:
    per task keep the top-``density`` magnitudes, elect the sign of Σ_t M_t on the unweighted
    trimmed tensors, average the weighted entries that agree with it."""
    return _peft("ties", mats, w, density, "total", generator=generator)


@register_rule("magnitude_prune")
def magnitude_prune(mats, w, *, density, generator):
    """peft's ``magnitude_prune`` [C]: trim to the top-``density`` magnitudes per task, weighted sum."""
    return _peft("magnitude_prune", mats, w, density, generator=generator)


@register_rule("dare")
def dare(mats, w, *, density, generator):
    """DARE (Yu et al. 2024) then task arithmetic [C]: peft's ``dare_linear`` (keep each entry with
    probability ``density``, one Bernoulli draw per task in task order, rescale by 1/density)."""
    return _peft("dare_linear", mats, w, density, generator=generator)


@register_rule("dare_ties")
def dare_ties(mats, w, *, density, generator):
    """DARE drop-and-rescale, then TIES sign election and disjoint mean [C]: peft's ``dare_ties``."""
    return _peft("dare_ties", mats, w, density, "total", generator=generator)


#: the registered rules whose code is peft's (the rest — tsv, iso — are ours)
PEFT_RULE_FUNCTIONS = {"ta": "task_arithmetic", "ties": "ties", "magnitude_prune": "magnitude_prune",
                       "dare": "dare_linear", "dare_ties": "dare_ties"}


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
