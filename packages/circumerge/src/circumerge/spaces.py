"""Merge spaces behind one interface, and the one-layer merge every caller goes through.

A space is a registered function::

    @register_space("name")
    def name(As, Bs, *, rule, weights, density, generator, opts) -> (A_star, B_star)

with ``As[t]`` of shape (r_t, n) and ``Bs[t]`` of shape (m, r_t) (ΔW_t = B_t A_t, the LoRA scaling
folded into B_t), returning merged factors with ΔW* = B* A* and rank ≤ Σ_t r_t. Spaces never form
an m×n matrix unless they are the dense baselines (``full``, ``knots``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

SpaceFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
SPACES: dict[str, SpaceFn] = {}


def register_space(name: str) -> Callable[[SpaceFn], SpaceFn]:
    def deco(fn: SpaceFn) -> SpaceFn:
        SPACES[name] = fn
        return fn

    return deco


@dataclass(frozen=True)
class SpaceOptions:
    """Knobs some spaces read; see ``config.MergeConfig`` for their provenance."""

    sketch_size: int | str = "auto"  # circulant: "auto", "none" (no sampling) or an int [R]
    sketch_target: float = 0.25  # circulant auto: target Gram distortion ε, s = R/ε² in [2R, d] [R]
    rank_tol: float = 1e-5  # relative singular-value floor for bases [C] (KnOTS drops < 1e-5)
    oversample: int = 8  # full: extra columns of the randomized range finder
    power_iters: int = 2  # full: subspace iterations of the randomized range finder


def layer_generator(seed: int, layer_index: int = 0) -> torch.Generator:
    """A generator per (seed, layer): layers are independent and each is reproducible alone."""
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(layer_index))


def check_factors(As: Sequence[torch.Tensor], Bs: Sequence[torch.Tensor]) -> tuple[int, int]:
    if len(As) != len(Bs) or not As:
        raise ValueError(f"need as many A as B factors (≥1), got {len(As)} and {len(Bs)}")
    n, m = As[0].shape[1], Bs[0].shape[0]
    for t, (A, B) in enumerate(zip(As, Bs, strict=True)):
        if A.ndim != 2 or B.ndim != 2 or A.shape[0] != B.shape[1]:
            raise ValueError(f"task {t}: A {tuple(A.shape)} and B {tuple(B.shape)} are not a LoRA pair")
        if A.shape[1] != n or B.shape[0] != m:
            raise ValueError(f"task {t}: shape ({B.shape[0]}x{A.shape[1]}) differs from ({m}x{n})")
    return m, n


def compress(A: torch.Tensor, B: torch.Tensor, out_rank: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Best rank-``out_rank`` factors of B A without forming it: QR of both factors, SVD of the
    k×k middle; singular values split evenly between the factors. Cost O((m + n) k²)."""
    k = A.shape[0]
    if out_rank is None or out_rank >= k:
        return A, B
    Qb, Rb = torch.linalg.qr(B)
    Qa, Ra = torch.linalg.qr(A.T)
    U, S, Vh = torch.linalg.svd(Rb @ Ra.T)
    root = S[:out_rank].sqrt()
    return (root[:, None] * Vh[:out_rank]) @ Qa.T, (Qb @ U[:, :out_rank]) * root


def merge_layer(As: Sequence[torch.Tensor], Bs: Sequence[torch.Tensor], *, space: str = "core",
                rule: str = "ta", weights: Sequence[float] | torch.Tensor | None = None,
                density: float | None = None, seed: int = 0, layer_index: int = 0,
                out_rank: int | None = None, opts: SpaceOptions | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge one layer's LoRA pairs into one pair (A*, B*), ΔW* = B* A*.

    ``As[t]``: (r_t, n); ``Bs[t]``: (m, r_t); ranks may differ. Returns A* (k, n), B* (m, k) with
    k ≤ Σ r_t (≤ ``out_rank`` when given). Deterministic for (seed, layer_index).
    """
    from .config import rule_error

    if space not in SPACES:
        raise ValueError(f"unknown merge space {space!r} (known: {', '.join(SPACES)})")
    if rule_error(rule):
        raise ValueError(rule_error(rule))
    check_factors(As, Bs)
    out_dtype = torch.promote_types(As[0].dtype, Bs[0].dtype)
    # half-precision factors are upcast losslessly to float32 to compute (no FFT / SVD in bf16 on
    # CPU); the result is returned in the factors' own dtype
    dtype = torch.float32 if out_dtype in (torch.float16, torch.bfloat16) else out_dtype
    As = [a.to(dtype) for a in As]
    Bs = [b.to(dtype) for b in Bs]
    w = torch.ones(len(As), dtype=dtype) if weights is None else torch.as_tensor(weights, dtype=dtype)
    if w.shape != (len(As),):
        raise ValueError(f"expected {len(As)} weights, got {w.numel()}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"weights must be finite numbers, got {w.tolist()}")
    if not bool((w != 0).any()):
        raise ValueError("weights are all zero: the merged adapter would be empty")
    gen = layer_generator(seed, layer_index)
    A, B = SPACES[space](As, Bs, rule=rule, weights=w, density=density, generator=gen,
                         opts=opts or SpaceOptions())
    A, B = compress(A, B, out_rank)
    return A.to(out_dtype), B.to(out_dtype)


def dense(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """ΔW = B A (tests and small layers only)."""
    return B @ A


def rank_blocks(As) -> list[slice]:
    """The rows of each task's A factor inside the stacked A (heterogeneous ranks allowed)."""
    out, start = [], 0
    for a in As:
        out.append(slice(start, start + a.shape[0]))
        start += a.shape[0]
    return out


# populate the registry: the exact baselines and the (reconstructed) circulant space
from . import baselines as _baselines  # noqa: E402,F401
from . import core as _core  # noqa: E402,F401

